"""`dsv4deploy releases -i DIR`: each host's releases read from the host itself (a read-only module run).

The embedded host's starter inventory (local connection) holds releases put there by the release
module as a deploy leaves them: one verified, one that failed its gates, one never started. A host
that cannot be reached (ssh to a closed port) is named with why, and the command exits 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsv4deploy.plan.render import render_release
from tests.integration.simhost import REPO, VENV_BIN

sys.path.insert(0, str(REPO / "tests" / "golden"))
from fixture_specs import combined_spec, pd_spec

pytestmark = pytest.mark.integration
MODULE = REPO / "plugins" / "modules" / "dsv4_host_releases.py"


def release_module(tmp_path: Path, **args: object) -> dict:
    """The dsv4_release module run as Ansible runs it, as the playbooks would leave the host."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # the collection's module_utils
    return json.loads(proc.stdout)


def releases(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "dsv4deploy"), "releases", *argv], capture_output=True, text=True,
                          timeout=300, cwd="/")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: supervisord's socket under the site's .state must fit AF_UNIX's 107 bytes,
    which pytest-xdist's tmp_path in a deep clone does not leave room for."""
    path = Path(tempfile.mkdtemp(prefix="dsv4rel-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_releases_lists_each_release_with_its_status_and_the_active_one(tmp_path: Path, short_dir: Path) -> None:
    site = short_dir / "site"
    subprocess.run([str(VENV_BIN / "dsv4deploy"), "init", str(site), "--example", "local"], check=True,
                   capture_output=True, timeout=120)
    root = str(site / ".state")
    empty = releases("-i", str(site))
    assert empty.returncode == 0 and empty.stdout.splitlines() == [f"local ({root})", "  no releases installed"]
    files = {"good": render_release(combined_spec("supervisor"), "gpu1"),
             "bad": render_release(pd_spec("supervisor"), "gpu1")}
    for rid in ("good", "bad"):
        release_module(tmp_path, install_root=root, state="present", release_id=rid, files=files[rid])
    release_module(tmp_path, install_root=root, state="active", release_id="good")
    release_module(tmp_path, install_root=root, state="verified", release_id="good")
    release_module(tmp_path, install_root=root, state="active", release_id="bad")   # its gates fail:
    release_module(tmp_path, install_root=root, state="active", release_id="good")  # rolled back
    release_module(tmp_path, install_root=root, state="present", release_id="spare",
                   files=render_release(pd_spec("systemd"), "gpu1"))  # installed, never switched to
    before = json.loads(json.dumps(release_module(tmp_path, install_root=root, state="query")))

    proc = releases("-i", str(site))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"local ({root})"
    rows = {line.split()[1] if line.startswith("  *") else line.split()[0]: line for line in lines[2:]}
    assert rows["good"].startswith("  * good") and rows["good"].endswith("verified  (active)")
    assert rows["bad"].startswith("    bad") and rows["bad"].rstrip().endswith("failed")
    assert " UTC " in rows["good"] and rows["spare"].rstrip().endswith("never started")
    data = json.loads(releases("-i", str(site), "--json").stdout)
    assert data["local"]["active"] == "good"
    assert [(r["id"], r["status"], r["active"]) for r in data["local"]["releases"]] == [
        ("bad", "failed", False), ("good", "verified", True), ("spare", "never started", False)]
    # Read-only: the host is as it was.
    after = release_module(tmp_path, install_root=root, state="query")
    assert {k: v for k, v in after.items() if k != "invocation"} == {k: v for k, v in before.items()
                                                                     if k != "invocation"}


def test_a_host_that_cannot_be_reached_is_named_and_fails_the_command(tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([str(VENV_BIN / "dsv4deploy"), "init", str(site), "--example", "pd-single-host"], check=True,
                   capture_output=True, timeout=120)
    # Port 1 on loopback: refused at once, as a host whose sshd is down.
    proc = releases("-i", str(site), "-e", "ansible_host=127.0.0.1", "-e", "ansible_port=1")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0] == "gpu1 (/opt/dsv4deploy)"
    assert proc.stdout.splitlines()[1].startswith("  unreachable: ") and "Traceback" not in proc.stderr
