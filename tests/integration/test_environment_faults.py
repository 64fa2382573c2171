"""Faults of the environment, not of the servers: each is one clear error before the working release is
touched (same release active, same server processes, still serving).

The releases folder is a small tmpfs of its own (needs root and mount), so it can be made read-only or
full without touching anything else on this machine. A port or a GPU taken by another program is in
tests/integration/test_first_deploy_failure.py.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import _missing_tools
from tests.integration.simhost import SMALL_NEEDLE_RULE, SimHost, make_sim_host

pytestmark = pytest.mark.integration
GRID = ["-e", "needle_required_tokens=2000", "-e", '{"needle_lengths": [1000, 2000], "needle_depths": [0.2]}',
        "-e", "readiness_deadline_s=60", "-e", "smoke_deadline_s=30", "-e", "soak_enabled=false", *SMALL_NEEDLE_RULE]


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def small_disk_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHost]:
    """A simulated host whose releases folder is a 2 MiB tmpfs, with one good release serving."""
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs for the releases folder")
    host = make_sim_host(tmp_path_factory.mktemp("envfaults"))
    releases = host.install_root / "releases"
    releases.mkdir(parents=True)
    mounted = _mount("-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(releases))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        proc = host.playbook("deploy.yml", *GRID)
        assert proc.returncode == 0, proc.stdout[-4000:]
        yield host
    finally:
        try:
            host.teardown()
        finally:
            subprocess.run(["umount", "-l", str(releases)], capture_output=True, timeout=30)


def untouched(host: SimHost, active: str, pids: dict[str, int]) -> None:
    assert host.active_release() == active
    assert host.pids() == pids
    assert host.report()["verdict"] == "failed"


def test_nvidia_smi_missing_is_refused_before_anything_changes(small_disk_host: SimHost) -> None:
    host = small_disk_host
    active, pids = host.active_release(), host.pids()
    proc = host.playbook("deploy.yml", "-e", '{"gpu_query_command": ["/nonexistent/nvidia-smi"]}',
                         "-e", "sim_faults=warmup_s=0.1", *GRID)
    assert proc.returncode != 0
    assert "GPU query command not found: /nonexistent/nvidia-smi" in proc.stdout
    assert "nothing was changed" in proc.stdout
    untouched(host, active, pids)


def test_unwritable_releases_folder_is_refused_before_the_switch(small_disk_host: SimHost) -> None:
    host = small_disk_host
    releases = host.install_root / "releases"
    active, pids, before = host.active_release(), host.pids(), sorted(os.listdir(releases))
    assert _mount("-o", "remount,ro", str(releases)).returncode == 0
    try:
        proc = host.playbook("deploy.yml", "-e", "sim_faults=warmup_s=0.2", *GRID)
    finally:
        _mount("-o", "remount,rw", str(releases))
    assert proc.returncode != 0
    assert "Read-only file system" in proc.stdout and f"the active release {active} is untouched" in proc.stdout
    assert "nothing was changed" in proc.stdout
    untouched(host, active, pids)
    assert sorted(os.listdir(releases)) == before


def test_disk_full_while_writing_a_release_is_refused_before_the_switch(small_disk_host: SimHost) -> None:
    host = small_disk_host
    releases = host.install_root / "releases"
    active, pids, before = host.active_release(), host.pids(), sorted(os.listdir(releases))
    filler = releases / ".filler"
    # Fill the tmpfs to a few KiB: the next release's first files fit, a later one does not.
    stats = os.statvfs(releases)
    filler.write_bytes(b"\0" * max(0, stats.f_bavail * stats.f_frsize - 12 * 1024))
    try:
        proc = host.playbook("deploy.yml", "-e", "sim_faults=warmup_s=0.3", *GRID)
    finally:
        filler.unlink()
    assert proc.returncode != 0
    assert "No space left on device" in proc.stdout and f"the active release {active} is untouched" in proc.stdout
    untouched(host, active, pids)
    assert sorted(os.listdir(releases)) == before, "a half-written release was left behind"
    assert not [p for p in Path(releases).iterdir() if p.name.startswith(".") and p.name != ".filler"]
