"""A server over two nodes through the real playbooks (recreate, blue_green, rolling): PD whose decode spans two
inventory hosts.

Two inventory hosts of the embedded simulator: `na` (127.0.0.1) runs the prefill, the router and the
decode's rank 0; `nb` (127.0.0.2, so that its rank listens on the decode's port too) runs the decode's
rank 1. Each has its own install root and supervisord, and GPUs of its own: its modules run under a Python
that sets DSV4_SIM_NODE, which the supervisord they start and the simulated nvidia-smi inherit.

One module, tests in order, each starting from what the one before left serving: a deploy (recreate) promotes
both ranks; a gate failure rolls back and restores both ranks as one unit; a rank killed during readiness fails
the deploy naming its host and log (and is rolled back).

Then blue_green (the strategy given with -e) rolls the server out beside itself. Every rank of the new release
starts in the other slot on its own node (ports and dist_init_port shifted by the port offset, so both
slots' ranks meet apart), is gated through the preview router, and the production router is switched to
it with no failed request under a continuous client; it then moves home on both nodes and the slot stops
on both. A new release that fails a gate leaves the serving one untouched on both nodes, and its ranks
are gone from both. With the previous release kept warm, a rollback inside the window switches back to
every warm rank (the same processes), and after the window the next run moves every rank home.

Then rolling (given with -e; the 1P1D's workers are alone in their role, so both are rolled by surge): a roll
starts every rank of each new worker in the surge slot on its own node (spare GPUs on every node, ports and
dist_init_port shifted), gates them behind the step's preview router, lets them join the production router
before the old ones leave, then moves them home on both nodes; a continuous client sees no failed request. A
new decode that fails its gate in the slot is stopped on both nodes and the old ranks, which never left, serve on.

Last, stop.yml stops every rank and releases every node's GPUs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from dsv4deploy.rollout.downtime import Downtime, DowntimeClient
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
# Both slots' ports: the first 6 for the serving slot (the decode's dist_init_port the 6th), the next 6 for
# the other slot. GPUs 0-3 of each node for one slot, 4-7 for the other.
PORT_OFFSET = 6
BLUE_GREEN = ["-e", "dsv4_rollout_strategy=blue_green", "-e", "dsv4_rollout_blue_green_gpu_offset=4",
              "-e", f"dsv4_rollout_blue_green_port_offset={PORT_OFFSET}"]


@pytest.fixture(scope="module")
def nodes(sim_host: SimHost) -> Iterator[dict[str, HostPart]]:
    """The module's simulated host as two inventory hosts, the decode over both (tp 4: GPUs 2 and 3 on each), with
    ports for both slots of blue_green and rolling."""
    yield from two_node_pd(sim_host, free_port_block(2 * PORT_OFFSET))


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


def _wait_running(nodes: dict[str, HostPart], timeout_s: float = 60) -> None:
    """Wait until supervisord calls every program on each node RUNNING (past its startsecs): the deploy
    takes blue_green only when every service of the serving release runs (STARTING does not count)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = {name: {line.split()[1] for line in node.supervisorctl("status").splitlines() if line.split()}
                  for name, node in nodes.items()}
        if all(found == {"RUNNING"} for found in states.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"not every program RUNNING after {timeout_s} s: {states}")


def _under_load(host: SimHost, nodes: dict[str, HostPart], playbook: str, *extra: str) -> tuple[str, int, Downtime]:
    """`playbook` run while a continuous client asks the production router: output, exit code, figures."""
    _wait_running(nodes)
    with DowntimeClient(host.endpoint, "deepseek-v4-flash", api_key=host.api_key, concurrency=2) as client:
        proc = host.playbook(playbook, *extra)
    return proc.stdout + proc.stderr, proc.returncode, client.figures


def _deploy_under_load(host: SimHost, nodes: dict[str, HostPart], *extra: str) -> tuple[str, int, Downtime]:
    """A blue_green deploy under the continuous client."""
    return _under_load(host, nodes, "deploy.yml", *GATES, *BLUE_GREEN, *extra)


