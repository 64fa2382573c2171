"""The readiness wait of dsv4_worker_check (mode=watch) starts the router once its workers answer /health,
against stub workers and a stand-in for the service manager (supervisord and systemd are exercised by the
integration and systemd tiers)."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.deploy.plugins.modules import dsv4_worker_check as services

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
