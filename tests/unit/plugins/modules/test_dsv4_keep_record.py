"""The record of a previous release kept warm after a blue_green switch (dsv4_rollout_keep_previous_s):
what every playbook does first with it, and the record's life on a host (plugins/modules/dsv4_keep_record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.modules.dsv4_keep_record import decide
from tests.unit.plugins.runner import run_module

RECORD = {"release": "new", "previous": "old", "slot_root": "/r/slot-b", "until": 1000}


@pytest.mark.parametrize(("phase", "now", "target", "action"), [
    ("rollback", 999, "", "switch_back"),           # inside the window: a switch back, no load
    ("rollback", 999, "old", "switch_back"),        # the previous release named explicitly
    ("rollback", 999, "older", "move_home"),        # another release: home first, then the restore
    ("rollback", 1000, "", "move_home"),            # the window is over: rollback is recreate after the move
    ("deploy", 10, "", "move_home"),                # a deploy needs the home (and the slot for its own run)
    ("verify", 10, "", "move_home"),
    ("isolate", 10, "", "move_home"),
    ("stop", 10, "", "park"),                       # a stop loads nothing: the slot stops, home then stops
    ("purge", 2000, "", "park"),
])
def test_what_each_run_does_with_the_record(phase: str, now: float, target: str, action: str) -> None:
    assert decide(RECORD, now, phase, target) == action


def test_no_record_is_nothing_to_do_and_a_dead_slot_drops_it() -> None:
    assert decide({}, 0, "rollback") == "none"
    # The slot no longer runs (a dead run was repaired): the home serves its active release; nothing to switch.
    assert decide(RECORD, 0, "rollback", slot_running=False) == "drop"
    assert decide(RECORD, 0, "deploy", slot_running=False) == "drop"


def test_record_is_written_with_its_window_read_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    out = run_module("dsv4_keep_record", tmp_path, install_root=str(root), state="present", keep_s=300,
                     record={"release": "new", "previous": "old", "slot_root": str(root / "slot-b")})
    assert out["changed"] and not out.get("failed"), out
    on_disk = json.loads((root / "blue_green.json").read_text())
    assert on_disk["release"] == "new" and on_disk["until"] == out["record"]["until"]
    got = run_module("dsv4_keep_record", tmp_path, install_root=str(root), state="query", phase="rollback")
    assert got["action"] == "switch_back" and 290 <= got["remaining_s"] <= 300, got
    gone = run_module("dsv4_keep_record", tmp_path, install_root=str(root), state="absent")
    assert gone["changed"] and not (root / "blue_green.json").exists()
    again = run_module("dsv4_keep_record", tmp_path, install_root=str(root), state="query")
    assert again["action"] == "none" and again["record"] == {} and not again["changed"]


def test_a_window_of_zero_is_over_at_once(tmp_path: Path) -> None:
    run_module("dsv4_keep_record", tmp_path, install_root=str(tmp_path), state="present", keep_s=0,
               record={"release": "new", "previous": "old", "slot_root": "s"})
    got = run_module("dsv4_keep_record", tmp_path, install_root=str(tmp_path), state="query", phase="rollback")
    assert got["action"] == "move_home" and got["remaining_s"] == 0, got


def test_a_record_that_is_not_one_fails_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "blue_green.json").write_text('["not", "a", "record"]')
    out = run_module("dsv4_keep_record", tmp_path, install_root=str(tmp_path), state="query")
    assert out["failed"] and "blue_green.json is not a blue_green record" in out["msg"]
    assert "fix: remove it" in out["msg"]
    assert (tmp_path / "blue_green.json").exists()  # never removed by a guess


def test_the_blue_green_hosts_record_is_a_file_of_its_own(tmp_path: Path) -> None:
    # blue_green's settle must never read the old host set's record as a kept-warm slot, nor the reverse.
    out = run_module("dsv4_keep_record", tmp_path, install_root=str(tmp_path), state="present", keep_s=300,
                     strategy="blue_green_hosts", record={"release": "new", "previous": "old", "warm_hosts": ["ga"]})
    assert out["changed"] and (tmp_path / "blue_green_hosts.json").exists(), out
    assert not (tmp_path / "blue_green.json").exists()
    assert run_module("dsv4_keep_record", tmp_path, install_root=str(tmp_path), state="query")["action"] == "none"
    got = run_module("dsv4_keep_record", tmp_path, install_root=str(tmp_path), state="query", phase="rollback",
                     strategy="blue_green_hosts")
    assert got["action"] == "switch_back" and got["record"]["warm_hosts"] == ["ga"], got
