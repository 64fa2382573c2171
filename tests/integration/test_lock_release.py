"""The deploy lock at the end of a deploy on the embedded host: a promoted deploy releases it with its
verified record (the always: release then has nothing to do; an unchanged one does the same, the record
being the same task), a rolled-back one in the always: release; neither leaves it behind, and the report
keeps every file it writes. Two deploys on one host, to stay lean."""

from __future__ import annotations

import json
import re

import pytest

from tests.integration.simhost import SMALL_SOAK, SimHost

pytestmark = pytest.mark.integration

FAST = ["-e", "readiness_deadline_s=20", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK]
# The end's own release, and what it did: skipped when the verified record released the lock already.
END_RELEASE = re.compile(r"TASK \[dsv4_run : Release the deploy lock\][^\n]*\n(\w+)")


def end_release(stdout: str) -> str:
    """What the always: release did ('ok', 'skipping', ...), in the output of a run at -v."""
    found = END_RELEASE.search(stdout)
    assert found, stdout[-3000:]
    return found.group(1).rstrip(":")


def good(host: SimHost) -> list[str]:
    return json.loads((host.install_root / "state.json").read_text()).get("good", [])


def test_a_promoted_deploy_releases_the_lock_with_its_verified_record(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-v", *FAST)  # -v: skipped tasks are printed
    assert proc.returncode == 0, proc.stdout[-5000:]
    release = sim_host.active_release()
    assert sim_host.report()["verdict"] == "promoted" and good(sim_host)[-1] == release
    assert not (sim_host.install_root / "deploy.lock").exists()
    assert end_release(proc.stdout) == "skipping"
    # The report's files, the heatmap included (matplotlib is installed: the plot extra).
    written = {p.name for p in (sim_host.reports / release).iterdir()}
    assert {"report.json", "report.md", "needle-heatmap.png"} <= written


def test_a_rolled_back_deploy_releases_it_at_the_end(sim_host: SimHost) -> None:
    before = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", "-v", "-e", '{"sim_faults_by_role": {"prefill": "crash_on_start"}}', *FAST)
    assert proc.returncode != 0
    assert sim_host.report()["verdict"] == "rolled_back" and sim_host.active_release() == before
    assert not (sim_host.install_root / "deploy.lock").exists()
    assert end_release(proc.stdout) == "ok"
