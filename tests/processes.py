"""Stopping a process a test started: by its PID, SIGTERM first, SIGKILL when it does not exit in time."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process(proc: subprocess.Popen, timeout_s: float = 10) -> None:
    """Stop `proc` (started by this test) and reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
