"""dsv4_lock's check mode: it says what it would take and writes nothing; the record carries the boot."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.plugins.runner import run_module


def test_check_mode_says_it_would_take_the_lock_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "deploy.lock"
    out = run_module("dsv4_lock", tmp_path, check_mode=True, path=str(path), run_id="r1")
    assert out["changed"] and out["would"] == [f"take the lock {path}"] and not path.exists()


def test_the_record_keeps_the_controllers_boot_and_namespace(tmp_path: Path) -> None:
    path = tmp_path / "deploy.lock"
    out = run_module("dsv4_lock", tmp_path, path=str(path), run_id="r1", controller="ctl", controller_pid=7,
                     controller_boot="b00t/pid:[1]")
    assert out["changed"] and json.loads(path.read_text())["controller_boot"] == "b00t/pid:[1]"
