"""Gates reach workers wherever they listen: on the controller, or through checks run on the host.

The host-side answers come in as the action plugin hands them over (``probes``); the module that
produces them on a host is tested in tests/unit/test_worker_probe.py and, end to end, on real
systemd hosts in tests/systemd.
"""

from __future__ import annotations

import errno
import socket

import pytest

from dsv4deploy.gates import GateStatus, reach
from dsv4deploy.gates.runner import GateSettings, host_checks, run_gate

from .stubs import always

READY = (200, {"status": "ready"})
MODELS = (200, {"object": "list", "data": [{"id": "dsv4"}]})
OVERRIDE = {"index_topk": 1024}
INFO = {"json_model_override_args": '{"index_topk": 1024}', "page_size": 64}


def plan(router_url: str, worker_url: str = "http://127.0.0.1:30001", host_address: str = "10.0.0.11",
         router_host: str = "gpu1") -> dict:
    """A PD plan as dsv4deploy.plan makes it: workers on gpu1 bound to `worker_url`'s address."""
    decode_url = worker_url.rsplit(":", 1)[0] + ":30002"
    return {
        "served_model_name": "dsv4", "endpoint": router_url, "router_url": router_url, "endpoint_host": router_host,
        "workers": [
            {"name": "prefill", "role": "prefill", "host": "gpu1", "url": worker_url, "host_address": host_address,
             "api_key_file": None},
            {"name": "decode", "role": "decode", "host": "gpu1", "url": decode_url, "host_address": host_address,
             "api_key_file": None},
        ],
        "expected_overrides": {"prefill": OVERRIDE, "decode": OVERRIDE},
    }


def health(name: str, url: str, ready: bool = True) -> dict:
    """A /health evidence entry as dsv4_worker_probe returns it."""
    return {"check": f"{name} /health", "url": f"{url}/health", "ready": ready,
            "seconds_to_ready": 1.5 if ready else None, "attempts": 7 if ready else 40,
            "last_status": 200 if ready else 503, "last_body": "" if ready else "warming up"}


def probes_for(p: dict, **found) -> dict:
    return {"gpu1": {"local": False, "seconds": 2.0, "workers": found}}


def router(stub):
    return stub({"GET /readiness": always(READY), "GET /v1/models": always(MODELS)})


def test_host_checks_pick_workers_only_their_host_reaches():
    p = plan("http://10.0.0.11:30000")
    assert [w["name"] for w in host_checks(p, "gpu1", host_is_local=False)] == ["prefill", "decode"]
    # The local connection (the embedded host): the controller is that host, nothing moves.
    assert host_checks(p, "gpu1", host_is_local=True) == []
    assert host_checks(p, "gpu2", host_is_local=False) == []
    # Bound to the address Ansible reaches the host at (listen: 0.0.0.0): checked from the controller.
    assert host_checks(plan("http://10.0.0.11:30000", "http://10.0.0.11:30001"), "gpu1", False) == []
    # Bound to another address of the host (a private interface): only the host is sure to reach it.
    assert len(host_checks(plan("http://10.0.0.11:30000", "http://192.168.7.5:30001"), "gpu1", False)) == 2


def test_readiness_counts_the_hosts_checks_and_asks_the_router_itself(stub):
    rtr = router(stub)
    p = plan(rtr.url, host_address="127.0.0.1", router_host="ctl")
    probes = probes_for(p, prefill={"checks": [health("prefill", p["workers"][0]["url"])]},
                        decode={"checks": [health("decode", p["workers"][1]["url"])]})
    result = run_gate("readiness", p, GateSettings(readiness_deadline_s=20), probes=probes)
    assert result.status is GateStatus.PASSED, result.summary
    assert "2 worker(s) /health 200 (2 checked on gpu1)" in result.summary
    checks = {e["check"]: e for e in result.evidence["endpoints"]}
    assert checks["prefill /health"]["checked_on"] == "gpu1" and checks["prefill /health"]["attempts"] == 7
    assert "checked_on" not in checks["router /readiness"]  # asked from the controller, as a client
    assert rtr.count("GET /readiness") >= 1


def test_a_worker_not_ready_on_its_host_fails_the_gate_with_its_evidence(stub):
    rtr = router(stub)
    p = plan(rtr.url, router_host="ctl")
    probes = probes_for(p, prefill={"checks": [health("prefill", p["workers"][0]["url"], ready=False)]},
                        decode={"checks": [health("decode", p["workers"][1]["url"])]})
    result = run_gate("readiness", p, GateSettings(readiness_deadline_s=5), probes=probes)
    assert result.status is GateStatus.FAILED
    assert "prefill /health 503 warming up" in result.summary


