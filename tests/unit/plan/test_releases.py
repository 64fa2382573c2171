"""`dsv4deploy releases` reads each host's --tree answer: a task that failed before the module ran (no
`failed` key, only a msg) is shown as that failure, never as "no releases installed"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from dsv4deploy.plan import releases


def _answer(tmp_path: Path, result: dict) -> releases.HostReleases:
    tree = tmp_path / "gpu1"
    tree.write_text(json.dumps(result))
    proc = subprocess.CompletedProcess([], 2, "", "")
    return releases._host_releases("gpu1", "/opt/dsv4deploy", releases._result(tree, proc, needs="details"))


def test_a_task_failure_without_a_failed_key_is_shown_as_the_failure(tmp_path: Path) -> None:
    answer = _answer(tmp_path, {"changed": False, "msg": "error processing module_util x: unable to locate"})
    assert answer.error == "failed: error processing module_util x: unable to locate"
    assert releases.format_releases([answer])[1] == "  failed: error processing module_util x: unable to locate"


def test_an_empty_host_is_no_releases_installed(tmp_path: Path) -> None:
    answer = _answer(tmp_path, {"changed": False, "details": [], "active": None})
    assert answer.error is None and releases.format_releases([answer])[1] == "  no releases installed"


def test_the_module_is_found_as_the_collections_own() -> None:
    root = releases.collections_root()
    modules = root / "ansible_collections" / "dsv4" / "deploy" / "plugins" / "modules"
    assert (modules / "dsv4_host_releases.py").is_file()
