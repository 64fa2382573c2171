"""dsv4_lock run as Ansible runs it: check mode says what it would take and writes nothing; the record carries
the controller, its boot and the phase; dead, live and empty holders are told apart; a takeover replaces only
the named dead run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.action import dsv4_lock as lock_action
from ansible_collections.dsv4.deploy.plugins.action.dsv4_lock import boot_identity, holder_is_dead, process_start
from tests.unit.plugins.runner import run_module, take_lock


def test_check_mode_says_it_would_take_the_lock_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "deploy.lock"
    out = run_module("dsv4_lock", tmp_path, check_mode=True, path=str(path), run_id="r1")
    assert out["changed"] and out["would"] == [f"take the lock {path}"] and not path.exists()


def test_the_record_keeps_the_controllers_boot_and_namespace(tmp_path: Path) -> None:
    path = tmp_path / "deploy.lock"
    out = run_module("dsv4_lock", tmp_path, path=str(path), run_id="r1", controller="ctl", controller_pid=7,
                     controller_boot="b00t/pid:[1]")
    assert out["changed"] and json.loads(path.read_text())["controller_boot"] == "b00t/pid:[1]"


def test_lock_records_controller_and_phase_and_names_the_holder(tmp_path: Path) -> None:
    assert take_lock(tmp_path, "r1", phase="preflight")["changed"]
    assert not take_lock(tmp_path, "r1", state="phase", phase="gates", target="rel-1").get("failed")
    record = json.loads((tmp_path / "root" / "deploy.lock").read_text())
    assert (record["phase"], record["target"], record["controller_pid"]) == ("gates", "rel-1", 4242)
    other = take_lock(tmp_path, "r2")
    assert other["failed"] and "alice@ops (run r1, pid 4242 on ctl, phase gates" in other["msg"]
    assert take_lock(tmp_path, "r2", state="phase", phase="x")["failed"]


def test_takeover_replaces_only_the_named_dead_run(tmp_path: Path) -> None:
    take_lock(tmp_path, "r1")
    assert take_lock(tmp_path, "r3", takeover_from="someone-else")["failed"]
    taken = take_lock(tmp_path, "r3", takeover_from="r1")
    assert taken["changed"] and taken["previous"]["run_id"] == "r1"
    assert json.loads((tmp_path / "root" / "deploy.lock").read_text())["run_id"] == "r3"


def test_an_empty_lock_file_is_reported_as_such_not_as_1970(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "deploy.lock").write_text("")
    out = take_lock(tmp_path, "r1")
    assert out["failed"] and out["holder"] == {} and "1970" not in out["msg"] and "empty" in out["msg"]
    assert holder_is_dead(out["holder"], {"controller": "ctl"}) is not None
    assert take_lock(tmp_path, "r1", takeover_from="")["changed"]


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
