"""The needle_recall fault gives a grid cell a known recall, and the needle gate's rule tells a
50 %-recall cell from a 95 %-recall one at its stated risks (dsv4deploy.gates.recall_rule)."""

from __future__ import annotations

from pathlib import Path

import pytest
from simhelpers import Launcher, free_port, sim_env

from dsv4deploy.gates import GateStatus, run_needle
from dsv4deploy.gates.recall_rule import BAD_RECALL, CLEAN_RECALL, RecallRule
from dsv4deploy.sim.faults import FaultError, parse_faults

pytestmark = pytest.mark.integration

RULE = RecallRule()  # the gate's default schedule


def _needle(launcher: Launcher, state_dir: Path, faults: str):
    port = free_port()
    launcher.sim(["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4", "--tp-size", "2",
                  "--host", "127.0.0.1", "--port", str(port), "--json-model-override-args", '{"index_topk": 1024}'],
                 sim_env(state_dir, faults))
    # the 1000-token row is clean; the fault holds from 3000 tokens, so the 4000 row recalls with its probability
    return run_needle(f"http://127.0.0.1:{port}", "dsv4", context_lengths=[1000, 4000], depths=[0.5],
                      required_tokens=4000, deadline_s=120, rule=RULE)


def test_a_50_percent_cell_fails_and_a_95_percent_cell_passes_at_the_stated_risks(launcher: Launcher,
                                                                                  state_dir: Path) -> None:
    # the design: a 50 % cell passes with at most 0.073, a 90 % one (so a 95 % one too) with at least 0.975
    assert RULE.pass_probability(BAD_RECALL) < 0.08 and RULE.pass_probability(CLEAN_RECALL) > 0.97
    bad = _needle(launcher, state_dir, "needle_recall=0.5,needle_recall_from=3000")
    assert bad.status is GateStatus.FAILED, bad.summary
    cell = next(c for c in bad.evidence["cells"] if c["context_tokens"] == 4000)
    assert cell["outcome"] == "missed" and cell["asked_trials"] - cell["recalled_trials"] == 5
    assert len({t["code"] for t in cell["trials"]}) == len(cell["trials"])  # each trial its own needle
    assert "1 of 2 cells within 4000 tokens missed the needle" in bad.summary
    good = _needle(launcher, state_dir / "b", "needle_recall=0.95,needle_recall_from=3000")
    assert good.status is GateStatus.PASSED, good.summary
    assert good.evidence["rule"]["cell_pass_at_bad"] == 0.0727


def test_the_fault_takes_a_probability() -> None:
    assert parse_faults("needle_recall=0.9,needle_recall_from=4000").needle_recall == 0.9
    with pytest.raises(FaultError, match="out of range"):
        parse_faults("needle_recall=1.5")
