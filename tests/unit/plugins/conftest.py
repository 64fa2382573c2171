"""Fixtures for the plugin tests: an install root with a one-program release, its supervisord always shut
down; the gate tests' stub servers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.gates.conftest import dead_url, stub  # noqa: F401  (fixtures, used by name)
from tests.unit.plugins.runner import run_module

PROGRAM = "sglang-dsv4-combined"
KEY = "sk-live-" + "5f3a9c"
BIN_DIR = str(Path(sys.executable).parent)  # supervisord and supervisorctl of the test venv


def write_release(root: Path, release: str, script: str) -> None:
    """releases/<release> with one supervisord program running `script`; `current` points at it."""
    base = root / "releases" / release
    (base / "bin").mkdir(parents=True)
    (base / "supervisor").mkdir()
    serve = base / "bin" / f"serve-{PROGRAM}.sh"
    serve.write_text(f"#!/bin/sh\n{script}\n")
    serve.chmod(0o755)
    (base / "supervisor" / f"{PROGRAM}.conf").write_text(
        f"[program:{PROGRAM}]\ncommand={root}/current/bin/serve-{PROGRAM}.sh\nautostart=false\nautorestart=false\n"
        f"startsecs=0\nstopwaitsecs=5\nstdout_logfile={root}/logs/{PROGRAM}.log\nredirect_stderr=true\n")
    link = root / "current"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(base)


@contextlib.contextmanager
def release_root(scratch: Path) -> Iterator[Path]:
    """An install root whose active release runs one program that logs its API key, then sleeps; its
    supervisord (if one was started) shut down at the end. Short, under /tmp: supervisord's socket path must
    fit AF_UNIX's 108 bytes (pytest-xdist's tmp_path may not). `scratch` holds the shutdown's args file."""
    base = Path(tempfile.mkdtemp(prefix="dsv4u-", dir="/tmp"))
    root = base / "root"
    write_release(root, "r1", f"echo \"server_args=ServerArgs(api_key='{KEY}', port=30000)\"\nexec sleep 300")
    try:
        yield root
    finally:
        run_module("dsv4_service_state", scratch, manager="supervisor", install_root=str(root), state="removed",
                   supervisor_bin_dir=BIN_DIR)
        pidfile = root / "supervisor" / "supervisord.pid"
        if pidfile.exists():  # the shutdown failed: end the supervisord this test started, by its pid
            pid = int(pidfile.read_text())
            try:
                os.kill(pid, signal.SIGTERM)
                time.sleep(1)
            except ProcessLookupError:
                pass
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def install_root(tmp_path: Path) -> Iterator[Path]:
    """release_root for one test."""
    with release_root(tmp_path) as root:
        yield root


def supervisord_runs(root: Path) -> bool:
    """Whether the supervisord of `root` runs (its pid file names a live process)."""
    pidfile = root / "supervisor" / "supervisord.pid"
    if not pidfile.exists():
        return False
    try:
        os.kill(int(pidfile.read_text()), 0)
    except ProcessLookupError:
        return False
    return True
