"""The simulated server over two nodes: rank 0 waits for rank 1 at the dist-init address, rank 1 answers
only a dummy /health, rank 1 dying takes rank 0 down, and rank 0 keeps its dist-init port while it runs
(dsv4deploy.sim.ranks)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from simhelpers import Launcher, free_port, http, sim_env, wait_status

pytestmark = pytest.mark.integration


def _args(port: int, rank: int, dist: int, first_gpu: int) -> list[str]:
    return ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4", "--tp-size", "4",
            "--host", "127.0.0.1", "--port", str(port), "--base-gpu-id", str(first_gpu),
            "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist}"]


def test_rank0_waits_for_rank1_which_answers_only_a_dummy_health_and_takes_rank0_down(
        launcher: Launcher, state_dir: Path) -> None:
    p0, p1, dist = free_port(), free_port(), free_port()
    env = sim_env(state_dir)
    rank0 = launcher.sim(_args(p0, 0, dist, 0), env, name="rank0", wait=False)
    time.sleep(1.0)
    # Alone, rank 0 waits at the dist-init address: no HTTP port yet.
    assert http("GET", f"http://127.0.0.1:{p0}/health", timeout=1)[0] == 0
    assert "Waiting for 1 more node(s) to join" in rank0.text()
    rank1 = launcher.sim(_args(p1, 1, dist, 2), env, name="rank1", wait=False)
    wait_status(f"http://127.0.0.1:{p0}/health", 200, timeout=30)
    assert "Node rank 1 joined" in rank0.text()
    # Rank 1's /health is a dummy 200; it serves nothing else.
    assert http("GET", f"http://127.0.0.1:{p1}/health")[0] == 200
    assert http("GET", f"http://127.0.0.1:{p1}/v1/models")[0] == 404
    rank1.stop()
    deadline = time.monotonic() + 15
    while rank0.popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rank0.popen.returncode == 1 and "NCCL error" in rank0.text()


def test_rank0_keeps_its_dist_init_port_so_a_second_server_there_fails_to_start(
        launcher: Launcher, state_dir: Path) -> None:
    p0, p1, p2, dist = free_port(), free_port(), free_port(), free_port()
    env = sim_env(state_dir)
    launcher.sim(_args(p0, 0, dist, 0), env, name="rank0", wait=False)
    launcher.sim(_args(p1, 1, dist, 2), env, name="rank1", wait=False)
    wait_status(f"http://127.0.0.1:{p0}/health", 200, timeout=30)
    # Another server's rank 0 at the same dist-init port (a blue_green slot that did not shift it) cannot
    # listen there, as torch's store cannot: it exits naming the port; the serving one goes on.
    other = launcher.sim(_args(p2, 0, dist, 4), env, name="other", wait=False)
    deadline = time.monotonic() + 15
    while other.popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert other.popen.returncode == 1 and f"failed to listen on any local network address. port: {dist}" in \
        other.text(), other.text()
    assert http("GET", f"http://127.0.0.1:{p0}/health")[0] == 200


def test_each_node_simulated_on_one_machine_has_a_gpu_ledger_of_its_own() -> None:
    from dsv4deploy.sim.env import read_env

    assert read_env({"DSV4_SIM_STATE_DIR": "/s", "DSV4_SIM_NODE": "nb"}).state_dir == Path("/s/node-nb")
    assert read_env({"DSV4_SIM_STATE_DIR": "/s"}).state_dir == Path("/s")