def test_a_loopback_router_of_a_remote_host_is_refused_at_once(stub):
    rtr = router(stub)  # listening on the controller's loopback: must not be mistaken for gpu1's
    p = plan(rtr.url, router_host="gpu1")
    probes = probes_for(p, prefill={"checks": [health("prefill", p["workers"][0]["url"])]},
                        decode={"checks": [health("decode", p["workers"][1]["url"])]})
    result = run_gate("readiness", p, GateSettings(readiness_deadline_s=600), probes=probes)
    assert result.status is GateStatus.FAILED
    address = reach.url_address(rtr.url)[0]
    assert f"{address} is a loopback address of host gpu1" in result.summary
    assert "listen on 0.0.0.0" in result.summary
    assert rtr.calls == []  # never polled: not waited out for 600 s
    assert result.evidence["unreachable"][0]["host"] == "gpu1"


def test_an_address_the_host_does_not_have_is_reported_with_host_and_reason(stub):
    rtr = router(stub)
    p = plan(rtr.url, worker_url="http://192.0.2.7:30001", router_host="ctl")
    why = "192.0.2.7 is not an address of this host, so no server here can listen on it"
    probes = probes_for(p, prefill={"url": p["workers"][0]["url"], "unreachable": why},
                        decode={"url": p["workers"][1]["url"], "unreachable": why})
    result = run_gate("readiness", p, GateSettings(readiness_deadline_s=600), probes=probes)
    assert result.status is GateStatus.FAILED
    assert "prefill (gpu1) at http://192.0.2.7:30001 on host gpu1: 192.0.2.7 is not an address" in result.summary
    assert rtr.calls == []


def test_controller_side_addresses_it_cannot_reach_fail_within_seconds(stub, monkeypatch):
    rtr = router(stub)
    p = plan(rtr.url, worker_url="http://10.0.0.11:30001", router_host="ctl")

    def no_route(address, timeout=None):
        raise OSError(errno.EHOSTUNREACH, "No route to host")

    monkeypatch.setattr(socket, "create_connection", no_route)
    result = run_gate("readiness", p, GateSettings(readiness_deadline_s=600), probes={})
    assert result.status is GateStatus.FAILED
    assert "prefill at http://10.0.0.11:30001 on host gpu1: unreachable from the controller" in result.summary
    assert "No route to host" in result.summary
    assert rtr.calls == []


def test_config_reads_server_info_answered_on_the_host(stub):
    rtr = router(stub)
    p = plan(rtr.url, router_host="ctl")
    answers = [{"path": "/server_info", "status": 404, "body": "{}", "error": ""},
               {"path": "/get_server_info", "status": 200, "body": __import__("json").dumps(INFO), "error": ""}]
    probes = probes_for(p, prefill={"server_info": answers}, decode={"server_info": answers})
    logs = {"prefill": "json_model_override_args='{\"index_topk\": 1024}'",
            "decode": "json_model_override_args='{\"index_topk\": 1024}'"}
    result = run_gate("config", p, GateSettings(), logs=logs, probes=probes)
    assert result.status is GateStatus.PASSED, result.summary
    rows = {r["name"]: r for r in result.evidence["servers"]}
    assert rows["decode"]["checked_on"] == "gpu1" and rows["decode"]["server_info_path"] == "/get_server_info"
    assert rtr.calls == []  # config asks the workers only


@pytest.mark.parametrize(("url", "expected"), [
    ("http://127.0.0.1:30001", ("127.0.0.1", 30001)), ("http://[::1]:8000", ("::1", 8000)),
    ("https://gpu1.example", ("gpu1.example", 443)),
])
def test_url_address(url, expected):
    assert reach.url_address(url) == expected


def test_loopback_names():
    assert reach.is_loopback("127.0.0.2") and reach.is_loopback("::1") and reach.is_loopback("localhost")
    assert not reach.is_loopback("10.0.0.11") and not reach.is_loopback("gpu1")


def test_controller_reach_takes_refused_as_reachable_and_names_the_rest(dead_url, monkeypatch):
    assert reach.controller_reach(dead_url) is None  # nothing listens yet, but the host answered

    def timeout(address, timeout=None):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", timeout)
    assert "no answer from 10.1.2.3:80 within 3 s" in reach.controller_reach("http://10.1.2.3")


def test_a_loopback_endpoint_is_refused_only_on_a_remote_host():
    problem = reach.endpoint_problem("router.listen", "http://127.0.0.1:30000", "gpu1", host_is_local=False)
    assert problem == ("router.listen (host gpu1): the endpoint http://127.0.0.1:30000 would listen on 127.0.0.1, "
                       "a loopback address of gpu1; the controller, where the gates run as any client off gpu1 "
                       "would, cannot reach it; fix: set router.listen to 0.0.0.0 or gpu1's own address "
                       "(with an api_key)")
    assert reach.endpoint_problem("router.listen", "http://127.0.0.1:30000", "local", host_is_local=True) is None
    assert reach.endpoint_problem("listen", "http://10.0.0.11:30010", "gpu1", host_is_local=False) is None
