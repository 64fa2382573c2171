"""dsv4deploy.spec.reachability: a worker another host must reach is refused on loopback or without an
address, naming the worker, the host, the field and the fix; hosts of one machine reach each other."""

from __future__ import annotations

from typing import Any

import pytest

from dsv4deploy.spec import SpecError, load_spec
from dsv4deploy.spec.reachability import cross_host_paths

KEY = {"file": "/etc/dsv4deploy/api_key"}
HOST = {"sglang_version": "0.5.23", "gpu_count": 8, "gpu_memory_gib": 96}


def three_hosts(**hosts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """prefill1, decode1 and router1 with their own addresses, listening on every address; `hosts`
    replaces a host's variables."""
    base = {"prefill1": {**HOST, "ansible_host": "10.0.0.21", "listen": "0.0.0.0"},
            "decode1": {**HOST, "ansible_host": "10.0.0.22", "listen": "0.0.0.0"},
            "router1": {**HOST, "ansible_host": "10.0.0.20", "gpu_count": 0}}
    return {**base, **hosts}


def pd(**top: Any) -> dict[str, Any]:
    worker = {"gpus": list(range(8)), "tp_size": 8, "mem_fraction_static": 0.80}
    return {"topology": "pd", "api_key": KEY,
            "model": {"path": "/models/DeepSeek-V4-Flash-NVFP4", "served_name": "deepseek-v4-flash"},
            "prefill": [{**worker, "host": "prefill1", "port": 30001, "bootstrap_port": 8998}],
            "decode": [{**worker, "host": "decode1", "port": 30002}],
            "router": {"host": "router1", "port": 30000, "listen": "0.0.0.0"}, **top}


def refused(common: dict[str, Any], hosts: dict[str, dict[str, Any]]) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    return [str(p) for p in err.value.problems]


def test_three_hosts_with_addresses_and_wildcard_listeners_pass_and_need_three_paths() -> None:
    spec = load_spec(pd(), three_hosts())
    assert [(p.source, p.target, p.address, p.port) for p in cross_host_paths(spec)] == [
        ("router1", "prefill1", "10.0.0.21", 30001), ("router1", "decode1", "10.0.0.22", 30002),
        ("decode1", "prefill1", "10.0.0.21", 8998)]


def test_a_worker_left_on_loopback_is_refused_naming_worker_host_field_and_fix() -> None:
    hosts = three_hosts(decode1={**HOST, "ansible_host": "10.0.0.22"})  # listen left at 127.0.0.1
    assert refused(pd(), hosts) == [
        "listen (host decode1): the router on router1 must reach decode[0] on decode1 port 30002, but decode1 "
        "listens on 127.0.0.1, which router1 cannot reach; fix: set listen of decode1 to 0.0.0.0 or its own "
        "address (with an api_key)"]


def test_a_prefill_on_loopback_is_refused_once_for_the_router_and_the_decodes_bootstrap() -> None:
    hosts = three_hosts(prefill1={**HOST, "ansible_host": "10.0.0.21", "listen": "127.0.0.1"})
    assert refused(pd(), hosts) == [
        "listen (host prefill1): the router on router1 must reach prefill[0] on prefill1 port 30001, but prefill1 "
        "listens on 127.0.0.1, which router1 cannot reach; fix: set listen of prefill1 to 0.0.0.0 or its own "
        "address (with an api_key)"]


def test_a_host_without_an_address_is_refused() -> None:
    hosts = three_hosts(prefill1={**HOST, "listen": "0.0.0.0"})  # no ansible_host
    assert refused(pd(), hosts) == [
        "ansible_host (host prefill1): the router on router1 must reach prefill[0] on prefill1 port 30001, but "
        "prefill1 has no address (no ansible_host), so the plan would point it at 127.0.0.1; fix: set "
        "ansible_host of prefill1 to the address other hosts reach it at"]


def test_a_decode_reaching_a_prefills_bootstrap_on_another_host() -> None:
    # The router beside the prefill: only the decode crosses hosts to the prefill.
    common = pd(router={"host": "prefill1", "port": 30000, "listen": "0.0.0.0"})
    hosts = three_hosts(prefill1={**HOST, "ansible_host": "10.0.0.21", "listen": "10.0.0.21"},
                        decode1={**HOST, "ansible_host": "10.0.0.22", "listen": "127.0.0.1"})
    assert refused(common, hosts) == [
        "listen (host decode1): the router on prefill1 must reach decode[0] on decode1 port 30002, but decode1 "
        "listens on 127.0.0.1, which prefill1 cannot reach; fix: set listen of decode1 to 0.0.0.0 or its own "
        "address (with an api_key)"]
    spec = load_spec(common, three_hosts(prefill1={**HOST, "ansible_host": "10.0.0.21", "listen": "10.0.0.21"}))
    assert [(p.source, p.target, p.address, p.port, p.field) for p in cross_host_paths(spec)] == [
        ("prefill1", "decode1", "10.0.0.22", 30002, "ansible_host"),
        ("decode1", "prefill1", "10.0.0.21", 8998, "listen")]


def test_a_multi_node_rank_0_without_an_address_is_refused() -> None:
    decode = {"host": "decode1", "nodes": ["decode1", "decode2"], "dist_init_port": 20000, "gpus": list(range(8)),
              "tp_size": 16, "port": 30002, "mem_fraction_static": 0.80}
    hosts = three_hosts(decode1={**HOST, "listen": "0.0.0.0"},
                        decode2={**HOST, "ansible_host": "10.0.0.23", "listen": "0.0.0.0"})
    problems = refused(pd(decode=[decode]), hosts)
    assert ("ansible_host (host decode1): the router on router1 must reach decode[0] on decode1 port 30002, but "
            "decode1 has no address (no ansible_host)") in problems[0]
    spec = load_spec(pd(decode=[decode]), three_hosts(decode2={**HOST, "ansible_host": "10.0.0.23",
                                                               "listen": "0.0.0.0"}))
    assert ("decode2", "decode1", "10.0.0.22", 20000) in [(p.source, p.target, p.address, p.port)
                                                          for p in cross_host_paths(spec)]


def test_hosts_of_one_machine_reach_each_other_on_loopback() -> None:
    # The embedded host split in three (the tests' layout): every address is loopback, nothing is refused.
    local = {**HOST, "ansible_host": "127.0.0.1"}
    spec = load_spec(pd(api_key=None, router={"host": "router1", "port": 30000}),
                     {"prefill1": local, "decode1": local, "router1": local})
    assert len(cross_host_paths(spec)) == 3


def test_the_plan_hands_each_host_the_ports_it_listens_on_and_the_paths_it_connects_along() -> None:
    from dsv4deploy.plan import reach_plan

    spec = load_spec(pd(), three_hosts())
    plans = {h: reach_plan(spec, h, ["prefill1", "decode1", "router1"]) for h in ("prefill1", "decode1", "router1")}
    assert plans["prefill1"] == {"connect": [], "listen": [{"address": "0.0.0.0", "port": 8998, "reach": "10.0.0.21"},
                                                           {"address": "0.0.0.0", "port": 30001, "reach": "10.0.0.21"}]}
    assert plans["decode1"]["listen"] == [{"address": "0.0.0.0", "port": 30002, "reach": "10.0.0.22"}]
    assert [(p["target"], p["address"], p["port"]) for p in plans["decode1"]["connect"]] == [
        ("prefill1", "10.0.0.21", 8998)]
    assert [(p["target"], p["port"]) for p in plans["router1"]["connect"]] == [("prefill1", 30001), ("decode1", 30002)]
    # A host outside the play (--limit) is neither listened for nor connected to.
    assert reach_plan(spec, "router1", ["router1", "decode1"])["connect"] == [
        {**plans["router1"]["connect"][1]}]
