"""blue_green onto other hosts (dsv4deploy.rollout.other_hosts): 1P1D with the prefill on pa, the decode on db and
the router on rt, and a second pair pb/dc in the inventory. The new release runs on pb and dc on the spec's own
GPUs and ports; a pairing that cannot hold it is refused by field, host and fix, each problem named."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from dsv4deploy.plan import make_plan
from dsv4deploy.rollout.other_hosts import HOSTS_VAR, other_spec, pairing_problems, reverse, worker_hosts
from dsv4deploy.spec import Deployment, check_deployment, load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import PD_COMMON, host_vars

ADDRESS = {"pa": "10.0.0.21", "db": "10.0.0.22", "rt": "10.0.0.20", "pb": "10.0.0.31", "dc": "10.0.0.32"}
PAIRS = {"pa": "pb", "db": "dc"}


def five_hosts(**other_vars: dict) -> Deployment:
    """1P1D over pa, db and rt (tp 2 on 141 GiB GPUs), with pb and dc, the other set, in the inventory."""
    data = copy.deepcopy(PD_COMMON)
    data["prefill"] = {**data["prefill"], "host": "pa", "gpus": [0, 1], "tp_size": 2}
    data["decode"] = {**data["decode"], "host": "db", "gpus": [2, 3], "tp_size": 2}
    data["router"] = {**data["router"], "host": "rt"}
    hosts = {name: host_vars(ansible_host=addr, **{"gpu_memory_gib": 141, **({"gpu_count": 0} if name == "rt" else {}),
                                                   **other_vars.get(name, {})})
             for name, addr in ADDRESS.items()}
    return load_spec(data, hosts)


def _said(problems: list) -> list[str]:
    return [str(p) for p in problems]


def test_the_new_release_runs_on_the_other_hosts_on_the_same_gpus_and_ports() -> None:
    spec = five_hosts()
    assert pairing_problems(spec, PAIRS) == []
    other = other_spec(spec, PAIRS)
    assert check_deployment(other) == []
    assert [(w.host, w.gpus, w.port) for _, w in other.workers()] == [
        ("pb", [0, 1], spec.prefill[0].port), ("dc", [2, 3], spec.decode[0].port)]
    assert other.router == spec.router
    plan = make_plan(other, list(ADDRESS), now=0)
    assert set(plan["hosts_in_use"]) == {"pb", "dc", "rt"}
    # The next deploy goes the other way.
    assert worker_hosts(other) == {"dc": ["decode[0]"], "pb": ["prefill[0]"]}
    assert reverse(PAIRS) == {"dc": "db", "pb": "pa"}
    assert pairing_problems(other, reverse(PAIRS)) == []


def test_a_host_missing_from_the_inventory_or_serving_already_is_refused_naming_it() -> None:
    spec = five_hosts()
    said = _said(pairing_problems(spec, {"pa": "pz", "db": "pa"}))
    assert said == [
        f"{HOSTS_VAR}.db (host pa): runs the serving release already; "
        "fix: name a host the serving release does not use",
        f"{HOSTS_VAR}.pa (host pz): is not in the inventory; fix: add pz to the group dsv4 with its gpu_count, "
        "gpu_memory_gib and install_root"]


def test_every_serving_host_needs_an_other_host_and_each_other_host_serves_one() -> None:
    said = _said(pairing_problems(five_hosts(), {"pa": "pb", "rt": "dc"}))
    assert f"{HOSTS_VAR} (host db): runs decode[0] but no other host is named for it; fix: add 'db: <other host>' " \
           f"to {HOSTS_VAR}" in said
    assert any(s.startswith(f"{HOSTS_VAR} (host rt): runs no worker of the serving release") for s in said)
    twice = _said(pairing_problems(five_hosts(), {"pa": "pb", "db": "pb"}))
    assert sum("is named for more than one host" in s for s in twice) == 2


def test_an_other_host_short_of_gpus_or_memory_is_refused_before_anything_changes() -> None:
    short = _said(pairing_problems(five_hosts(dc={"gpu_count": 2}), PAIRS))
    assert short == [f"{HOSTS_VAR}.db (host dc): has 2 GPUs, but the workers of db use GPUs [2, 3]; fix: name a "
                     "host with at least 4 GPUs, or correct dc's gpu_count"]
    # tp 2 holds the model only on 141 GiB cards: an 80 GiB pb cannot take the prefill.
    small = pairing_problems(five_hosts(pb={"gpu_memory_gib": 80}), PAIRS)
    assert small and all(p.host in (None, "pb") for p in small)
    assert all("blue_green onto other hosts" in p.message for p in small)
