"""dsv4_access run as Ansible runs it: it changes nothing, and fails with one line per problem naming the host,
the user, the path, what needs it and the fix (a missing user or launcher, a path the unit's sandbox hides, an
API key file others can read)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.plugins.runner import run_module


def access(tmp_path: Path, check_mode: bool = False, **args: object) -> dict:
    return run_module("dsv4_access", tmp_path, check_mode=check_mode, host="gpu1", **args)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user can enter (pytest's own tmp_path sits under a root-only folder)."""
    path = Path(tempfile.mkdtemp(prefix="dsv4-access-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def launcher(tmp_path: Path) -> Path:
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("check_mode", [False, True])
def test_what_the_services_need_is_there_and_nothing_changes(tmp_path: Path, check_mode: bool) -> None:
    out = access(tmp_path, check_mode, needs=[{"path": str(launcher(tmp_path)), "need": "exec", "what": "decode"}])
    assert not out.get("failed") and not out["changed"] and out["problems"] == [] and out["create_user"] is False


def test_a_missing_launcher_is_named_with_what_needs_it_and_the_fix(tmp_path: Path) -> None:
    out = access(tmp_path, needs=[{"path": str(tmp_path / "nope"), "need": "exec",
                                   "what": "server_launcher[0] of sglang-dsv4-decode"}])
    assert out["failed"] and out["msg"].startswith("the services could not start as configured:")
    assert out["problems"] == [f"host gpu1, user root: {tmp_path / 'nope'} (server_launcher[0] of sglang-dsv4-decode):"
                               " No such file or directory; fix: install it, or correct the spec to where it is"]


def test_a_missing_user_fails_unless_the_deploy_creates_it(tmp_path: Path, open_dir: Path) -> None:
    missing = access(tmp_path, user="no-such-user-dsv4")
    assert missing["failed"] and "user no-such-user-dsv4 does not exist" in missing["msg"]
    assert "set service_user_create: true" in missing["msg"] and not (tmp_path / "home").exists()
    created = access(tmp_path, user="no-such-user-dsv4", create_user=True,
                     needs=[{"path": str(launcher(open_dir)), "need": "exec", "what": "decode"}])
    assert not created.get("failed") and created["create_user"] is True and not created["changed"]


def test_a_path_the_units_sandbox_hides_is_refused_naming_the_setting(tmp_path: Path) -> None:
    out = access(tmp_path, needs=[{"path": "/tmp/x/launch", "need": "exec", "what": "decode",
                                   "hidden": {"/tmp": "PrivateTmp=yes"}}])
    assert out["failed"] and "/tmp/x/launch (decode) is invisible to the unit: PrivateTmp=yes" in out["msg"]
    assert "fix: install it outside that folder" in out["msg"]


def test_an_api_key_file_anyone_can_read_is_refused_with_the_commands_that_fix_it(tmp_path: Path,
                                                                                  open_dir: Path) -> None:
    key = open_dir / "key"
    key.write_text("k")
    key.chmod(0o644)
    out = access(tmp_path, user="nobody", needs=[{"path": str(key), "need": "secret", "what": "api key"}])
    assert out["failed"] and f"{key} (api key): readable by everyone, not only by nobody" in out["msg"]
    assert f"fix: chown nobody {key} && chmod 0400 {key}" in out["msg"] and oct(key.stat().st_mode)[-3:] == "644"
