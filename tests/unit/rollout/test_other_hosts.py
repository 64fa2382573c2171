"""blue_green onto other hosts (dsv4deploy.rollout.other_hosts): 1P1D with the prefill on pa, the decode on db and
the router on rt, and a second pair pb/dc in the inventory. The new release runs on pb and dc on the spec's own
GPUs and ports; a pairing that cannot hold it is refused by field, host and fix, each problem named."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dsv4deploy.plan import make_plan
from dsv4deploy.rollout.other_hosts import (
    HOSTS_VAR,
    directed,
    other_spec,
    pairing_problems,
    preview_spec,
    reverse,
    worker_hosts,
)
from dsv4deploy.rollout.settings import load_rollout
from dsv4deploy.rollout.strategy import rollout_plan
from dsv4deploy.spec import Deployment, SpecError, check_deployment, load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import PD_COMMON, host_vars

REPO = Path(__file__).resolve().parents[3]
ADDRESS = {"pa": "10.0.0.21", "db": "10.0.0.22", "rt": "10.0.0.20", "pb": "10.0.0.31", "dc": "10.0.0.32"}
PAIRS = {"pa": "pb", "db": "dc"}
HOSTS = {"dsv4_rollout_strategy": "blue_green_hosts"}


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
        f"{HOSTS_VAR}.pa (host pz): is not among this run's hosts (not in the group dsv4, or unreachable); fix: add "
        "pz to the group dsv4 with its gpu_count, gpu_memory_gib and install_root, or bring it back up"]


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


def _refused(spec: Deployment | None, variables: dict) -> list[str]:
    """What load_rollout, then the strategy's plan for `spec`, refuse in `variables`."""
    with pytest.raises(SpecError) as err:
        settings = load_rollout(variables)
        if spec is not None:
            rollout_plan(spec, settings)
    return _said(err.value.problems)


def two_boxes(**common: object) -> Deployment:
    """pd-single-host with a second box: prefill, decode and router on gpu1 (tp 4 each), gpu2 the other box."""
    data = {**copy.deepcopy(PD_COMMON), **common}
    return load_spec(data, {"gpu1": host_vars(), "gpu2": host_vars(ansible_host="10.0.0.12")})


def test_the_strategy_plans_the_other_hosts_and_the_way_back() -> None:
    rollout = rollout_plan(five_hosts(), load_rollout({**HOSTS, "dsv4_rollout_blue_green_hosts": PAIRS}))
    assert rollout["strategy"] == "blue_green_hosts" and "(db -> dc, pa -> pb)" in rollout["why"]
    assert rollout["pairs"] == {"db": "dc", "pa": "pb"} and rollout["back"] == {"dc": "db", "pb": "pa"}
    assert rollout["other"] == {"prefill[0]": {"host": "pb", "nodes": ["pb"]},
                                "decode[0]": {"host": "dc", "nodes": ["dc"]}}
    assert rollout["preview_router_port"] == 8100
    # A second box beside a single-host deployment: every worker moves, the router stays on gpu1.
    box = rollout_plan(two_boxes(), load_rollout({**HOSTS, "dsv4_rollout_blue_green_hosts": {"gpu1": "gpu2"}}))
    assert box["pairs"] == {"gpu1": "gpu2"} and {w["host"] for w in box["other"].values()} == {"gpu2"}
    plan = make_plan(two_boxes(), ["gpu1", "gpu2"], now=0, rollout=box)
    assert plan["rollout"]["pairs"] == {"gpu1": "gpu2"} and plan["rollout"]["back"] == {"gpu2": "gpu1"}
    # How a release is rolled out is not what it is: the same release id as recreate's.
    assert plan["release_id"] == make_plan(two_boxes(), ["gpu1", "gpu2"], now=0)["release_id"]


def test_the_pairing_is_refused_by_field_and_fix_when_missing_misplaced_or_circular() -> None:
    assert _refused(None, HOSTS) == [
        "dsv4_rollout_blue_green_hosts: is not set, and blue_green_hosts starts the new release on the other host "
        "named for each host a serving worker runs on; fix: set dsv4_rollout_blue_green_hosts to {serving host: "
        "other host}, e.g. {prefill1: prefill2, decode1: decode2}"]
    assert _refused(None, {"dsv4_rollout_strategy": "blue_green", "dsv4_rollout_blue_green_hosts": PAIRS}) == [
        "dsv4_rollout_blue_green_hosts: is set, but dsv4_rollout_strategy blue_green starts the new release on the "
        "serving hosts and never reads it; fix: set dsv4_rollout_strategy: blue_green_hosts to start it on the hosts "
        "dsv4_rollout_blue_green_hosts names, or remove it"]
    assert _refused(None, {**HOSTS, "dsv4_rollout_blue_green_hosts": {"pa": "pa", "db": "dc"}}) == [
        "dsv4_rollout_blue_green_hosts.pa (host pa): names the host itself as its other host; fix: name a host the "
        "serving release does not use"]
    wrong_type = _refused(None, {**HOSTS, "dsv4_rollout_blue_green_hosts": ["pb", "dc"]})
    assert len(wrong_type) == 1 and wrong_type[0].startswith("dsv4_rollout_blue_green_hosts: ")
    assert wrong_type[0].endswith("fix: set dsv4_rollout_blue_green_hosts to {serving host: other host}, each a "
                                  "host name of the inventory")
    # The old host set can stay warm for a rollback window (roles/dsv4_blue_green_hosts/tasks/kept.yml).
    kept = load_rollout({**HOSTS, "dsv4_rollout_blue_green_hosts": PAIRS, "dsv4_rollout_keep_previous_s": 60})
    assert (kept.strategy, kept.keep_previous_s) == ("blue_green_hosts", 60)
    # recreate may meet a pairing (an operator's -e over a paired inventory): it is not refused.
    assert load_rollout({"dsv4_rollout_blue_green_hosts": PAIRS}).strategy == "recreate"


