"""`dsv4_host_status` (what `dsv4deploy status` reads on each host) and the table it is shown as: the active
release and how it stands, its engine, its services' state, and the verify timer's last result."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.modules.dsv4_host_status import services
from dsv4deploy.plan.status import HostStatus, format_status
from tests.unit.plugins.runner import run_module

PROM = """# HELP dsv4deploy_gate_passed 1 passed
dsv4deploy_gate_passed{deployment="d",gate="canary_needle"} 1.0
dsv4deploy_gate_passed{deployment="d",gate="tool_calls"} 0.0
dsv4deploy_release_info{deployment="d",release="r1"} 1.0
dsv4deploy_last_verification_timestamp_seconds{deployment="d"} 1.7649e+09
"""


def _installed(tmp_path: Path, verified: bool) -> Path:
    root = tmp_path / "root"
    release = root / "releases" / "r1"
    (release / "bin").mkdir(parents=True)
    for name in ("sglang-dsv4-prefill", "sglang-dsv4-router"):
        (release / "bin" / f"serve-{name}.sh").write_text("#!/bin/sh\n")
    (release / "manifest.json").write_text(json.dumps({"content_hash": "h"}))
    (release / "spec.json").write_text(json.dumps({"host": "gpu1", "deployment": {
        "hosts": {"gpu1": {"sglang_version": "0.5.23"}}}}))
    (root / "current").symlink_to(release)
    (root / "state.json").write_text(json.dumps({"good": ["r1"] if verified else [], "history": ["r1"]}))
    return root


def test_an_active_release_with_nothing_running_and_a_failed_timer_run(tmp_path: Path) -> None:
    root = _installed(tmp_path, verified=True)
    (root / "verify-timer" / "metrics").mkdir(parents=True)
    (root / "verify-timer" / "metrics" / "dsv4deploy-d.prom").write_text(PROM)
    out = run_module("dsv4_host_status", tmp_path, check_mode=True, install_root=str(root), manager="supervisor")
    assert (out["active"], out["release_status"], out["engine"]) == ("r1", "verified", "0.5.23")
    # No supervisord of ours runs there: nothing of ours does.
    assert [(s["name"], s["state"]) for s in out["services"]] == [
        ("sglang-dsv4-router", "stopped"), ("sglang-dsv4-prefill", "stopped")]
    assert out["verify_timer"] == {"at": 1.7649e9, "gates": {"canary_needle": True, "tool_calls": False},
                                   "release": "r1"}
    lines = format_status([HostStatus("gpu1", str(root), active=out["active"], release_status=out["release_status"],
                                      created=out["created"], engine=out["engine"], services=out["services"],
                                      verify_timer=out["verify_timer"])])
    assert lines[0] == f"gpu1 ({root})"
    assert lines[1].startswith("  release r1 (verified, installed 20")
    assert lines[2] == "  engine: sglang 0.5.23"
    assert "    sglang-dsv4-router   stopped   -" in lines
    assert lines[-1] == "  verify timer: last run 2025-12-05 02:00:00 UTC, FAILED (tool_calls), on release r1"


def test_the_timer_s_files_swapped_by_the_service_user_are_neither_waited_on_nor_followed(tmp_path: Path) -> None:
    """Its metrics folder is the service user's: a FIFO there would hang the status (root's), a link would read a
    root-only file into it. Both are passed over, the plain file of the folder's owner still read."""
    root = _installed(tmp_path, verified=True)
    metrics = root / "verify-timer" / "metrics"
    metrics.mkdir(parents=True)
    os.mkfifo(metrics / "dsv4deploy-a.prom")
    secret = tmp_path / "root-only.prom"
    secret.write_text(PROM.replace('release="r1"', 'release="leaked"'))
    secret.chmod(0o600)
    (metrics / "dsv4deploy-b.prom").symlink_to(secret)
    (metrics / "dsv4deploy-c.prom").write_text(PROM)
    out = run_module("dsv4_host_status", tmp_path, check_mode=True, install_root=str(root), manager="supervisor")
    assert out["verify_timer"]["release"] == "r1"


def test_a_release_whose_gates_have_not_passed_and_no_timer(tmp_path: Path) -> None:
    root = _installed(tmp_path, verified=False)
    out = run_module("dsv4_host_status", tmp_path, check_mode=True, install_root=str(root), manager="supervisor")
    assert out["release_status"] == "unverified" and out["verify_timer"] == {}
    lines = format_status([HostStatus("gpu1", str(root), active="r1", release_status="unverified")])
    assert lines[-1] == "  verify timer: no result under this install root (not installed here, or not run yet)"
    assert format_status([HostStatus("gpu2", "/x", error="unreachable: ssh")]) == ["gpu2 (/x)", "  unreachable: ssh"]


class _Manager:
    """A service manager's answers (the systemd/supervisord clients are tested on their own)."""

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states

    def status(self, name: str) -> dict:
        state = self.states[name]
        return {"name": name, "state": state, "running": state == "RUNNING", "pid": 7 if state != "STOPPED" else None}


def test_a_program_within_its_startsecs_is_starting_not_stopped(tmp_path: Path) -> None:
    root = _installed(tmp_path, verified=True)
    found = services(_Manager({"sglang-dsv4-router": "STARTING", "sglang-dsv4-prefill": "RUNNING"}), str(root))
    assert [(s["name"], s["state"], s["pid"]) for s in found] == [
        ("sglang-dsv4-router", "starting", 7), ("sglang-dsv4-prefill", "running", 7)]
    lines = format_status([HostStatus("gpu1", str(root), active="r1", release_status="verified", services=found)])
    assert "    sglang-dsv4-router   starting  7" in lines
