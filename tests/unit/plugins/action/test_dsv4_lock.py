"""The dsv4_lock action run by ansible-playbook: it fills in the controller's identity, takes over a lock whose
run died on this controller saying whose run and in which phase, and names a live holder (or one on another
controller) with what to do; the checks it makes of a holder, with and without /proc."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.action import dsv4_lock as lock_action
from ansible_collections.dsv4.deploy.plugins.action.dsv4_lock import boot_identity, holder_is_dead, process_start
from tests.unit.plugins.runner import dead_runs_lock, run_play, take_lock


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, list[dict]]:
    """One play: take a free lock, then the same lock for another run (its holder, this play, alive); take over
    a dead run's lock; ask for one taken on another controller; release the first. The folder, the dead pid,
    the results."""
    tmp_path = tmp_path_factory.mktemp("lock")
    dead_pid = dead_runs_lock(tmp_path, tmp_path / "dead.lock", "r0")
    take_lock(tmp_path, "r9")  # on controller ctl, pid 4242: {tmp_path}/root/deploy.lock
    lock = {"path": str(tmp_path / "free.lock"), "owner": "bob@ops"}
    return tmp_path, dead_pid, run_play(tmp_path, [
        {"dsv4_lock": {**lock, "run_id": "r1", "phase": "preflight"}},
        {"dsv4_lock": {**lock, "run_id": "r2"}},
        {"dsv4_lock": {"path": str(tmp_path / "dead.lock"), "run_id": "r3", "owner": "bob@ops"}},
        {"dsv4_lock": {"path": str(tmp_path / "root" / "deploy.lock"), "run_id": "r4"}},
        {"dsv4_lock": {**lock, "run_id": "r1", "state": "absent"}},
    ])


def test_the_lock_records_this_controller_and_a_live_holder_is_named_with_what_to_do(
        run: tuple[Path, int, list[dict]]) -> None:
    _, _, results = run
    taken, held = results[0], results[1]
    assert taken["changed"] and not taken.get("failed"), taken
    holder = held["holder"]
    assert (holder["run_id"], holder["owner"], holder["controller"]) == ("r1", "bob@ops", socket.gethostname())
    assert holder["controller_boot"] == boot_identity() and holder["controller_start"]
    assert held["failed"] and held["msg"].endswith("; that run is alive: wait for it to finish"), held["msg"]


def test_a_dead_runs_lock_is_taken_over_saying_whose_and_in_which_phase(run: tuple[Path, int, list[dict]]) -> None:
    tmp_path, dead_pid, results = run
    over = results[2]
    assert over["changed"] and not over.get("failed"), over
    assert over["msg"] == (f"previous run r0 of alice@ops died during phase 'switch' (its controller process "
                           f"{dead_pid} is gone); took over its lock, this run repairs what it left")
    assert json.loads((tmp_path / "dead.lock").read_text())["run_id"] == "r3"


def test_a_lock_taken_on_another_controller_is_never_taken_over_and_says_how_to_free_it(
        run: tuple[Path, int, list[dict]]) -> None:
    tmp_path, _, results = run
    path = tmp_path / "root" / "deploy.lock"
    other = results[3]
    assert other["failed"] and other["msg"].endswith(
        f"; it was taken on controller ctl, which this run cannot check: if no run is alive there, remove {path} "
        "on the host and retry"), other["msg"]
    assert json.loads(path.read_text())["run_id"] == "r9"


def test_the_run_that_holds_the_lock_releases_it(run: tuple[Path, int, list[dict]]) -> None:
    tmp_path, _, results = run
    assert results[4]["changed"] and not (tmp_path / "free.lock").exists()


def _holders() -> tuple[dict, dict, int]:
    """This controller, a live holder (this process) and the pid of a process that has exited."""
    me = {"controller": "ctl", "controller_boot": boot_identity()}
    live = {**me, "controller_pid": os.getpid(), "controller_start": process_start(os.getpid())}
    child = subprocess.Popen(["true"])
    child.wait()
    return me, live, child.pid


def test_dead_and_live_holders_are_told_apart() -> None:
    me, live, dead_pid = _holders()
    assert live["controller_boot"] and live["controller_start"]
    assert holder_is_dead(live, me) is None
    assert "is gone" in holder_is_dead({**live, "controller_pid": dead_pid}, me)
    assert "another process" in holder_is_dead({**live, "controller_start": "1"}, me)
    # Another controller's process cannot be checked from here: never taken over.
    assert holder_is_dead({**live, "controller": "elsewhere", "controller_pid": dead_pid}, me) is None


def test_without_proc_a_live_holder_is_alive_and_a_dead_one_dead(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    # A macOS controller has no /proc: liveness comes from kill(pid, 0) and ps, never "no /proc, so dead".
    monkeypatch.setattr(lock_action, "PROC", str(tmp_path / "no-proc"))
    me, live, dead_pid = _holders()
    assert live["controller_start"], "ps gives the start time where /proc is missing"
    assert holder_is_dead(live, me) is None
    assert "is gone" in holder_is_dead({**live, "controller_pid": dead_pid}, me)
    assert "another process" in holder_is_dead({**live, "controller_start": "Thu Jan  1 00:00:00 1970"}, me)


def test_a_controller_of_the_same_host_name_elsewhere_is_never_taken_over() -> None:
    # A cloned VM or a container: the same host name, another boot or pid namespace, and a pid that means
    # nothing here (here it is gone; there it may be the live holder).
    me, live, dead_pid = _holders()
    clone = {**live, "controller_boot": "0f00-another-boot/pid:[4026531836]", "controller_pid": dead_pid}
    assert holder_is_dead(clone, me) is None
