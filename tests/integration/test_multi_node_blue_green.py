"""blue_green with a server over two nodes, through the real playbooks: test_multi_node's PD (the decode's
rank 0 on `na`, rank 1 on `nb`, each host its own install root and supervisord), rolled out beside itself.

The first release is deployed by recreate; the next ones by blue_green. Every rank of the new release
starts in the other slot on its own node (ports and dist_init_port shifted by the port offset, so both
slots' ranks meet apart), is gated through the preview router, and the production router is switched to
it with no failed request under a continuous client; it then moves home on both nodes and the slot stops
on both. A new release that fails a gate leaves the serving one untouched on both nodes, and its ranks
are gone from both. With the previous release kept warm, a rollback inside the window switches back to
every warm rank (the same processes), and after the window the next run moves every rank home.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dsv4deploy.rollout.downtime import Downtime, DowntimeClient
from tests.integration.simhost import READINESS, HostPart, SimHost
from tests.integration.test_multi_node import (
    ADDRESSES,
    GATES,
    HOSTS,
    RANK0,
    RANK1,
    _chat,
    _environ,
    kill_once_joined,
    two_node_pd,
)
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

# Both slots' ports: the first 6 for the serving slot (the decode's dist_init_port the 6th), the next 6 for
# the other slot. GPUs 0-3 of each node for one slot, 4-7 for the other.
PORT_OFFSET = 6
BLUE_GREEN = ["-e", "dsv4_rollout_strategy=blue_green", "-e", "dsv4_rollout_blue_green_gpu_offset=4",
              "-e", f"dsv4_rollout_blue_green_port_offset={PORT_OFFSET}"]
RELEASES: dict[str, str] = {}


@pytest.fixture(scope="module")
def nodes(sim_host: SimHost) -> Iterator[dict[str, HostPart]]:
    """test_multi_node's two hosts, with ports for both slots and the first release deployed by recreate."""
    for parts in two_node_pd(sim_host, free_port_block(2 * PORT_OFFSET)):
        proc = sim_host.playbook("deploy.yml", *GATES)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
        RELEASES["first"] = parts["na"].active_release() or ""
        _wait_running(parts)
        yield parts


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
    assert set(releases.values()) == {releases["na"]} and releases["na"] not in (None, RELEASES["first"]), releases
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
