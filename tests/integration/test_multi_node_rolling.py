"""rolling with a server over two nodes, through the real playbooks: test_multi_node's PD (the decode's rank
0 on `na`, rank 1 on `nb`), a 1P1D, so both workers are alone in their role and rolled by surge.

The first release is deployed by recreate. A roll starts every rank of each new worker in the surge slot
on its own node (spare GPUs on every node, ports and dist_init_port shifted), gates them behind the step's
preview router, lets them join the production router before the old ones leave, then moves them home on
both nodes; a continuous client sees no failed request. A new decode that fails its gate in the slot is
stopped on both nodes and the old ranks, which never left, serve on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from dsv4deploy.rollout.downtime import Downtime
from tests.integration.simhost import HostPart, SimHost
from tests.integration.test_multi_node import GATES, HOSTS, RANK0, RANK1, _chat, _environ, two_node_pd
from tests.integration.test_multi_node_blue_green import _slot_gone, _slot_rank1_log, _under_load
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

# As test_multi_node_blue_green: 6 ports for the serving workers, the next 6 for the slot (the surge workers,
# the preview router). No GPU offset: each surge worker takes the lowest GPUs spare on all its nodes (4-7).
PORT_OFFSET = 6
ROLLING = ["-e", "dsv4_rollout_strategy=rolling", "-e", f"dsv4_rollout_blue_green_port_offset={PORT_OFFSET}"]


@pytest.fixture(scope="module")
def nodes(sim_host: SimHost) -> Iterator[dict[str, HostPart]]:
    """test_multi_node's two hosts, with ports for the surge slot and the first release deployed by recreate."""
    for parts in two_node_pd(sim_host, free_port_block(2 * PORT_OFFSET)):
        proc = sim_host.playbook("deploy.yml", *GATES)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
        yield parts


def _roll(sim_host: SimHost, nodes: dict[str, HostPart], *extra: str) -> tuple[str, int, Downtime]:
    """A rolling deploy under the continuous client: output, exit code, figures."""
    return _under_load(sim_host, nodes, "deploy.yml", *GATES, *ROLLING, *extra)


def test_rolling_moves_every_rank_by_surge_with_no_failed_request(sim_host: SimHost,
                                                                   nodes: dict[str, HostPart]) -> None:
    first = nodes["na"].active_release()
    before = {name: node.pids() for name, node in nodes.items()}
    out, rc, figures = _roll(sim_host, nodes, "-e", json.dumps({"server_env_extra": {"DSV4_ROLL_TEST": "2"}}))
    assert rc == 0 and "rolled by surge" in out, out[-8000:]
    print(f"multi-node rolling by surge under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    assert sim_host.report()["verdict"] == "promoted"
    # The surge decode's rank 1 ran on nb in the slot and met its own rank 0 at the shifted dist_init_port.
    log = _slot_rank1_log(nodes["nb"]).read_text()
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
    out, rc, figures = _roll(sim_host, nodes, "-e", json.dumps({"server_env_extra": {"DSV4_ROLL_TEST": "3"}}),
                             "-e", '{"sim_faults_by_role": {"decode": "ignore_override"}}')
    assert rc != 0 and "ROLLED BACK: rolling step 1: smoke failed" in out, out[-8000:]
    print(f"multi-node rolling, step 1 failed, under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    assert "Node rank 1 joined" in _slot_rank1_log(nodes["nb"]).read_text()
    # The old decode's ranks never left: the same processes on both nodes, the same release; the slot's gone.
    assert {name: node.active_release() for name, node in nodes.items()} == serving
    after = {name: node.pids() for name, node in nodes.items()}
    assert {name: set(p) for name, p in after.items()} == HOSTS, after
    assert (after["na"][RANK0], after["nb"][RANK1]) == (before["na"][RANK0], before["nb"][RANK1])
    _slot_gone(sim_host, nodes)
    assert _chat(sim_host)
