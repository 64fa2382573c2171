"""The readiness wait of dsv4_worker_check (mode=watch) starts the router once its workers answer /health,
against stub workers and a stand-in for the service manager (supervisord and systemd are exercised by the
integration and systemd tiers)."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.deploy.plugins.module_utils.early_router import Registration, takes_workers_at_run_time
from ansible_collections.dsv4.deploy.plugins.module_utils.router_workers import api_for
from ansible_collections.dsv4.deploy.plugins.modules import dsv4_worker_check as services
from dsv4deploy.sglang import routers

from .stubs import after, always


class Manager:
    """Programs that run or do not, and the starts asked of it (supervisord's or systemd's interface)."""

    def __init__(self, **running: bool) -> None:
        self.running = dict(running)
        self.starts: list[str] = []

    def lives(self, names: list[str]) -> dict[str, dict[str, Any]]:
        return {n: {"name": n, "state": "RUNNING" if self.running[n] else "STOPPED", "pid": 7, "since": 1.0}
                for n in names}

    def gone(self, now: dict[str, Any], base: dict[str, Any]) -> str:
        return "" if now["state"] == "RUNNING" else "was stopped"

    def start_all(self, names: list[str]) -> dict[str, str]:
        self.starts += names
        self.running.update(dict.fromkeys(names, True))
        return {}


def test_router_is_started_only_once_every_worker_answers_and_is_not_a_death_before(stub):
    prefill = stub({"GET /health": always((200, ""))})
    decode = stub({"GET /health": after(3, (503, "warming up"), (200, ""))})
    mgr = Manager(prefill=True, decode=True, router=False)
    workers = {"prefill": prefill.url, "decode": decode.url}
    result = services.watch(mgr, ["prefill", "decode", "router"], workers, {}, 10, {}, {"router": workers})
    assert "died" not in result, result
    assert mgr.starts == ["router"]
    assert set(result["healthy"]) == {"prefill", "decode"} and result["not_started"] == []
    # Started after the decode's fourth /health (the first 200), never before.
    assert decode.calls.count("GET /health") == 4 and result["started_later"]["router"] >= result["healthy"]["decode"]


def test_workers_never_healthy_leave_the_router_unstarted_and_named(stub):
    decode = stub({"GET /health": always((503, "still loading"))})
    mgr = Manager(decode=True, router=False)
    result = services.watch(mgr, ["decode", "router"], {"decode": decode.url}, {}, 0.5, {},
                            {"router": {"decode": decode.url}})
    assert mgr.starts == [] and result["not_started"] == ["router"] and result["waiting"] == ["decode"]
    assert "died" not in result


def test_a_router_already_running_is_watched_not_started_again(stub):
    decode = stub({"GET /health": always((200, ""))})
    mgr = Manager(decode=True, router=True)
    result = services.watch(mgr, ["decode", "router"], {"decode": decode.url}, {}, 5, {},
                            {"router": {"decode": decode.url}})
    assert mgr.starts == [] and result["started_later"] == {} and "died" not in result


# -- a router started early and told of each worker through its worker API ------------------------------


def _router_stub(stub, status: int = 202):
    """A router answering /health, taking POST /workers; the bodies it was sent, in order."""
    posted: list[dict] = []

    def take(request):
        posted.append(request.body)
        return (status, {"status": "accepted", "worker_id": f"id-{len(posted)}"} if status == 202 else
                {"error": "bad worker"})

    return stub({"GET /health": always((200, "OK")), "POST /workers": take}), posted


def _specs(prefill, decode) -> list[dict]:
    return [{"name": "prefill", "url": prefill.url, "worker_type": "prefill", "bootstrap_port": 8998, "model_id": "m"},
            {"name": "decode", "url": decode.url, "worker_type": "decode", "bootstrap_port": None, "model_id": "m"}]


def test_an_early_router_is_started_at_once_and_told_of_each_worker_as_it_answers(stub):
    prefill = stub({"GET /health": always((200, ""))})
    decode = stub({"GET /health": after(3, (503, "warming up"), (200, ""))})
    router, posted = _router_stub(stub)
    mgr = Manager(prefill=True, decode=True, router=False)
    register = Registration("router", router.url, "uuid", _specs(prefill, decode), key="k")
    result = services.watch(mgr, ["prefill", "decode", "router"], {"prefill": prefill.url, "decode": decode.url},
                            {}, 10, {}, {"router": {}}, register)
    assert "died" not in result, result
    # Started before any worker was healthy (the wait's first round), not once they all were.
    assert mgr.starts == ["router"] and result["started_later"]["router"] <= result["healthy"]["decode"]
    assert [p["url"] for p in posted] == [prefill.url, decode.url], posted
    assert posted[0] == {"url": prefill.url, "worker_type": "prefill", "bootstrap_port": 8998, "model_id": "m"}
    assert posted[1] == {"url": decode.url, "worker_type": "decode", "model_id": "m"}
    assert {a for c, a in zip(router.calls, router.auth_headers, strict=True) if c == "POST /workers"} == {"Bearer k"}
    # The decode was submitted only once it answered /health 200 (its fourth try), and the wait lasted till then.
    assert decode.count("GET /health") == 4
    assert result["registered"]["decode"]["seconds"] >= result["healthy"]["decode"] - 0.2
    assert result["registered"]["decode"]["job"] == "id-2" and result["not_registered"] == []


def test_a_worker_the_router_refuses_is_named_and_left_to_its_own_probe(stub):
    prefill, decode = stub({"GET /health": always((200, ""))}), stub({"GET /health": always((200, ""))})
    router, posted = _router_stub(stub, status=400)
    mgr = Manager(prefill=True, decode=True, router=True)
    register = Registration("router", router.url, "uuid", _specs(prefill, decode))
    result = services.watch(mgr, ["prefill", "decode", "router"], {"prefill": prefill.url, "decode": decode.url},
                            {}, 5, {}, {"router": {}}, register)
    assert "died" not in result and len(posted) == 2
    assert "refused to add the prefill" in result["registered"]["prefill"]["error"], result
    assert "HTTP 400" in result["registered"]["decode"]["error"]


def test_workers_never_healthy_are_never_submitted(stub):
    decode = stub({"GET /health": always((503, "still loading"))})
    router, posted = _router_stub(stub)
    mgr = Manager(decode=True, router=True)
    spec = [{"name": "decode", "url": decode.url, "worker_type": "decode"}]
    result = services.watch(mgr, ["decode", "router"], {"decode": decode.url}, {}, 0.5, {}, {"router": {}},
                            Registration("router", router.url, "uuid", spec))
    assert posted == [] and result["not_registered"] == ["decode"] and result["registered"] == {}


class Module:
    """What registration() asks of AnsibleModule."""

    def fail_json(self, **kwargs: Any) -> None:
        raise AssertionError(kwargs["msg"])


def test_the_early_start_is_chosen_by_the_routers_version():
    spec = {"program": "router", "router_url": "http://127.0.0.1:1", "workers": [{"name": "d", "url": "u"}]}

    def api(router: str, version: str, **extra: Any) -> str | None:
        found = services.registration(Module(), {**spec, "router": router, "router_version": version, **extra})
        return found and found.client.api

    assert api("sglang-router", "0.2.1") is None  # cannot take PD workers at run time: today's late start
    assert api("sglang-router", "0.2.5") == "url" and api("sglang-router", "0.3.2") == "uuid"
    assert api("smg", "1.13.0") == "uuid" and api("smg", "1.13.0", workers=[]) is None
    assert not takes_workers_at_run_time("sglang-router", "not-a-version")


def test_the_plans_router_table_agrees_with_the_host_side_choice():
    # The controller starts the router with its workers when its table says it takes workers at run time;
    # the readiness wait then registers them by the router's version: the two must not disagree.
    for impl in routers.IMPLEMENTATIONS.values():
        assert impl.worker_api == api_for(impl.name, impl.version), impl
        assert impl.takes_workers_at_run_time == takes_workers_at_run_time(impl.name, impl.version)
