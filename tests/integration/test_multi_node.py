"""A server over two nodes through the real playbooks (recreate): PD whose decode spans two inventory hosts.

Two inventory hosts of the embedded simulator: `na` (127.0.0.1) runs the prefill, the router and the
decode's rank 0; `nb` (127.0.0.2, so that its rank listens on the decode's port too) runs the decode's
rank 1. Each has its own install root and supervisord, and GPUs of its own: its modules run under a Python
that sets DSV4_SIM_NODE, which the supervisord they start and the simulated nvidia-smi inherit.

One module, tests in order: a deploy promotes both ranks; a gate failure rolls back and restores both
ranks as one unit; a rank killed during readiness fails the deploy naming its host and log (and is rolled
back); stop.yml stops every rank and releases every node's GPUs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.simhost import (
    READINESS,
    SMALL_SOAK,
    VENV_BIN,
    HostPart,
    SimHost,
    assign_ports,
    node_hosts,
    stop_parts,
)
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

# The gates that show rank 0 serves through the router (needle and soak are not the subject here).
GATES = ["-e", "readiness_deadline_s=60", "-e", "smoke_deadline_s=30", *SMALL_SOAK,
         "-e", json.dumps({"dsv4_gates_names": ["readiness", "config", "smoke"]})]
RANK0, RANK1 = "sglang-dsv4-decode", "sglang-dsv4-decode-rank1"
# The programs each host runs at home.
HOSTS = {"na": {"sglang-dsv4-prefill", RANK0, "sglang-dsv4-router"}, "nb": {RANK1}}
ADDRESSES = {"na": "127.0.0.1", "nb": "127.0.0.2"}
RELEASES: dict[str, str] = {}


@pytest.fixture(scope="module")
def nodes(sim_host: SimHost) -> Iterator[dict[str, HostPart]]:
    """The module's simulated host as two inventory hosts, the decode over both (tp 4: GPUs 2 and 3 on each)."""
    yield from two_node_pd(sim_host, free_port_block(6))


def two_node_pd(sim_host: SimHost, base_port: int) -> Iterator[dict[str, HostPart]]:
    """`sim_host` made the two inventory hosts na and nb, the decode over both, its ports from `base_port`
    (6: the 5 of assign_ports and the decode's dist_init_port); stops both hosts' supervisords at the end."""
    sim_host.base_port = base_port
    assign_ports(sim_host.inventory, sim_host.base_port)
    parts = node_hosts(sim_host, ADDRESSES)
    dep_path = sim_host.inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())
    dep["prefill"][0].update(host="na", gpus=[0, 1], tp_size=2)
    dep["decode"][0].update(host="na", nodes=["na", "nb"], dist_init_port=sim_host.base_port + 5, gpus=[2, 3],
                            tp_size=4)
    dep["router"]["host"] = "na"
    dep["combined"]["host"] = "na"
    # tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
    dep["gpu_memory_gib"] = 141
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))
    try:
        yield parts
    finally:
        stop_parts(parts)


def _chat(host: SimHost) -> str:
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "Say OK"}], "max_tokens": 8}
    r = httpx.post(f"{host.endpoint}/v1/chat/completions", json=body, timeout=30,
                   headers={"Authorization": f"Bearer {host.api_key}"})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def _gpu_holders(sim_host: SimHost, node: str) -> list[str]:
    """The compute apps (pid, memory) on `node`'s simulated GPUs, as nvidia-smi lists them."""
    out = subprocess.run([str(VENV_BIN / "python"), "-m", "dsv4deploy.sim.smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "DSV4_SIM_STATE_DIR": str(sim_host.root / "sim-gpus"),
                              "DSV4_SIM_NODE": node}).stdout
    return [line for line in out.splitlines() if line.strip()]


def _restored(sim_host: SimHost, nodes: dict[str, HostPart], before: dict[str, dict[str, int]]) -> None:
    """Every node back on the first release, every rank started again from it, rank 0 serving."""
    assert {name: node.active_release() for name, node in nodes.items()} == {"na": RELEASES["a"], "nb": RELEASES["a"]}
    after = {name: node.pids() for name, node in nodes.items()}
    assert {name: set(p) for name, p in after.items()} == HOSTS, after
    for name, rank in (("na", RANK0), ("nb", RANK1)):
        assert after[name][rank] != before[name][rank], (name, rank)  # stopped for the new release, started again
        assert _environ(after[name][rank]).get("DSV4_SIM_FAULTS", "") == "", (name, rank)
    assert _chat(sim_host)


