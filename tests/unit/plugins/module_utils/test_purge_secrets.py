"""Purge removes from secrets/ only what dsv4deploy's own record says it wrote there, and scratch names only when
they are its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.module_utils import ownership, purge
from tests.unit.plugins.modules.test_dsv4_host_releases import RELEASES, release_files
from tests.unit.plugins.runner import run_module

SALT = "dsv4_digest_salt"


def _installed(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "root"
    files = release_files()
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1", files=files)
    [service] = [s["name"] for s in json.loads(files["services.json"])["services"]][:1]
    return root, service


def test_our_recorded_secret_files_go_and_a_user_s_later_files_and_a_scratch_named_folder_stay(tmp_path: Path) -> None:
    root, service = _installed(tmp_path)
    ours = ["digest_salt", f"{service}.env"]  # no vault key: the install writes no api_key
    out = run_module(SALT, tmp_path, install_root=str(root), state="folder", group=os.getegid(), files=ours)
    assert out["changed"] and not out.get("failed"), out
    secrets = root / "secrets"
    assert (secrets.stat().st_mode & 0o777, secrets.stat().st_uid) == (0o750, os.geteuid())
    for name in ours:
        (secrets / name).write_text("x")
    # A person's own files, put there later: one with a name dsv4deploy writes elsewhere.
    (secrets / "app.env").write_text("mine")
    (secrets / "api_key").write_text("mine")
    (root / ".tmp-theirs").mkdir()
    (root / ".tmp-theirs" / "data").write_text("keep")
    (root / ".tmp-a1b2c3d4").write_text("")  # an interrupted write_atomic's temp file (mkstemp's 8 characters)
    (root / ".current-4242").symlink_to("releases/r1")
    (root / ".tmp-backup").write_text("a person's")
    out, _ = purge.purge(str(root))
    assert {f"secrets/{n}" for n in ours} | {".tmp-a1b2c3d4", ".current-4242"} <= set(out["removed"])
    assert (root / ".tmp-backup").read_text() == "a person's" and ".tmp-backup" in out["left"]
    assert sorted(p.name for p in secrets.iterdir()) == ["api_key", "app.env"]
    assert {"secrets/app.env", "secrets/api_key"} <= set(out["left"])
    assert (root / ".tmp-theirs" / "data").read_text() == "keep"


def test_a_secrets_folder_someone_made_after_the_first_install_is_not_purged(tmp_path: Path) -> None:
    # Before: counted as ours by its content alone (only api_key, digest_salt and .env files), so a person's
    # own api_key and .env files there were deleted.
    root, service = _installed(tmp_path)
    secrets = root / "secrets"
    secrets.mkdir()
    for name in ("api_key", f"{service}.env"):
        (secrets / name).write_text("theirs")
    out, _ = purge.purge(str(root))
    assert sorted(p.name for p in secrets.iterdir()) == ["api_key", f"{service}.env"]
    assert "secrets" in out["left"] and not [n for n in out["removed"] if n.startswith("secrets")]


def test_the_folder_is_recorded_once_and_an_older_install_s_folder_is_adopted(tmp_path: Path) -> None:
    root, _ = _installed(tmp_path)
    marker = json.loads((root / ownership.OWNER_MARKER).read_text())
    # An install from before the record: its marker has none, its folder only our files.
    del marker[ownership.SECRET_FILES_KEY]
    (root / ownership.OWNER_MARKER).write_text(json.dumps(marker))
    (root / "secrets").mkdir()
    (root / "secrets" / "api_key").write_text("k")
    assert run_module(SALT, tmp_path, install_root=str(root), state="folder", group=os.getegid(),
                      files=["api_key"])["changed"]
    marker = json.loads((root / ownership.OWNER_MARKER).read_text())
    assert "secrets" in marker["created"] and marker[ownership.SECRET_FILES_KEY] == ["api_key"]
    again = run_module(SALT, tmp_path, install_root=str(root), state="folder", group=os.getegid(), files=["api_key"])
    assert not again["changed"]


def test_a_link_in_place_of_the_folder_is_refused_untouched(tmp_path: Path) -> None:
    root, _ = _installed(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / "secrets").symlink_to(elsewhere)
    out = run_module(SALT, tmp_path, install_root=str(root), state="folder", group=os.getegid(), files=[])
    assert out["failed"] and "is not a folder (a link)" in out["msg"]
    assert elsewhere.stat().st_mode & 0o777 == 0o700
    assert "secrets" not in json.loads((root / ownership.OWNER_MARKER).read_text())["created"]


def test_in_a_secrets_folder_that_is_not_ours_only_the_files_we_wrote_go(tmp_path: Path) -> None:
    root, service = _installed(tmp_path)
    secrets = root / "secrets"
    secrets.mkdir()
    (secrets / "notes.txt").write_text("theirs")  # not only secret files: the folder is not proven ours
    run_module(SALT, tmp_path, install_root=str(root), state="folder", group=os.getegid(), files=[f"{service}.env"])
    marker = json.loads((root / ownership.OWNER_MARKER).read_text())
    assert "secrets" not in marker["created"] and marker[ownership.SECRET_FILES_KEY] == [f"{service}.env"]
    (secrets / f"{service}.env").write_text("ours")
    out, warning = purge.purge(str(root))
    assert f"secrets/{service}.env" in out["removed"] and "secrets" in out["left"]
    assert sorted(p.name for p in secrets.iterdir()) == ["notes.txt"] and "notes.txt" in warning


def test_a_slot_that_stops_loses_only_the_secret_files_we_wrote_and_its_releases_stay(tmp_path: Path) -> None:
    root, service = _installed(tmp_path)
    ours = ["digest_salt", f"{service}.env"]
    run_module(SALT, tmp_path, install_root=str(root), state="folder", group=os.getegid(), files=ours)
    secrets = root / "secrets"
    for name in ours:
        (secrets / name).write_text("x")
    check = run_module(SALT, tmp_path, install_root=str(root), state="absent", check_mode=True)
    assert check["changed"] and sorted(p.name for p in secrets.iterdir()) == sorted(ours), check
    out = run_module(SALT, tmp_path, install_root=str(root), state="absent")
    assert out["changed"] and set(out["removed"]) == {f"secrets/{n}" for n in ours} | {"secrets"}, out
    assert not secrets.exists() and (root / "releases" / "r1").is_dir()
    again = run_module(SALT, tmp_path, install_root=str(root), state="absent")
    assert not again["changed"] and again["removed"] == [], again


def test_a_slot_s_secrets_folder_keeps_a_person_s_file_and_itself(tmp_path: Path) -> None:
    root, service = _installed(tmp_path)
    run_module(SALT, tmp_path, install_root=str(root), state="folder", group=os.getegid(), files=[f"{service}.env"])
    secrets = root / "secrets"
    (secrets / f"{service}.env").write_text("x")
    (secrets / "notes.txt").write_text("mine")
    out = run_module(SALT, tmp_path, install_root=str(root), state="absent")
    assert out["removed"] == [f"secrets/{service}.env"] and "secrets/notes.txt" in out["left_why"], out
    assert [p.name for p in secrets.iterdir()] == ["notes.txt"]


def test_a_root_without_an_ownership_marker_keeps_its_secrets(tmp_path: Path) -> None:
    root = tmp_path / "bare"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "api_key").write_text("k")
    out = run_module(SALT, tmp_path, install_root=str(root), state="absent")
    assert not out["changed"] and (root / "secrets" / "api_key").read_text() == "k", out