def test_the_plan_refuses_a_pairing_the_inventory_cannot_hold_and_a_preview_router_on_a_listener() -> None:
    said = _refused(five_hosts(dc={"gpu_count": 2}), {**HOSTS, "dsv4_rollout_blue_green_hosts": PAIRS})
    assert said == [f"{HOSTS_VAR}.db (host dc): has 2 GPUs, but the workers of db use GPUs [2, 3]; fix: name a "
                    "host with at least 4 GPUs, or correct dc's gpu_count"]
    # The single box's workers listen on loopback: moved to the second box, the router on gpu1 cannot reach them.
    loopback = pairing_problems(load_spec(copy.deepcopy(PD_COMMON), {
        "gpu1": host_vars(listen="127.0.0.1"), "gpu2": host_vars(ansible_host="10.0.0.12", listen="127.0.0.1")}),
        {"gpu1": "gpu2"})
    assert _said(loopback)[0].startswith("listen (host gpu2): blue_green onto other hosts: the router on gpu1 must "
                                         "reach prefill[0] on gpu2 port 30001, but gpu2 listens on 127.0.0.1")
    # 8000 + 998 lands on the serving prefill's bootstrap port on gpu1, where the preview router would run.
    said = _refused(two_boxes(), {**HOSTS, "dsv4_rollout_blue_green_hosts": {"gpu1": "gpu2"},
                                  "dsv4_rollout_blue_green_port_offset": 998})
    assert said == ["dsv4_rollout_blue_green_port_offset (host gpu1): the preview router would listen on port 8998, "
                    "which the serving prefill[0].bootstrap_port uses; fix: set dsv4_rollout_blue_green_port_offset "
                    "so no shifted port lands on another (now 998)"]


def test_each_deploy_goes_to_the_host_set_that_does_not_serve() -> None:
    """The router's host holds the serving release: its spec.json says which set serves (A/B)."""
    spec = five_hosts()
    rollout = rollout_plan(spec, load_rollout({**HOSTS, "dsv4_rollout_blue_green_hosts": PAIRS}))
    # Nothing serves yet: the first release starts on the inventory's own hosts, as recreate starts it.
    target, going = directed(spec, rollout, "")
    assert target == spec and going["going"] == {} and going["serving"] == []
    assert going["why"].endswith("This deploy: nothing serves yet, so the inventory's own hosts")
    # The inventory's own hosts serve an older release: to the other set.
    on_a_older = make_plan(five_hosts().model_copy(update={"index_topk": 512}), list(ADDRESS), now=0)
    target, going = directed(spec, rollout, on_a_older["hosts"]["rt"]["files"]["spec.json"])
    assert {path: w.host for path, w in target.workers()} == {"prefill[0]": "pb", "decode[0]": "dc"}
    assert going["going"] == {"db": "dc", "pa": "pb"} and "This deploy: db -> dc, pa -> pb" in going["why"]
    assert going["serving"] == ["db", "pa"]
    # The other set serves an older release: back to the inventory's own hosts.
    older = five_hosts().model_copy(update={"index_topk": 512})
    on_b = make_plan(other_spec(older, PAIRS), list(ADDRESS), now=0)["hosts"]["rt"]["files"]["spec.json"]
    target, going = directed(spec, rollout, on_b)
    assert target == spec and going["going"] == {"dc": "db", "pb": "pa"} and going["serving"] == ["dc", "pb"]
    assert going["why"].endswith("This deploy: dc -> db, pb -> pa (back to the inventory's hosts)")
    # The playbook's plan judges "the same" by the rendered spec.json (secret digests and all), handed in.
    assert directed(spec, rollout, on_b, serves_as=lambda d: False)[1]["going"] == {"dc": "db", "pb": "pa"}
    staying, same = directed(spec, rollout, on_b, serves_as=lambda d: True)
    assert staying == other_spec(spec, PAIRS) and same["going"] == {}
    # The serving release is this one: it stays where it is, whichever set serves (nothing changes).
    for serving_spec in (spec, other_spec(spec, PAIRS)):
        text = make_plan(serving_spec, list(ADDRESS), now=0)["hosts"]["rt"]["files"]["spec.json"]
        target, going = directed(spec, rollout, text)
        assert target == serving_spec and going["going"] == {} and going["why"].endswith("is unchanged")


