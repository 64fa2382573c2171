"""The accuracy gate and the parity suite against simulated servers (PD behind the real sglang-router)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from simhelpers import Launcher, free_port, sim_env, wait_status
from test_router_pd import TOPK_1024, _worker, start_pd

from dsv4deploy.gates import GateStatus
from dsv4deploy.gates.bake import BakeSettings
from dsv4deploy.gates.parity import collect, compare
from dsv4deploy.gates.quality_runner import accuracy_gate, parity_gate, parity_topology
from dsv4deploy.gates.runner import GateSettings, run_gate
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


def _served(launcher: Launcher, state: Path, faults: str = "", topk: int = 1024) -> str:
    """A combined server with the tool-call parser the bake's tool-call probe needs (as the recipes start it)."""
    port = free_port()
    launcher.sim(_worker(port, "--json-model-override-args", f'{{"index_topk": {topk}}}', "--tool-call-parser",
                         "deepseekv4", "--reasoning-parser", "deepseek-v4"),
                 sim_env(state, faults, DSV4_SIM_TIME_SCALE="1"), name="combined")
    url = f"http://127.0.0.1:{port}"
    wait_status(f"{url}/health", 200)
    return url


def _bake_plan(url: str) -> dict:
    return {"endpoint": url, "served_model_name": "dsv4", "topology": "combined", "workers": [],
            "reference_scores": FLASH_REFERENCES}


CANARY_BAKE = BakeSettings(seconds=1, interval_s=1, failure_limit=0, canary_questions=16, canary_prompts=3,
                           probe_sessions=2, canary_tokens=500)


def test_bake_canaries_pass_the_release_they_recorded_and_fail_one_that_miscalculates_or_drifted(
        launcher: Launcher, tmp_path: Path) -> None:
    clean = _served(launcher, tmp_path / "a")
    record = parity_gate(_bake_plan(clean), GateSettings()).evidence["record"]
    baked = run_gate("bake", _bake_plan(clean), GateSettings(), bake=CANARY_BAKE, parity_baseline=record)
    analyses = {a["name"]: a for a in baked.evidence["intervals"][0]["analyses"]}
    assert baked.status is GateStatus.PASSED, baked.summary
    assert analyses["accuracy canary"]["phase"] == "successful" and analyses["accuracy canary"]["value"] == 0
    assert analyses["parity canary"]["detail"].startswith("0 of 3 prompts out of tolerance 0.05")
    print(f"bake interval with canaries (16 questions, 3 prompts): {baked.evidence['intervals'][0]['seconds']} s")

    # Most answers wrong: significantly above the refused 6 % (the accuracy gate's floor), the interval fails.
    wrong = _served(launcher, tmp_path / "b", "wrong_answers=0.8")
    failed = run_gate("bake", _bake_plan(wrong), GateSettings(), bake=CANARY_BAKE, parity_baseline=record)
    assert failed.status is GateStatus.FAILED and "accuracy canary" in failed.summary, failed.summary
    assert "first wrong: question" in failed.summary

    # A server that computes otherwise than when the record was taken (index_topk 512 behind the same plan).
    drifted = _served(launcher, tmp_path / "c", topk=512)
    same_place = {**record, "topology": parity_topology(_bake_plan(drifted))}
    moved = run_gate("bake", _bake_plan(drifted), GateSettings(), bake=CANARY_BAKE, parity_baseline=same_place)
    assert moved.status is GateStatus.FAILED and "parity canary" in moved.summary, moved.summary
    assert "plain-3200" in moved.summary


def test_the_verification_timer_runs_the_canaries_against_the_active_releases_own_record(
        launcher: Launcher, tmp_path: Path) -> None:
    from dsv4deploy.gates import watch

    clean = _served(launcher, tmp_path / "a")
    root = tmp_path / "install"
    (root / "releases" / "r1").mkdir(parents=True)
    (root / "current").symlink_to(root / "releases" / "r1")
    record = parity_gate(_bake_plan(clean), GateSettings()).evidence["record"]
    (root / "state.json").write_text(json.dumps({"good": ["r1"], "parity": {"r1": {**record, "release": "r1"}}}))
    config = {"deployment": "prod", "endpoint": clean, "model": "dsv4", "textfile_dir": str(tmp_path / "tf"),
              "install_root": str(root), "canary_tokens": 500, "probe_sessions": 1, "canary_questions": 8,
              "canary_prompts": 2, "accuracy_expected": 0.99}
    path = tmp_path / "watch.json"
    path.write_text(json.dumps(config))
    assert watch.main(["--config", str(path), "--once"]) == 0
    prom = (tmp_path / "tf" / "dsv4deploy-prod.prom").read_text()
    assert 'gate="accuracy_canary"} 1.0' in prom and 'gate="parity_canary"} 1.0' in prom

    path.write_text(json.dumps({**config, "endpoint": _served(launcher, tmp_path / "b", "wrong_answers=0.8")}))
    assert watch.main(["--config", str(path), "--once"]) == 1
    prom = (tmp_path / "tf" / "dsv4deploy-prod.prom").read_text()
    assert 'gate="accuracy_canary"} 0.0' in prom and 'gate="parity_canary"} 1.0' in prom
