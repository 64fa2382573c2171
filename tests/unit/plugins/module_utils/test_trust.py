"""Root trusts no path another user can change: the walk up to / and the secret read that follows no link."""

from __future__ import annotations

import os
import pwd
import threading
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import trust

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the files belong to another user (nobody)")
NOBODY = pwd.getpwnam("nobody")


def test_a_path_of_root_s_folders_is_trusted(tmp_path: Path) -> None:
    (tmp_path / "opt" / "dsv4").mkdir(parents=True)
    assert trust.walk(str(tmp_path / "opt" / "dsv4"), "nobody") == ""
    # Not there yet: root creates it in a folder only root writes.
    assert trust.walk(str(tmp_path / "opt" / "dsv4" / "new" / "deeper"), "nobody") == ""


def test_a_folder_of_the_service_user_anywhere_above_is_refused(tmp_path: Path) -> None:
    (tmp_path / "var" / "lib" / "sglang" / "dsv4").mkdir(parents=True)
    os.chown(tmp_path / "var" / "lib" / "sglang", NOBODY.pw_uid, NOBODY.pw_gid)
    problem = trust.walk(str(tmp_path / "var" / "lib" / "sglang" / "dsv4"), "nobody")
    assert f"{tmp_path}/var/lib/sglang is nobody:" in problem and "the service user's" in problem
    assert "fix: make it root's" in problem
    # Another user's, not the service user's, is refused too.
    assert "not root's" in trust.walk(str(tmp_path / "var" / "lib" / "sglang" / "dsv4"), "")


def test_group_or_world_writable_folders_are_refused_and_sticky_ones_only_with_root_s_entry(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "dsv4").mkdir(parents=True)
    shared.chmod(0o775)
    os.chown(shared, 0, NOBODY.pw_gid)
    assert "writable by other users" in trust.walk(str(shared / "dsv4"), "nobody")
    shared.chmod(0o1777)
    assert trust.walk(str(shared / "dsv4"), "nobody") == "", "sticky: only root can rename its own entry"
    problem = trust.walk(str(shared / "missing" / "root"), "nobody")
    assert "does not exist" in problem and "lets other users create it first" in problem


def test_a_link_is_walked_to_its_target(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    (tmp_path / "root").symlink_to(theirs)
    assert f"{theirs} is nobody:" in trust.walk(str(tmp_path / "root" / "dsv4"), "nobody")


def test_any_path_inside_another_user_s_home_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home" / "alice"
    (home / "deep" / "dsv4").mkdir(parents=True)
    alice = pwd.struct_passwd(("alice", "x", 4321, 4321, "", str(home), "/bin/sh"))
    everyone = [*pwd.getpwall(), alice]
    monkeypatch.setattr(trust.pwd, "getpwall", lambda: everyone)
    problem = trust.walk(str(home / "deep" / "dsv4"), "nobody")
    assert f"is inside {home} (the home of alice)" in problem


def test_a_secret_is_read_from_a_regular_file_of_its_owner_only(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("root-only")
    canary.chmod(0o400)
    key = tmp_path / "api_key"
    key.write_text("sk-1\n")
    os.chown(key, NOBODY.pw_uid, NOBODY.pw_gid)
    assert trust.read_secret(str(key), trust.owners_for("nobody")) == "sk-1\n"
    with pytest.raises(trust.Untrusted, match="not owned by root or the service user"):
        trust.read_secret(str(key), trust.owners_for(""))
    link = tmp_path / "link"
    link.symlink_to(canary)
    with pytest.raises(trust.Untrusted, match="is a symbolic link"):
        trust.read_secret(str(link), {0})
    big = tmp_path / "big"
    big.write_text("x" * 5000)
    with pytest.raises(trust.Untrusted, match="more than a secret's 4096"):
        trust.read_secret(str(big), {0})


def test_a_fifo_in_place_of_a_secret_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(_refusal(str(fifo))), daemon=True)
    reader.start()
    reader.join(5)
    assert result and "not a regular file" in result[0]


def _refusal(path: str) -> str:
    try:
        trust.read_secret(path, {0})
    except trust.Untrusted as exc:
        return str(exc)
    return ""


def test_write_atomic_sets_mode_and_owner_on_the_descriptor_never_by_name(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible_collections.dsv4.deploy.plugins.module_utils import files

    def by_name(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("chmod or chown by name: a name swapped for a link would be followed")

    monkeypatch.setattr(files.os, "chmod", by_name)
    monkeypatch.setattr(files.os, "chown", by_name)
    target = tmp_path / "salt"
    files.write_atomic(str(target), "x\n", mode=0o400, owner=(NOBODY.pw_uid, NOBODY.pw_gid))
    st = target.stat()
    assert (st.st_mode & 0o777, st.st_uid, target.read_text()) == (0o400, NOBODY.pw_uid, "x\n")
