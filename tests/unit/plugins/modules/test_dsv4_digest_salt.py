"""The host's digest salt (plugins/modules/dsv4_digest_salt): read without writing, a new one
where there is none, kept once by the install, a planted link replaced and never followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.unit.plugins.runner import run_module


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "secrets").mkdir(parents=True)
    return root


def test_reading_writes_nothing_and_a_new_salt_is_kept_once_then_read_back(tmp_path: Path) -> None:
    root = _root(tmp_path)
    first = run_module("dsv4_digest_salt", tmp_path, install_root=str(root))
    assert first["new"] and not first["legacy"] and not first["changed"] and len(first["salt"]) == 64
    assert list((root / "secrets").iterdir()) == []  # the plan reads before anything is validated
    again = run_module("dsv4_digest_salt", tmp_path, install_root=str(root))
    assert again["salt"] != first["salt"]  # nothing kept yet: each read proposes its own
    checked = run_module("dsv4_digest_salt", tmp_path, check_mode=True, install_root=str(root), state="present",
                         salt=first["salt"])
    assert checked["changed"] and list((root / "secrets").iterdir()) == []  # check mode writes nothing
    kept = run_module("dsv4_digest_salt", tmp_path, install_root=str(root), state="present", salt=first["salt"])
    assert kept["changed"] and "salt" not in kept
    path = root / "secrets" / "digest_salt"
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    read = run_module("dsv4_digest_salt", tmp_path, install_root=str(root))
    assert read["salt"] == first["salt"] and not read["new"]  # the same salt every later run
    same = run_module("dsv4_digest_salt", tmp_path, install_root=str(root), state="present", salt=first["salt"])
    assert not same["changed"]


def test_a_release_with_unsalted_digests_is_named_once(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "releases" / "r1").mkdir(parents=True)
    (root / "releases" / "r1" / "spec.json").write_text('{"deployment": {"server_env": '
                                                        '{"HF_TOKEN": "<secret sha256:0123456789ab>"}}}')
    (root / "current").symlink_to("releases/r1")
    read = run_module("dsv4_digest_salt", tmp_path, install_root=str(root))
    assert read["new"] and read["legacy"]
    run_module("dsv4_digest_salt", tmp_path, install_root=str(root), state="present", salt=read["salt"])
    assert not run_module("dsv4_digest_salt", tmp_path, install_root=str(root))["legacy"]  # once only


def test_a_planted_link_is_neither_read_nor_followed(tmp_path: Path) -> None:
    # The secrets folder is the service user's: it may plant digest_salt -> a file of root's.
    root = _root(tmp_path)
    target = tmp_path / "roots-file"
    target.write_text("a" * 64 + "\n")
    (root / "secrets" / "digest_salt").symlink_to(target)
    read = run_module("dsv4_digest_salt", tmp_path, install_root=str(root))
    assert read["new"] and read["salt"] != "a" * 64
    run_module("dsv4_digest_salt", tmp_path, install_root=str(root), state="present", salt=read["salt"])
    assert target.read_text() == "a" * 64 + "\n"  # untouched
    path = root / "secrets" / "digest_salt"
    assert not path.is_symlink() and path.read_text() == read["salt"] + "\n"


def test_a_salt_that_is_not_one_is_refused(tmp_path: Path) -> None:
    root = _root(tmp_path)
    out = run_module("dsv4_digest_salt", tmp_path, install_root=str(root), state="present", salt="short")
    assert out["failed"] and "64 lowercase hex" in out["msg"]


def test_a_salt_of_another_owner_or_readable_by_others_is_replaced(tmp_path: Path) -> None:
    # A salt the service user wrote (it knows it) or one others may read keys nothing: a new one replaces it.
    root = _root(tmp_path)
    path = root / "secrets" / "digest_salt"
    for owner, mode in ((65534, 0o400), (os.geteuid(), 0o444)):
        path.unlink(missing_ok=True)
        path.write_text("b" * 64 + "\n")
        path.chmod(mode)
        if os.geteuid() == 0:
            os.chown(path, owner, owner)
        elif owner != os.geteuid():
            continue
        read = run_module("dsv4_digest_salt", tmp_path, install_root=str(root))
        assert read["new"] and read["salt"] != "b" * 64, (owner, oct(mode))


def test_the_api_key_file_is_digested_on_the_host_as_the_plan_does_and_a_link_is_not_followed(tmp_path: Path) -> None:
    from dsv4deploy.spec import secret_env

    root = _root(tmp_path)
    key = tmp_path / "api_key"
    key.write_text("sk-one\n")
    read = run_module("dsv4_digest_salt", tmp_path, install_root=str(root), key_file=str(key))
    assert read["key_digest"] == secret_env.api_key_digest("sk-one", read["salt"])  # what the servers read
    assert "sk-one" not in str(read) and read["active_key_digest"] == ""
    link = tmp_path / "link"
    link.symlink_to(key)
    linked = run_module("dsv4_digest_salt", tmp_path, install_root=str(root), key_file=str(link))
    assert linked["key_digest"] == "" and linked["key_problem"].startswith(f"cannot read the API key file {link}")
    # The digest the active release was made with, from its serve scripts.
    (root / "releases" / "r1" / "bin").mkdir(parents=True)
    (root / "releases" / "r1" / "bin" / "serve-x.sh").write_text(
        "# The key's content, keyed by the host's digest salt: hmac 0123456789ab (a new key is a new release).\n")
    (root / "current").symlink_to(root / "releases" / "r1")
    assert run_module("dsv4_digest_salt", tmp_path, install_root=str(root))["active_key_digest"] == "0123456789ab"