def _slot_gone(sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    """Nothing of the other slot runs on either node: no supervisord, nothing on its shifted ports."""
    for name, node in nodes.items():
        assert not (node.install_root / "slot-b" / "supervisor" / "supervisor.sock").exists(), name
        for port in range(sim_host.base_port + PORT_OFFSET, sim_host.base_port + 2 * PORT_OFFSET):
            with socket.socket() as s:
                assert s.connect_ex((ADDRESSES[name], port)) != 0, (name, port)


def _slot_rank1_log(node: HostPart) -> Path:
    """The log of the decode's rank 1 in `node`'s other slot (its programs carry the slot's deployment name)."""
    found = sorted((node.install_root / "slot-b" / "logs").glob("*-decode-rank1.log"))
    assert len(found) == 1, found
    return found[0]


def test_blue_green_promotes_every_rank_with_no_failed_request(sim_host: SimHost,
                                                              nodes: dict[str, HostPart]) -> None:
    before = {name: node.pids() for name, node in nodes.items()}
    out, rc, figures = _deploy_under_load(sim_host, nodes, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}')
    assert rc == 0, out[-8000:]
    assert "Gates, through the preview router" in out and sim_host.report()["verdict"] == "promoted"
    print(f"multi-node blue_green promotion under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    # The slot's rank 1 ran on nb and met its own rank 0 at the shifted dist_init_port.
    slot_log = _slot_rank1_log(nodes["nb"]).read_text()
    assert f"Node rank 1 joined 127.0.0.1:{sim_host.base_port + 5 + PORT_OFFSET}" in slot_log, slot_log[-3000:]
    # Home again on both nodes: the new release active, every rank of it running there, the slot gone.
    releases = {name: node.active_release() for name, node in nodes.items()}
    assert set(releases.values()) == {releases["na"]} and releases["na"] not in (None, RELEASES["a"]), releases
    after = {name: node.pids() for name, node in nodes.items()}
    assert {name: set(p) for name, p in after.items()} == HOSTS, after
    for name, rank in (("na", RANK0), ("nb", RANK1)):
        assert after[name][rank] != before[name][rank], (name, rank)
        assert _environ(after[name][rank]).get("DSV4_BG_TEST") == "2", (name, rank)
    cmdline = Path(f"/proc/{after['nb'][RANK1]}/cmdline").read_bytes().split(b"\0")
    assert cmdline[cmdline.index(b"--dist-init-addr") + 1] == f"127.0.0.1:{sim_host.base_port + 5}".encode()
    _slot_gone(sim_host, nodes)
    assert _chat(sim_host)


def test_blue_green_gate_failure_leaves_both_nodes_serving(sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    serving = {name: node.active_release() for name, node in nodes.items()}
    pids = {name: node.pids() for name, node in nodes.items()}
    # The new decode (both its ranks) ignores its override: its answers garble and smoke fails beside.
    out, rc, figures = _deploy_under_load(sim_host, nodes, "-e",
                                       '{"sim_faults_by_role": {"decode": "ignore_override"}}')
    assert rc != 0 and "production was not touched, no rollback" in out, out[-8000:]
    print(f"multi-node blue_green gate failure under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("failed", "smoke"), report
    # The slot's rank 1 did start on nb (the gate, not the start, failed it)...
    assert "Node rank 1 joined" in _slot_rank1_log(nodes["nb"]).read_text()
    # ...and production is untouched on both nodes: the same release, the same processes; the slot gone.
    assert {name: node.active_release() for name, node in nodes.items()} == serving
    assert {name: node.pids() for name, node in nodes.items()} == pids
    _slot_gone(sim_host, nodes)
    assert _chat(sim_host)


def _slot_rank1(sim_host: SimHost) -> int | None:
    """The PID of the other slot's decode rank 1 (it meets its rank 0 at the shifted dist_init_port), if it runs."""
    addr = f"127.0.0.1:{sim_host.base_port + 5 + PORT_OFFSET}".encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if b"dsv4deploy.sim.server" in argv and b"--dist-init-addr" in argv and b"--node-rank" in argv \
                and argv[argv.index(b"--dist-init-addr") + 1] == addr and argv[argv.index(b"--node-rank") + 1] == b"1":
            return int(cmdline.parent.name)
    return None


def test_a_slot_rank_killed_during_readiness_fails_beside_and_leaves_both_nodes_serving(
        sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    serving = {name: node.active_release() for name, node in nodes.items()}
    pids = {name: node.pids() for name, node in nodes.items()}
    # The new decode's ranks load for 20 s: long enough to kill the slot's rank 1 on nb while readiness watches.
    slow = json.dumps({"server_env_extra_by_role": {"decode": {"DSV4_SIM_STARTUP_S": "20"}}})
    _wait_running(nodes)
    with DowntimeClient(sim_host.endpoint, "deepseek-v4-flash", api_key=sim_host.api_key, concurrency=2) as client, \
            ThreadPoolExecutor(1) as pool:
        running = pool.submit(sim_host.playbook, "deploy.yml", *GATES, *BLUE_GREEN, "-e", slow)
        # Killed once it has joined its rank 0 (its log says so).
        killed = kill_once_joined(running, lambda: _slot_rank1(sim_host),
                                  lambda _pid: "Node rank 1 joined" in _slot_rank1_log(nodes["nb"]).read_text())
        proc = running.result()
    out = proc.stdout + proc.stderr
    assert killed, out[-8000:]
    assert proc.returncode != 0 and "production was not touched, no rollback" in out, out[-8000:]
    flat = " ".join(out.split())
    # The readiness wait names the slot's rank on nb and how it ended.
    assert "-decode-rank1 on host nb did not start" in flat, flat[-6000:]
    named = flat[flat.index("-decode-rank1 on host nb did not start"):]
    assert "terminated by SIGKILL" in named[:300], named[:3000]
    print(f"multi-node blue_green, a slot rank killed, under the continuous client: {client.figures.line()}")
    assert client.figures.sent > 10 and client.figures.failed == 0, client.figures.line()
    assert sim_host.report()["verdict"] == "failed", sim_host.report()
    assert {name: node.active_release() for name, node in nodes.items()} == serving
    assert {name: node.pids() for name, node in nodes.items()} == pids
    _slot_gone(sim_host, nodes)
    assert _chat(sim_host)


def _records(nodes: dict[str, HostPart]) -> dict[str, dict | None]:
    """Each node's record of a previous release kept warm (None: none)."""
    return {name: json.loads(path.read_text()) if (path := node.install_root / "blue_green.json").exists() else None
            for name, node in nodes.items()}


def _slot_running(nodes: dict[str, HostPart]) -> dict[str, bool]:
    return {name: (node.install_root / "slot-b" / "supervisor" / "supervisor.sock").exists()
            for name, node in nodes.items()}


def _release(n: int) -> list[str]:
    """A release of its own (a harmless change), gated by readiness alone: the settle is the subject."""
    return [*READINESS, "-e", json.dumps({"server_env_extra": {"DSV4_KEEP_TEST": str(n)}})]


def test_rollback_inside_the_window_switches_back_to_every_warm_rank(sim_host: SimHost,
                                                                     nodes: dict[str, HostPart]) -> None:
    first = nodes["na"].active_release()
    home = {name: node.pids() for name, node in nodes.items()}
    out, rc, figures = _deploy_under_load(sim_host, nodes, "-e", "dsv4_rollout_keep_previous_s=600", *_release(1))
    assert rc == 0 and figures.failed == 0, (figures.line(), out[-8000:])
    # The new release serves from the slot on both nodes; the previous one's ranks run on at home, untouched.
    assert all(r and r["previous"] == first for r in _records(nodes).values()), _records(nodes)
    assert _slot_running(nodes) == {"na": True, "nb": True}
    assert {name: node.pids() for name, node in nodes.items()} == home
    out, rc, figures = _under_load(sim_host, nodes, "rollback.yml")
    assert rc == 0 and "ROLLED BACK by a switch" in out, out[-8000:]
    print(f"multi-node rollback inside the window under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    # The very processes of every warm rank serve again; the new release's ranks are gone with the slot.
    assert {name: node.pids() for name, node in nodes.items()} == home
    assert {name: node.active_release() for name, node in nodes.items()} == {"na": first, "nb": first}
    assert _records(nodes) == {"na": None, "nb": None}
    _slot_gone(sim_host, nodes)
    assert _chat(sim_host)


def test_after_the_window_the_next_run_moves_every_rank_home(sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    out, rc, figures = _deploy_under_load(sim_host, nodes, "-e", "dsv4_rollout_keep_previous_s=1", *_release(2))
    assert rc == 0 and figures.failed == 0, (figures.line(), out[-8000:])
    new = (_records(nodes)["nb"] or {}).get("release")
    assert new and new != nodes["nb"].active_release()
    time.sleep(1.5)  # the window is over
    # verify.yml moves the new release home first on both nodes (every rank started there), then verifies it.
    out, rc, figures = _under_load(sim_host, nodes, "verify.yml", *GATES)
    assert rc == 0 and "move_home" in out, out[-8000:]
    print(f"multi-node move home after the window under the continuous client: {figures.line()}")
    assert figures.failed == 0, figures.line()
    assert {name: node.active_release() for name, node in nodes.items()} == {"na": new, "nb": new}
    after = {name: node.pids() for name, node in nodes.items()}
    assert {name: set(p) for name, p in after.items()} == HOSTS, after
    for name, rank in (("na", RANK0), ("nb", RANK1)):
        assert _environ(after[name][rank]).get("DSV4_KEEP_TEST") == "2", (name, rank)
    assert _records(nodes) == {"na": None, "nb": None}
    _slot_gone(sim_host, nodes)


# rolling on the same two hosts: both workers of the 1P1D are alone in their role and rolled by surge (no GPU
# offset: each surge worker takes the lowest GPUs spare on all its nodes, 4-7; the slot's ports as blue_green's).
ROLLING = ["-e", "dsv4_rollout_strategy=rolling", "-e", f"dsv4_rollout_blue_green_port_offset={PORT_OFFSET}"]


def _roll(sim_host: SimHost, nodes: dict[str, HostPart], *extra: str) -> tuple[str, int, Downtime, str]:
    """A rolling deploy under the continuous client: output, exit code, figures, and what the slot's decode
    rank 1 logged on nb during it (the blue_green cases' slot logs are left out)."""
    logs = nodes["nb"].install_root / "slot-b" / "logs"
    before = {path: path.stat().st_size for path in logs.glob("*-decode-rank1.log")}
    out, rc, figures = _under_load(sim_host, nodes, "deploy.yml", *GATES, *ROLLING, *extra)
    rank1 = ""
    for path in sorted(logs.glob("*-decode-rank1.log")):
        text = path.read_bytes()
        # A log written anew (the slot's folder made again) is read whole.
        rank1 += text[before.get(path, 0) if len(text) >= before.get(path, 0) else 0:].decode(errors="replace")
    return out, rc, figures, rank1


def test_rolling_moves_every_rank_by_surge_with_no_failed_request(sim_host: SimHost,
                                                                   nodes: dict[str, HostPart]) -> None:
    # From the release the blue_green cases left serving at home on both nodes (their slot gone).
    first = nodes["na"].active_release()
    before = {name: node.pids() for name, node in nodes.items()}
    out, rc, figures, log = _roll(sim_host, nodes, "-e", json.dumps({"server_env_extra": {"DSV4_ROLL_TEST": "2"}}))
    assert rc == 0 and "rolled by surge" in out, out[-8000:]
    print(f"multi-node rolling by surge under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    assert sim_host.report()["verdict"] == "promoted"
    # The surge decode's rank 1 ran on nb in the slot and met its own rank 0 at the shifted dist_init_port.
    assert f"Node rank 1 joined 127.0.0.1:{sim_host.base_port + 5 + PORT_OFFSET}" in log, log[-3000:]
    # Home again on both nodes, every rank of the new release; nothing runs in the slot.
    releases = {name: node.active_release() for name, node in nodes.items()}
    assert releases["na"] == releases["nb"] and releases["na"] not in (None, first), releases
    after = {name: node.pids() for name, node in nodes.items()}
    assert {name: set(p) for name, p in after.items()} == HOSTS, after
    for name, rank in (("na", RANK0), ("nb", RANK1)):
        assert after[name][rank] != before[name][rank], (name, rank)
        assert _environ(after[name][rank]).get("DSV4_ROLL_TEST") == "2", (name, rank)
    _slot_gone(sim_host, nodes)
    assert _chat(sim_host)


def test_a_surge_decode_failing_its_gate_leaves_the_old_ranks_serving(sim_host: SimHost,
                                                                       nodes: dict[str, HostPart]) -> None:
    serving = {name: node.active_release() for name, node in nodes.items()}
    before = {name: node.pids() for name, node in nodes.items()}
    # The new decode (both its ranks) ignores its override: its answers garble and step 1's smoke fails.
    out, rc, figures, log = _roll(sim_host, nodes, "-e", json.dumps({"server_env_extra": {"DSV4_ROLL_TEST": "3"}}),
                                  "-e", '{"sim_faults_by_role": {"decode": "ignore_override"}}')
    assert rc != 0 and "ROLLED BACK: rolling step 1: smoke failed" in out, out[-8000:]
    print(f"multi-node rolling, step 1 failed, under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    assert "Node rank 1 joined" in log, log[-3000:]
    # The old decode's ranks never left: the same processes on both nodes, the same release; the slot's gone.
    assert {name: node.active_release() for name, node in nodes.items()} == serving
    after = {name: node.pids() for name, node in nodes.items()}
    assert {name: set(p) for name, p in after.items()} == HOSTS, after
    assert (after["na"][RANK0], after["nb"][RANK1]) == (before["na"][RANK0], before["nb"][RANK1])
    _slot_gone(sim_host, nodes)
    assert _chat(sim_host)


# Last in this module: it stops the deployment.
def test_stop_stops_every_rank_and_releases_every_nodes_gpus(sim_host: SimHost, nodes: dict[str, HostPart]) -> None:
    proc = sim_host.playbook("stop.yml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    assert {name: node.pids() for name, node in nodes.items()} == {"na": {}, "nb": {}}
    assert _gpu_holders(sim_host, "na") == [] and _gpu_holders(sim_host, "nb") == []
