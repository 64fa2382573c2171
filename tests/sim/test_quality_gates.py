"""The accuracy gate and the parity suite against simulated servers (PD behind the real sglang-router)."""

from __future__ import annotations

from pathlib import Path

import pytest
from simhelpers import Launcher, free_port, sim_env, wait_status
from test_router_pd import TOPK_1024, _worker, start_pd

from dsv4deploy.gates import GateStatus
from dsv4deploy.gates.parity import collect, compare
from dsv4deploy.gates.quality_runner import accuracy_gate
from dsv4deploy.gates.runner import GateSettings
from dsv4deploy.isolate import parity_suite

pytest.importorskip("sglang_router", reason="needs sglang-router 0.3.2 (extra 'sim')")
pytestmark = pytest.mark.integration

FLASH_REFERENCES = {"builtin": {"score": 0.99, "source": "profiles.yml"}}


def _combined(launcher: Launcher, state: Path, faults: str = "") -> str:
    port = free_port()
    launcher.sim(_worker(port, *TOPK_1024), sim_env(state, faults, DSV4_SIM_TIME_SCALE="1"), name="combined")
    url = f"http://127.0.0.1:{port}"
    wait_status(f"{url}/health", 200)
    return url


@pytest.mark.parametrize(("faults", "status"), [("", GateStatus.PASSED), ("wrong_answers=0.3", GateStatus.FAILED)])
def test_accuracy_gate_passes_a_clean_server_and_fails_one_that_miscalculates(
        launcher: Launcher, tmp_path: Path, faults: str, status: GateStatus) -> None:
    url = _combined(launcher, tmp_path, faults)
    plan = {"endpoint": url, "served_model_name": "dsv4", "reference_scores": FLASH_REFERENCES}
    result = accuracy_gate(plan, GateSettings())
    assert result.status is status, result.summary
    ev = result.evidence
    assert ev["expected"] == 0.99 and ev["n"] >= 10 and "interval_95" in ev and "standard_error" in ev
    if status is GateStatus.FAILED:
        wrong = ev["wrong"][0]
        assert wrong["got"] != wrong["expected"] and wrong["question"].startswith(wrong["question"][:10])
        assert ev["score"] < 0.94 and ev["decision"]["outcome"] == "failed"
    else:
        assert ev["score"] == 1.0 and result.seconds < 10  # the embedded host's cost (docs/parity.md)


def test_parity_suite_says_pd_specific_for_a_damaged_kv_transfer(module_launcher: Launcher,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    combined = _combined(module_launcher, tmp_path_factory.mktemp("host"))
    clean_pd = start_pd(module_launcher, tmp_path_factory.mktemp("host"), topk=TOPK_1024)
    wait_status(f"{clean_pd}/readiness", 200, timeout=30)
    baseline = collect(combined)
    decision, rows, _ = compare(collect(clean_pd), baseline, 0.05)
    assert decision.outcome == "passed", decision.reason
    assert all(r["first_divergent"] is None and r["max_delta"] == 0 for r in rows)

    damaged = start_pd(module_launcher, tmp_path_factory.mktemp("host"), topk=TOPK_1024,
                       prefill_faults="pd_transfer_truncate", decode_faults="pd_transfer_truncate")
    wait_status(f"{damaged}/readiness", 200, timeout=30)
    pd_record = {"outputs": collect(damaged), "tolerance": 0.05}
    sides = {"pd": {"gates": [{"name": "parity", "evidence": {"record": pd_record}}]},
             "combined": {"gates": [{"name": "parity", "evidence": {"record": {"outputs": baseline}}}]}}
    parity = parity_suite.comparison(sides)
    assert parity is not None and parity["outcome"] == "failed"
    by_prompt = {r["prompt"]: r for r in parity["prompts"]}
    # Inside the sliding window the damaged transfer loses nothing; past it the tokens or logprobs move.
    assert by_prompt["plain-24"]["within_tolerance"] and by_prompt["tools-1"]["within_tolerance"]
    assert not by_prompt["plain-1600"]["within_tolerance"]
    assert parity_suite.with_parity(("clean", "passes"), parity)[0] == "pd_specific"
