"""Deploys onto a host with nothing of ours yet: preflight refusals, and a first deploy that fails.

A first deploy that fails has nothing to roll back to: it says so and leaves nothing running.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.integration.simhost import READINESS, REPO, SimHost
from tests.ports import free_port

pytestmark = pytest.mark.integration


def test_a_port_held_by_someone_else_is_refused_before_anything_changes(sim_host: SimHost) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", sim_host.base_port + 1))
        squatter.listen()
        proc = sim_host.playbook("deploy.yml")
    assert proc.returncode != 0
    assert f"port {sim_host.base_port + 1} is taken by {os.getpid()}" in proc.stdout
    assert "nothing was changed" in proc.stdout
    assert not (sim_host.install_root / "current").exists()


def test_a_gpu_held_by_a_process_that_is_not_ours_is_refused(sim_host: SimHost) -> None:
    # Someone else's server on GPUs 0-3 of this (simulated) host, started outside any deploy.
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "0,1,2,3",
           "DSV4_SIM_STATE_DIR": str(sim_host.install_root / "sim-gpus"), "DSV4_SIM_STARTUP_S": "0"}
    port = free_port()
    other = subprocess.Popen([sys.executable, "-m", "dsv4deploy.sim.server", "--model-path", "/m", "--tp-size", "4",
                              "--port", str(port), "--mem-fraction-static", "0.5"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (sim_host.install_root / "sim-gpus").exists():
            time.sleep(0.1)
        time.sleep(1)
        proc = sim_host.playbook("deploy.yml")
    finally:
        other.terminate()
        other.wait(timeout=30)
    assert proc.returncode != 0
    assert f"process {other.pid}" in proc.stdout and "is not ours and holds" in proc.stdout
    assert "nothing was changed" in proc.stdout


def test_failed_first_deploy_says_there_is_no_previous_release(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "sim_faults=never_ready", "-e", "readiness_deadline_s=5")
    assert proc.returncode != 0
    assert "there is no previous release to roll back to" in proc.stdout
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("failed", "readiness")
    assert sim_host.pids() == {}
    # The failed release stays installed for inspection but is never a rollback target.
    proc = sim_host.playbook("rollback.yml")
    assert proc.returncode != 0
    assert "no earlier verified release on local" in proc.stdout


def test_a_rollback_that_fails_is_a_loud_distinct_failure(sim_host: SimHost) -> None:
    # A good release to fall back to; its gates are not the subject (readiness alone).
    proc = sim_host.playbook("deploy.yml", "-e", "readiness_deadline_s=60", *READINESS)
    assert proc.returncode == 0, proc.stdout[-5000:]
    good = sim_host.active_release()
    # Someone broke the good release on the host: it can no longer start, so the rollback must fail.
    script = sim_host.install_root / "releases" / good / "bin" / "serve-sglang-dsv4-prefill.sh"
    script.write_text("#!/usr/bin/env bash\necho 'broken by hand' >&2\nexit 1\n")
    proc = sim_host.playbook("deploy.yml", "-e", "sim_faults=never_ready", "-e", "readiness_deadline_s=5")
    assert proc.returncode != 0
    assert "ROLLBACK FAILED after readiness failed" in proc.stdout
    assert f"point {sim_host.install_root}/current at releases/{good}" in proc.stdout
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("failed", "readiness")
    assert "ROLLBACK FAILED" in report["failure"]
