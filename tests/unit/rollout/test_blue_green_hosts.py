"""blue_green over several hosts (dsv4deploy.rollout.strategy): 1P1D with prefill, decode and router each on a host
of its own. Each worker host gets the other slot where it has workers (its GPUs and ports shifted on that
host), the router's host gets the preview router, which fronts the slot's workers across hosts; a host
with no room is refused by field, host and fix, and the others are not named."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4deploy.plan import make_plan
from dsv4deploy.plan.services import services_on
from dsv4deploy.rollout.blue_green import beside_spec, slot_hosts
from dsv4deploy.rollout.settings import load_rollout
from dsv4deploy.rollout.slot import slot_root
from dsv4deploy.rollout.strategy import rollout_plan
from dsv4deploy.spec import Deployment, SpecError, check_deployment, load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import PD_COMMON, host_vars

REPO = Path(__file__).resolve().parents[3]
BLUE_GREEN = {"dsv4_rollout_strategy": "blue_green"}
ADDRESS = {"pa": "10.0.0.21", "db": "10.0.0.22", "rt": "10.0.0.20"}


def three_hosts(prefill_gpus: list[int] | None = None, **common: object) -> Deployment:
    """1P1D over three hosts: the prefill on pa, the decode on db (tp 2 on 8 GPUs each), the router on rt
    (no GPUs)."""
    data = copy.deepcopy(PD_COMMON)
    gpus = prefill_gpus or [0, 1]
    data["prefill"] = {**data["prefill"], "host": "pa", "gpus": gpus, "tp_size": len(gpus)}
    data["decode"] = {**data["decode"], "host": "db", "gpus": [0, 1], "tp_size": 2}
    data["router"] = {**data["router"], "host": "rt"}
    data.update(common)
    # tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
    hosts = {name: host_vars(ansible_host=addr, gpu_memory_gib=141, **({"gpu_count": 0} if name == "rt" else {}))
             for name, addr in ADDRESS.items()}
    return load_spec(data, hosts)


def _refusal(spec: Deployment, **variables: object) -> list[str]:
    with pytest.raises(SpecError) as err:
        rollout_plan(spec, load_rollout({**BLUE_GREEN, **variables}))
    return [str(p) for p in err.value.problems]


def test_each_worker_host_gets_the_slot_on_its_own_spare_gpus() -> None:
    spec = three_hosts()
    rollout = rollout_plan(spec, load_rollout(BLUE_GREEN))
    # Half of each host's GPUs (4 of 8): the same shift on pa and db, each on its own host.
    assert rollout["beside"] == {
        "prefill[0]": {"host": "pa", "gpus": [4, 5], "port": 30101, "bootstrap_port": 9098},
        "decode[0]": {"host": "db", "gpus": [4, 5], "port": 30102, "bootstrap_port": None}}
    assert rollout["preview_router_port"] == 8100
    assert slot_hosts(spec) == {"db": ["decode[0]"], "pa": ["prefill[0]"], "rt": ["router"]}
    # The plan line says where the slot runs, host by host.
    assert ("Over 3 hosts: each gets the slot where it has workers (db: decode[0]; pa: prefill[0]), and the "
            "preview router on rt (port 8100) fronts them across hosts") in rollout["why"]


def test_one_host_plans_say_nothing_of_hosts() -> None:
    spec = three_hosts()
    one = load_spec({**copy.deepcopy(PD_COMMON), "prefill": {**PD_COMMON["prefill"], "gpus": [0, 1], "tp_size": 2},
                     "decode": {**PD_COMMON["decode"], "gpus": [2, 3], "tp_size": 2}},
                    {"gpu1": host_vars(gpu_memory_gib=141)})
    assert "Over" not in rollout_plan(one, load_rollout(BLUE_GREEN))["why"]
    assert "Over 3 hosts" in rollout_plan(spec, load_rollout(BLUE_GREEN))["why"]


def test_the_slot_plan_puts_each_part_on_its_host_and_the_preview_router_fronts_them_across_hosts() -> None:
    spec = three_hosts()
    slot = beside_spec(spec, load_rollout(BLUE_GREEN))
    assert check_deployment(slot) == []
    plan = make_plan(slot, list(ADDRESS), now=0, rollout=rollout_plan(spec, load_rollout(BLUE_GREEN)))
    hosts = plan["hosts"]
    # Every host's slot under its own {root}/slot-b; each runs only its own part.
    assert {h: p["install_root"] for h, p in hosts.items()} == {h: slot_root("/opt/dsv4deploy") for h in ADDRESS}
    assert (hosts["pa"]["gpus"], hosts["db"]["gpus"], hosts["rt"]["gpus"]) == ([4, 5], [4, 5], [])
    assert set(hosts["pa"]["ports"]) == {30101, 9098} and set(hosts["db"]["ports"]) == {30102}
    assert 8100 in hosts["rt"]["ports"] and 8000 not in hosts["rt"]["ports"]
    roles = {h: sorted(s.role for s in services_on(slot, h)) for h in ADDRESS}
    assert roles == {"pa": ["prefill"], "db": ["decode"], "rt": ["router"]}
    # The preview router on rt fronts the slot's workers on the other hosts, at their shifted ports...
    assert plan["router_url"].endswith(":8100")
    urls = {w["role"]: w["url"] for w in plan["workers"]}
    assert urls == {"prefill": "http://10.0.0.21:30101", "decode": "http://10.0.0.22:30102"}, plan["workers"]
    # ...and the decode reaches the slot's prefill by its shifted bootstrap port on pa.
    listed = json.loads(hosts["rt"]["files"]["services.json"])["services"]
    assert [s["role"] for s in listed] == ["router"]


def test_a_host_with_no_room_is_named_and_the_others_are_not() -> None:
    # pa's prefill takes all 8 of its GPUs: the slot cannot fit there; db's decode fits.
    problems = _refusal(three_hosts(prefill_gpus=list(range(8))))
    assert problems and all(p.startswith("dsv4_rollout_blue_green_gpu_offset (host pa): ") for p in problems), problems
    assert any("GPUs [12, 13, 14, 15, 16, 17, 18, 19]" in p or "has 8 GPUs" in p for p in problems), problems
    assert all("this release takes 8 of pa's 8" in p and "dsv4_rollout_strategy: recreate" in p for p in problems)
    assert not any("(host db)" in p or "(host rt)" in p for p in problems)


def test_ports_are_judged_per_host() -> None:
    # pa's prefill port + 1 is db's decode port: another host, so no clash...
    spec = three_hosts()
    rollout_plan(spec, load_rollout({**BLUE_GREEN, "dsv4_rollout_blue_green_port_offset": 1}))
    # ...but the preview router on the router's own port + the offset clashes on rt alone.
    clash = three_hosts(router={**PD_COMMON["router"], "host": "rt", "prometheus_port": 8100})
    problems = _refusal(clash)
    assert problems == ["dsv4_rollout_blue_green_port_offset (host rt): the preview router would listen on port 8100, "
                        "which the serving router.prometheus_port uses; fix: set dsv4_rollout_blue_green_port_offset "
                        "so no shifted port lands on another (now 100)"], problems


def test_the_three_host_example_is_refused_naming_each_full_host() -> None:
    """inventory/examples/1p1d-three-hosts: tp 8 on each 8-GPU box leaves no room for a second release
    on prefill1 or decode1; the router's host is not named."""
    example = REPO / "inventory" / "examples" / "1p1d-three-hosts"
    proc = subprocess.run([sys.executable, "-m", "dsv4deploy.cli", "plan", "-i", str(example), "-e",
                           "dsv4_rollout_strategy=blue_green"], capture_output=True, text=True, cwd=REPO, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "dsv4_rollout_blue_green_gpu_offset (host prefill1)" in out and "(host decode1)" in out, out
    assert "this release takes 8 of prefill1's 8" in out and "(host router1)" not in out, out
