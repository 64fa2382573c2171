"""The dsv4_host action run by ansible-playbook: the preflight (state=check) with a lock takes over a lock whose
run died on this controller, naming whose run and its phase, and records this controller; a live holder is
named with what to do; without a lock the module's result comes back as it is."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.unit.plugins.runner import dead_runs_lock, run_play


def preflight(root: Path, lock: str, run_id: str) -> dict:
    """dsv4_host's preflight taking the lock `lock` under `root`, on a host with no GPU to check."""
    return {"dsv4_host": {"state": "check", "gpu_query_command": ["false"],
                          "services": {"manager": "supervisor", "install_root": str(root)},
                          "lock": {"path": str(root / lock), "run_id": run_id, "owner": "bob@ops",
                                   "phase": "preflight"}}}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, list[dict]]:
    """One play: the preflight over a dead run's lock, again for another run (the holder, this play, alive), and
    once without a lock. The install root, the dead pid, the results."""
    tmp_path = tmp_path_factory.mktemp("host")
    root = tmp_path / "root"
    root.mkdir()
    dead_pid = dead_runs_lock(tmp_path, root / "deploy.lock", "r0")
    return root, dead_pid, run_play(tmp_path, [
        preflight(root, "deploy.lock", "r1"),
        preflight(root, "deploy.lock", "r2"),
        {"dsv4_host": {"state": "check", "gpu_query_command": ["false"],
                       "services": {"manager": "supervisor", "install_root": str(root)}}},
    ])


def test_the_preflight_takes_over_a_dead_runs_lock_and_records_this_controller(
        run: tuple[Path, int, list[dict]]) -> None:
    root, dead_pid, results = run
    over = results[0]
    assert not over.get("failed") and over["previous"]["run_id"] == "r0", over
    assert over["msg"] == (f"previous run r0 of alice@ops died during phase 'switch' (its controller process "
                           f"{dead_pid} is gone); took over its lock, this run repairs what it left")
    record = json.loads((root / "deploy.lock").read_text())
    assert (record["run_id"], record["owner"], record["controller"]) == ("r1", "bob@ops", socket.gethostname())
    assert record["controller_pid"] != dead_pid


def test_a_live_holder_is_named_with_what_to_do(run: tuple[Path, int, list[dict]]) -> None:
    root, _, results = run
    held = results[1]
    assert held["failed"] and held["holder"]["run_id"] == "r1", held
    assert "another run holds" in held["msg"] and held["msg"].endswith("; that run is alive: wait for it to finish")
    assert json.loads((root / "deploy.lock").read_text())["run_id"] == "r1"


def test_without_a_lock_the_preflight_takes_none(run: tuple[Path, int, list[dict]]) -> None:
    _, _, results = run
    plain = results[2]
    assert not plain.get("failed") and "holder" not in plain and "msg" not in plain, plain
    assert plain["services"] == {} and plain["kept_warm"] is False
