"""The deployed-state checks catch what they should: a rendered release in a scratch install root.

No services run here; these tests prove the release and secret checks fail on a tampered copy,
and the override check on a wrong log line, so a green test_deployed.py means something.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Any

import deployed_checks as checks
import pytest
import testinfra

from dsv4deploy.plan.render import file_mode, render_release
from dsv4deploy.spec import Deployment, load_spec

KEY = "sk-test-0123456789abcdef"
RELEASE = "20260101T000000Z-0123456789"


def make_spec(root: Path) -> Deployment:
    """A PD deployment on one supervisor host whose install root is `root`, with a key file."""
    common = {
        "topology": "pd",
        "model": {"path": "/m", "served_name": "deepseek-v4-flash"},
        "index_topk": 1024,
        "model_overrides": {"rope_theta": 10000},
        "prefill": {"host": "h", "gpus": [0], "tp_size": 1, "port": 40001, "mem_fraction_static": 0.8},
        "decode": {"host": "h", "gpus": [1], "tp_size": 1, "port": 40002, "mem_fraction_static": 0.8},
        "router": {"host": "h", "port": 40000},
        "api_key": {"file": str(root / "api_key")},
    }
    user = getpass.getuser()
    # The scratch release is owned by whoever runs the tests; under CI that is root, stated as meant.
    hostvars = {"h": {"service_manager": "supervisor", "install_root": str(root), "service_user": user,
                      "service_user_root_ok": user == "root"}}
    return load_spec(common, hostvars)


@pytest.fixture
def local() -> Any:
    """This machine, through testinfra's local backend."""
    return testinfra.get_host("local://")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A scratch install root holding one rendered release, `current` pointing at it, a 0600 key."""
    for rel, text in render_release(make_spec(tmp_path), "h").items():
        target = tmp_path / "releases" / RELEASE / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        target.chmod(file_mode(rel))
    (tmp_path / "current").symlink_to(f"releases/{RELEASE}")
    key = tmp_path / "api_key"
    key.write_text(KEY + "\n", encoding="utf-8")
    key.chmod(0o600)
    return tmp_path


def release(root: Path) -> Path:
    return root / "releases" / RELEASE


def test_an_intact_release_passes(local: Any, root: Path) -> None:
    d = checks.read_deployed(local, str(root))
    assert d.release_dir == str(release(root))
    assert [s.name for s in d.services] == ["sglang-dsv4-decode", "sglang-dsv4-prefill", "sglang-dsv4-router"]
    assert checks.pointer_problems(local, d) == []
    assert checks.manifest_problems(local, d) == []
    assert checks.layout_problems(local, d) == []
    assert checks.literal_key_problems(local, d) == []
    assert checks.key_file_problems(local, str(root / "api_key")) == []
    assert checks.leaked_key_problems(local, d, KEY) == []


def test_a_changed_file_and_an_extra_file_are_found(local: Any, root: Path) -> None:
    script = release(root) / "bin" / "serve-sglang-dsv4-decode.sh"
    before = checks.release_hashes(local, str(release(root)))["bin/serve-sglang-dsv4-decode.sh"]
    script.write_text(script.read_text() + "# edited by hand\n")
    (release(root) / "bin" / "extra.sh").write_text("true\n")
    after = checks.release_hashes(local, str(release(root)))["bin/serve-sglang-dsv4-decode.sh"]
    d = checks.read_deployed(local, str(root))
    assert checks.manifest_problems(local, d) == [
        f"bin/serve-sglang-dsv4-decode.sh: sha256 {after} on the host, {before} in the manifest (changed by hand?)",
        f"bin/extra.sh: in {release(root)} but not in its manifest"]


def test_a_missing_file_and_a_missing_script_are_found(local: Any, root: Path) -> None:
    (release(root) / "bin" / "serve-sglang-dsv4-router.sh").unlink()
    d = checks.read_deployed(local, str(root))
    assert checks.manifest_problems(local, d) == [
        f"bin/serve-sglang-dsv4-router.sh: in the manifest but missing from {release(root)}"]
    assert checks.layout_problems(local, d) == [
        "bin/serve-sglang-dsv4-router.sh: the spec runs sglang-dsv4-router on h but the release has no script"]


def test_current_must_be_a_pointer_into_releases(local: Any, root: Path) -> None:
    (root / "current").unlink()
    os.rename(release(root), root / "elsewhere")
    (root / "current").symlink_to("elsewhere")
    d = checks.read_deployed(local, str(root))
    assert checks.pointer_problems(local, d) == [
        f"{root}/current resolves to {root}/elsewhere, not a release in {root}/releases/"]


def test_a_readable_key_file_and_a_leaked_key_are_found(local: Any, root: Path) -> None:
    (root / "api_key").chmod(0o644)
    conf = release(root) / "supervisor" / "sglang-dsv4-router.conf"
    conf.write_text(conf.read_text() + f"; {KEY}\n")
    d = checks.read_deployed(local, str(root))
    assert checks.key_file_problems(local, str(root / "api_key")) == [
        f"{root}/api_key: the API key file has mode 0644; others may read it (want 0600 or 0640)"]
    assert checks.leaked_key_problems(local, d, KEY) == [
        "supervisor/sglang-dsv4-router.conf: contains the API key text"]


def test_a_literal_key_in_a_serve_script_is_found(local: Any, root: Path) -> None:
    script = release(root) / "bin" / "serve-sglang-dsv4-prefill.sh"
    script.write_text(script.read_text().replace('--api-key "$api_key"', f"--api-key {KEY}"))
    d = checks.read_deployed(local, str(root))
    assert checks.literal_key_problems(local, d) == [
        f"bin/serve-sglang-dsv4-prefill.sh: passes --api-key other than from the key file: --api-key {KEY}",
        f"bin/serve-sglang-dsv4-prefill.sh: does not read the API key from {root}/api_key"]


class LoggedLines:
    """A service manager stand-in that answers only with start-up lines."""

    def __init__(self, lines: dict[str, str]):
        self.lines = lines

    def status(self, name: str) -> tuple[bool, str]:
        return True, ""

    def main_pid(self, name: str) -> int | None:
        return None

    def startup_line(self, name: str) -> str:
        return self.lines.get(name, "")


def startup(overrides: dict[str, Any]) -> str:
    """A 0.5.23-style start-up line (dict repr) with `overrides` as json_model_override_args."""
    return f"[t] server_args={{'port': 1, 'json_model_override_args': '{json.dumps(overrides)}', 'x': 2}}"


def test_the_override_must_equal_the_spec(local: Any, root: Path) -> None:
    d = checks.read_deployed(local, str(root))
    good = {"index_topk": 1024, "rope_theta": 10000}
    manager = LoggedLines({"sglang-dsv4-prefill": startup(good), "sglang-dsv4-decode": startup({"index_topk": 512})})
    assert checks.override_problems(manager, d) == [
        'sglang-dsv4-decode: logged json_model_override_args {"index_topk": 512}, '
        'expected {"index_topk": 1024, "rope_theta": 10000} (index_topk + model_overrides)']
    assert checks.override_problems(LoggedLines({}), d) == [
        "sglang-dsv4-prefill: no start-up (server_args) line in its log since it started",
        "sglang-dsv4-decode: no start-up (server_args) line in its log since it started"]