def test_the_preview_router_fronts_the_new_workers_from_the_router_hosts_other_slot() -> None:
    settings = load_rollout({**HOSTS, "dsv4_rollout_blue_green_hosts": {"gpu1": "gpu2"}})
    target = other_spec(two_boxes(), {"gpu1": "gpu2"})
    preview = preview_spec(target, settings)
    assert preview.router is not None and preview.router.host == "gpu1" and preview.router.port == 8100
    assert preview.host("gpu1").install_root == "/opt/dsv4deploy/slot-b"
    # The workers it fronts are the new release's own, where they run.
    assert [(w.host, w.port) for _, w in preview.workers()] == [(w.host, w.port) for _, w in target.workers()]
    plan = make_plan(preview, ["gpu1", "gpu2"], now=0)
    assert plan["router_url"].endswith(":8100") and "gpu2" in plan["hosts_in_use"]



def test_a_serving_box_on_loopback_is_refused_the_other_boxs_decode_reaches_its_prefill_while_switching() -> None:
    """The router lists both boxes' workers while it switches and pairs gpu2's decode with gpu1's prefill: the decode
    fetches the KV from gpu1's bootstrap port, which a loopback listener keeps from it (on real hosts, a failed
    request). Refused before anything changes, naming gpu1's listen."""
    boxes = load_spec(copy.deepcopy(PD_COMMON), {
        "gpu1": host_vars(listen="127.0.0.1"), "gpu2": host_vars(ansible_host="10.0.0.12", listen="0.0.0.0")})
    said = _said(pairing_problems(boxes, {"gpu1": "gpu2"}))
    assert said == ["listen (host gpu1): blue_green onto other hosts, while the router lists both sets' workers: "
                    "decode[1] on gpu2 must reach prefill[0]'s bootstrap port on gpu1 port 8998, but gpu1 listens on "
                    "127.0.0.1, which gpu2 cannot reach; fix: set listen of gpu1 to 0.0.0.0 or its own address "
                    "(with an api_key)"], said


def test_the_preview_router_takes_its_own_metrics_port_where_the_inventory_sets_none() -> None:
    """The shipped examples leave router.prometheus_port unset (sglang-router's 29000): the preview router beside
    the production one must not take that port too, or it exits at start (address in use)."""
    data = copy.deepcopy(PD_COMMON)
    del data["router"]["prometheus_port"]
    spec = load_spec(data, {"gpu1": host_vars(), "gpu2": host_vars(ansible_host="10.0.0.12")})
    settings = load_rollout({**HOSTS, "dsv4_rollout_blue_green_hosts": {"gpu1": "gpu2"}})
    preview = preview_spec(other_spec(spec, {"gpu1": "gpu2"}), settings)
    assert preview.router is not None and preview.router.prometheus_port == 29100
    # And a shifted metrics port that lands on a serving listener is refused before anything starts.
    data["prefill"]["port"] = 29100
    said = _refused(load_spec(data, {"gpu1": host_vars(), "gpu2": host_vars(ansible_host="10.0.0.12")}),
                    {**HOSTS, "dsv4_rollout_blue_green_hosts": {"gpu1": "gpu2"}})
    assert any("the preview router's metrics would listen on port 29100" in line for line in said), said

@pytest.mark.parametrize(("example", "second", "opened"), [
    ("pd-single-host", {"gpu2": "gpu1"}, ["gpu1"]),
    ("1p1d-three-hosts", {"prefill2": "prefill1", "decode2": "decode1"}, []),
])
def test_the_examples_second_hosts_as_their_comments_say_plan_blue_green_hosts(
        tmp_path: Path, example: str, second: dict[str, str], opened: list[str]) -> None:
    """Each example says how to add its second box or pair (and which serving host to open: `opened` listen on
    0.0.0.0): done as said, the plan takes blue_green_hosts."""
    site = tmp_path / example
    shutil.copytree(REPO / "inventory" / "examples" / example, site)
    for name in opened:
        path = site / "host_vars" / f"{name}.yml"
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "listen": "0.0.0.0"}))
    hosts = yaml.safe_load((site / "hosts.yml").read_text())
    for n, (new, like) in enumerate(second.items()):
        hosts["all"]["children"]["dsv4"]["hosts"][new] = {"ansible_host": f"10.0.0.{90 + n}"}
        host_vars = yaml.safe_load((site / "host_vars" / f"{like}.yml").read_text())
        (site / "host_vars" / f"{new}.yml").write_text(yaml.safe_dump({**host_vars, "listen": "0.0.0.0"}))
    (site / "hosts.yml").write_text(yaml.safe_dump(hosts))
    deployment = site / "group_vars" / "all" / "deployment.yml"
    deployment.write_text(deployment.read_text().replace("\n# dsv4_rollout_", "\ndsv4_rollout_"))
    proc = subprocess.run([sys.executable, "-m", "dsv4deploy.cli", "plan", "-i", str(site)], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rollout: blue_green_hosts: the new release starts on the other hosts" in proc.stdout, proc.stdout
