"""Which hosts a gate that did not pass names (dsv4deploy.gates.blame): what a failed run's cause points at."""

from __future__ import annotations

from dsv4deploy.gates.blame import hosts_named

TARGETS = {
    "endpoint": "http://10.0.0.1:8000", "router_url": "http://10.0.0.1:8000", "endpoint_host": "router1",
    "workers": [
        {"name": "sglang-dsv4-prefill", "host": "prefill1", "url": "http://10.0.0.2:30000"},
        {"name": "sglang-dsv4-decode", "host": "decode1", "url": "http://10.0.0.3:30001"},
        {"name": "sglang-dsv4-decode-1", "host": "decode2", "url": "http://10.0.0.4:30001"},
    ],
}


def gate(**evidence: object) -> dict:
    return {"name": "g", "status": "failed", "summary": "", "evidence": evidence}


def test_a_worker_named_by_its_name_is_its_host_not_a_longer_names() -> None:
    failed = gate(failures=[{"what": "sglang-dsv4-decode-1 /health", "status": 503, "body": ""}])
    assert hosts_named(failed, TARGETS) == ["decode2"]


def test_a_worker_named_by_its_url_in_a_routers_answer_is_its_host() -> None:
    body = "decode server http://10.0.0.3:30001 returned 500: KV transfer failed"
    failed = gate(failures=[{"what": "try 1 at 0.2 s", "status": 500, "body": body}])
    assert hosts_named(failed, TARGETS) == ["decode1"]


def test_a_died_or_unreachable_entry_names_its_host() -> None:
    died = gate(died=[{"name": "sglang-dsv4-prefill", "host": "prefill1", "why": "exited"}])
    assert hosts_named(died, TARGETS) == ["prefill1"]


def test_a_gate_through_the_router_that_names_no_worker_names_every_host_the_routers_first() -> None:
    failed = gate(failures=[{"what": "try 3 at 4.0 s", "status": 200, "body": "garbled"}])
    assert hosts_named(failed, TARGETS) == ["router1", "prefill1", "decode1", "decode2"]
    assert hosts_named(gate(), TARGETS) == ["router1", "prefill1", "decode1", "decode2"]
