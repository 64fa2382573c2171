"""The release's engine on a host (plugins/modules/dsv4_engine), as the plan and the install call it: query and
check mode build nothing and say whether a build is needed and which engine replaces which; a wheelhouse that is
not a folder is refused naming the field and the fix; a complete venv of ours for the same requirements is reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import engines
from tests.unit.plugins.runner import run_module

REQUIREMENTS = ["sglang==0.5.23.post1", "sglang-router==0.3.2"]


def _record(root: Path, version: str = "0.5.23.post1", **extra: object) -> dict:
    return {"sglang": version, "venv": str(root / "engines" / f"sglang-{version}"), "python": "python3",
            "requirements": REQUIREMENTS, "index": None, "wheelhouse": None, "base_python": None, **extra}


def _serving(root: Path, record: dict) -> None:
    """The active release records `record` as its engine."""
    (root / "releases" / "r1").mkdir(parents=True)
    (root / "releases" / "r1" / engines.ENGINE_FILE).write_text(json.dumps(record))
    (root / "current").symlink_to("releases/r1")


@pytest.mark.parametrize("mode", ["query", "check"])
def test_query_and_check_mode_build_nothing_and_name_the_change(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "root"
    old = _record(root, "0.5.23")
    _serving(root, old)
    new = _record(root)
    args = {"install_root": str(root), "engine": new, "user": "root"}
    got = run_module("dsv4_engine", tmp_path, check_mode=mode == "check", **args,
                     **({"state": "query"} if mode == "query" else {}))
    assert got["changed"] and not got["built"] and got["venv"] == new["venv"], got
    assert got["before"] == old and got["change"] == "engine 0.5.23 -> 0.5.23.post1"
    assert not (root / "engines").exists()


def test_a_complete_venv_of_ours_is_reused_and_the_same_engine_names_no_change(tmp_path: Path) -> None:
    root = tmp_path / "root"
    record = _record(root)
    _serving(root, record)
    venv = Path(record["venv"])
    (venv / "bin").mkdir(parents=True)
    (venv / engines.MARKER).write_text(json.dumps({"requirements": REQUIREMENTS, "base_python": None}))
    got = run_module("dsv4_engine", tmp_path, install_root=str(root), engine=record, user="root")
    assert not got["changed"] and not got["built"] and got["change"] == "", got
    # Its marker for other requirements: not this engine's venv, so a build is needed.
    (venv / engines.MARKER).write_text(json.dumps({"requirements": ["sglang==0.5.23"], "base_python": None}))
    assert run_module("dsv4_engine", tmp_path, install_root=str(root), engine=record, user="root",
                      state="query")["changed"]


@pytest.mark.parametrize("state", ["query", "present"])
def test_a_wheelhouse_that_is_not_a_folder_is_refused_naming_the_field(tmp_path: Path, state: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    house = tmp_path / "wheels"
    record = _record(root, wheelhouse=str(house))
    got = run_module("dsv4_engine", tmp_path, install_root=str(root), engine=record, user="root", state=state)
    assert got["failed"] and got["msg"].startswith(f"engine.wheelhouse {house} is not a folder on this host; fix:")
    assert got["before"] == {} and got["change"] == "engine host-provided -> 0.5.23.post1"
    assert list(root.iterdir()) == []  # nothing made under the install root


def test_an_unknown_service_user_is_named_before_anything_is_made(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    got = run_module("dsv4_engine", tmp_path, install_root=str(root), engine=_record(root),
                     user="no-such-user-dsv4")
    assert got["failed"] and got["msg"].startswith("service_user: no user 'no-such-user-dsv4' on this host"), got
    assert list(root.iterdir()) == []
