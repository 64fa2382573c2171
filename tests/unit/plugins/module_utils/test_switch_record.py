"""A blue_green switch left in progress is repaired whatever the deploy lock says."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.module_utils.switch_record import PHASE, as_previous
from tests.unit.plugins.runner import run_module


def _left(root: Path) -> None:
    (root / "blue_green_switch.json").write_text(json.dumps({"run_id": "dead1", "target": "r2"}) + "\n")


def test_a_lock_removed_by_hand_still_leaves_the_switch_to_repair(tmp_path: Path) -> None:
    # A crashed and rebooted controller's lock cannot be taken over; the operator removed it as told.
    _left(tmp_path)
    lock = tmp_path / "deploy.lock"
    out = run_module("dsv4_lock", tmp_path, path=str(lock), run_id="next")
    assert out["changed"] and out["previous"]["phase"] == PHASE == "blue_green: switch"
    assert out["previous"]["run_id"] == "dead1" and out["previous"]["from_record"].endswith("blue_green_switch.json")


def test_without_a_record_nothing_is_repaired_and_a_dead_runs_blue_green_lock_is_kept(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy.lock")
    assert as_previous(lock, None) is None
    assert as_previous(lock, {"phase": "rolling: step 2"}) == {"phase": "rolling: step 2"}
    _left(tmp_path)
    dead = {"run_id": "dead0", "phase": "blue_green: gates"}
    assert as_previous(lock, dead) is dead
    assert as_previous(lock, {"run_id": "x", "phase": "install"})["phase"] == PHASE


def test_an_unreadable_record_still_counts(tmp_path: Path) -> None:
    (tmp_path / "blue_green_switch.json").write_text("{torn")
    assert as_previous(str(tmp_path / "deploy.lock"), None)["phase"] == PHASE