def test_recreate_starts_every_rank_and_serves_through_rank0(sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    proc = sim_host.playbook("deploy.yml", *GATES)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert sim_host.report()["verdict"] == "promoted"
    releases = {name: node.active_release() for name, node in nodes.items()}
    assert len(set(releases.values())) == 1 and None not in releases.values(), releases
    RELEASES["a"] = releases["na"] or ""
    pids = {name: node.pids() for name, node in nodes.items()}
    assert {name: set(p) for name, p in pids.items()} == HOSTS, pids
    # Rank 1 runs on nb the same command but for its rank, and listens on nb's address; it answers a dummy /health.
    cmdline = Path(f"/proc/{pids['nb'][RANK1]}/cmdline").read_bytes().split(b"\0")
    assert cmdline[cmdline.index(b"--node-rank") + 1] == b"1" and cmdline[cmdline.index(b"--host") + 1] == b"127.0.0.2"
    rank1 = f"http://127.0.0.2:{sim_host.base_port + 2}"
    assert httpx.get(f"{rank1}/health", timeout=5).status_code == 200
    assert httpx.get(f"{rank1}/v1/models", timeout=5, headers={"Authorization": f"Bearer {sim_host.api_key}"}
                     ).status_code == 404
    # Each node's GPUs: na's held by the prefill and rank 0, nb's by rank 1 (2 GPUs each).
    assert (len(_gpu_holders(sim_host, "na")), len(_gpu_holders(sim_host, "nb"))) == (4, 2)
    assert _chat(sim_host)


def test_a_failing_gate_rolls_back_and_restores_every_rank(sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    before = {name: node.pids() for name, node in nodes.items()}
    # The decode (both its ranks) ignores its override: rank 0's answers garble and the smoke gate fails.
    proc = sim_host.playbook("deploy.yml", *GATES, "-e", '{"sim_faults_by_role": {"decode": "ignore_override"}}')
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-8000:]
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "smoke"), report
    _restored(sim_host, nodes, before)


def kill_once_joined(running: Future, pid_of: Callable[[], int | None], joined: Callable[[int], bool]) -> int | None:
    """SIGKILL the rank ``pid_of`` finds once ``joined(pid)`` says it met rank 0, while the playbook ``running``
    runs (at most 240 s); the PID killed, or None when it never came to that."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not running.done():
        pid = pid_of()
        if pid and joined(pid):
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.3)
    return None


def test_a_rank_killed_during_readiness_fails_the_deploy_naming_its_nodes_log(
        sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    before = {name: node.pids() for name, node in nodes.items()}
    # The decode's ranks load for 20 s: long enough to kill rank 1 on nb while the readiness wait watches it.
    slow = json.dumps({"server_env_extra_by_role": {"decode": {"DSV4_SIM_STARTUP_S": "20"}}})
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sim_host.playbook, "deploy.yml", *READINESS, "-e", "readiness_deadline_s=90", "-e", slow)
        # Killed once it has joined rank 0 (its log says so): before that, nb's log has no join to name.
        killed = kill_once_joined(running, lambda: nodes["nb"].pids().get(RANK1), lambda pid: (
            _environ(pid).get("DSV4_SIM_STARTUP_S") == "20"
            and "Node rank 1 joined" in nodes["nb"].supervisorctl("tail", RANK1)))
        proc = running.result()
    out = proc.stdout + proc.stderr
    assert killed, out[-8000:]
    assert proc.returncode != 0, out[-8000:]
    flat = " ".join(out.split())
    # The readiness wait names the rank, its host and how it ended, with the lines of nb's log of it.
    # (the gate's line first names every program that died, then gives each one's log)
    assert f"{RANK1} on host nb did not start" in flat and f"--- {RANK1} (nb): " in flat, flat[-6000:]
    named = flat[flat.index(f"{RANK1} on host nb did not start"):]
    assert "terminated by SIGKILL" in named[:300], named[:3000]
    its_log = flat[flat.index(f"--- {RANK1} (nb): "):]
    assert "Node rank 1 joined" in its_log[:3000], its_log[:3000]
    assert sim_host.report()["verdict"] == "rolled_back", sim_host.report()
    _restored(sim_host, nodes, before)


def test_stop_stops_every_rank_and_releases_every_nodes_gpus(sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    proc = sim_host.playbook("stop.yml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    assert {name: node.pids() for name, node in nodes.items()} == {"na": {}, "nb": {}}
    assert _gpu_holders(sim_host, "na") == [] and _gpu_holders(sim_host, "nb") == []
