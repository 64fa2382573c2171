"""Purge removes from secrets/ only what dsv4deploy writes there, and scratch names only when they are its own."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.module_utils import purge
from tests.unit.plugins.modules.test_dsv4_host_releases import RELEASES, release_files
from tests.unit.plugins.runner import run_module


def test_a_user_s_later_file_in_secrets_and_a_scratch_named_folder_stay(tmp_path: Path) -> None:
    root = tmp_path / "root"
    files = release_files()
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1", files=files)
    [service] = [s["name"] for s in json.loads(files["services.json"])["services"]][:1]
    secrets = root / "secrets"
    secrets.mkdir()
    for name in ("api_key", "digest_salt", f"{service}.env", "app.env"):
        (secrets / name).write_text("x")
    (root / ".tmp-theirs").mkdir()
    (root / ".tmp-theirs" / "data").write_text("keep")
    (root / ".tmp-ours").write_text("")
    out, _ = purge.purge(str(root))
    assert {"secrets/api_key", "secrets/digest_salt", f"secrets/{service}.env", ".tmp-ours"} <= set(out["removed"])
    assert (secrets / "app.env").read_text() == "x" and "secrets/app.env" in out["left"]
    assert (root / ".tmp-theirs" / "data").read_text() == "keep"
    assert sorted(p.name for p in secrets.iterdir()) == ["app.env"]
