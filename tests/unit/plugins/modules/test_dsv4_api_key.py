"""Reading the deployment's API key for the gates (plugins/modules/dsv4_api_key): the key alone, stripped, from a
plain file root or the service user owns; a link, a FIFO, a file others may write or a stranger's is refused with
its path and fix, and the key never appears in a refusal."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.unit.plugins.runner import run_module

KEY = "sk-gates-" + "9d41f7c2"


def _key_file(tmp_path: Path, text: str = KEY + "\n", mode: int = 0o600) -> Path:
    path = tmp_path / "api_key"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_key_is_read_stripped_and_hidden_from_the_log(tmp_path: Path) -> None:
    got = run_module("dsv4_api_key", tmp_path, path=str(_key_file(tmp_path)))
    assert got["key"] == KEY and not got["changed"] and not got.get("failed")
    assert got["_ansible_no_log"] is True  # Ansible censors the whole result, the key with it


@pytest.mark.parametrize("make, said", [
    (lambda p: p.symlink_to(_key_file(p.parent / "real")), "is a symbolic link"),
    (lambda p: os.mkfifo(p), "is not a regular file"),
    (lambda p: _key_file(p.parent, mode=0o622), "writable by others than its owner"),
    (lambda p: _key_file(p.parent, text=KEY + " second\n"), "more than one printable word"),
    (lambda p: _key_file(p.parent, text="k" * 5000), "more than a secret's"),
])
def test_an_untrusted_file_is_refused_with_its_path_and_never_quoted(tmp_path: Path, make, said: str) -> None:
    (tmp_path / "real").mkdir()
    path = tmp_path / "api_key"
    make(path)
    got = run_module("dsv4_api_key", tmp_path, path=str(path))
    assert got["failed"] and said in got["msg"] and str(path) in got["msg"] and "fix:" in got["msg"], got
    assert got["msg"].startswith("will not read the API key file")
    assert KEY not in got["msg"] and "key" not in {k for k in got if k != "msg"}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (CI runs as root)")
def test_the_service_users_file_is_read_and_a_strangers_refused(tmp_path: Path) -> None:
    path = _key_file(tmp_path, mode=0o400)
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    assert run_module("dsv4_api_key", tmp_path, path=str(path), owner="nobody")["key"] == KEY
    refused = run_module("dsv4_api_key", tmp_path, path=str(path), owner="daemon")
    assert refused["failed"] and "not owned by root or the service user" in refused["msg"], refused


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "api_key"
    got = run_module("dsv4_api_key", tmp_path, path=str(path))
    assert got["failed"] and got["msg"] == f"cannot read the API key file {path}: No such file or directory", got
