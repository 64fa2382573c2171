"""The dsv4_lock module run as Ansible runs it: check mode says what it would take and writes nothing; the record
carries the controller, its boot and the phase; an empty holder is named as such; a takeover replaces only the
named dead run. (What its action plugin adds, telling dead holders from live ones: tests/unit/plugins/action.)"""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.action.dsv4_lock import holder_is_dead
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
