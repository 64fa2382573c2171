"""dsv4_write_report run by ansible-playbook on the controller: a failed run's cause (the gate, the hosts it names,
their log lines, the fix) is written as data into report.json, and the log lines under their host in report.md."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.plugins.runner import run_play

CAUSE = {"stage": "smoke", "message": "gate smoke failed on gpu2: 500 from the router", "task": "Stop here",
         "gate": "smoke", "hosts": ["gpu2"], "logs": {"gpu2": ["sglang-dsv4-decode: KV transfer failed"]},
         "fix": "fix what they name and deploy again"}


def test_a_failed_runs_cause_is_written_as_data_and_its_log_lines_under_their_host(tmp_path: Path) -> None:
    plan = {"release_id": "r2", "topology": "pd", "endpoint": "http://127.0.0.1:8000", "memory": []}
    task = {"dsv4_write_report": {"reports_dir": str(tmp_path / "reports"), "verdict": "rolled_back", "plan": plan,
                                  "previous_release": "r1", "serving_release": "r1", "failed_gate": "smoke",
                                  "failure": CAUSE["message"], "failure_logs": CAUSE["logs"], "cause": CAUSE}}
    written = run_play(tmp_path, [{"name": "Write the report", **task}])[0]
    assert not written.get("failed") and len(written["paths"]) >= 2, written
    latest = tmp_path / "reports" / "latest"
    report = json.loads((latest / "report.json").read_text())
    assert report["cause"] == CAUSE and report["failed_gate"] == "smoke"
    md = (latest / "report.md").read_text()
    assert "## Log since the start on gpu2" in md and "sglang-dsv4-decode: KV transfer failed" in md, md
