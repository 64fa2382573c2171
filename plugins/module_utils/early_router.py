"""Register a router's workers through its worker API the moment each answers /health (standard library
only), for a router started while its workers still load.

A router started with its workers on its command line probes a loading worker on its own back-off
(sglang-router 0.3.2: 1, 2, 3, 4 s, then every 5 s), so it notices a ready pipeline seconds late; started
only once they are healthy, its own start (0.55-0.7 s) is on the critical path. Started early and told of
each worker as soon as the worker answers, it routes within one registration job. The router's
/readiness stays 503 until a prefill and a decode are registered and healthy, so it never passes before
the pipeline does. A router that cannot take PD workers at run time (sglang-router <= 0.2.1, the
``legacy`` API) is not started early: `takes_workers_at_run_time` says which.
"""

from __future__ import annotations

import time

from ansible_collections.dsv4.deploy.plugins.module_utils.net import healthy, local_url
from ansible_collections.dsv4.deploy.plugins.module_utils.router_workers import (
    RouterWorkers,
    RouterWorkersError,
    api_for,
)


def takes_workers_at_run_time(router: str, version: str) -> bool:
    """Whether `router` at `version` can be told of PD workers while it runs (sglang-router >= 0.2.2, smg)."""
    try:
        return api_for(router, version) != "legacy"
    except ValueError:
        return False


class Registration:
    """The workers of one router (its service `program`), each submitted once it answers /health; evidence
    per worker."""

    def __init__(self, program: str, router_url: str, api: str, workers: list[dict], key: str | None = None) -> None:
        self.program = program
        self.router_url = local_url(router_url)
        self.client = RouterWorkers(self.router_url, api, key)
        self.pending = {w["name"]: w for w in workers}
        # name -> {"seconds": after the wait began, "job": id} or {"error": why (the router's own probe then)}
        self.evidence: dict[str, dict] = {}

    @property
    def urls(self) -> set[str]:
        """The worker URLs still to be asked for /health (as the router uses them)."""
        return {w["url"] for w in self.pending.values()}

    @property
    def done(self) -> bool:
        """Every worker submitted (or refused, left to the router's own probe)."""
        return not self.pending

    def step(self, up: dict[str, bool], t0: float) -> None:
        """Submit each pending worker whose URL answered /health, once the router itself answers."""
        ready = [w for w in self.pending.values() if up.get(w["url"])]
        if not ready or not healthy(self.router_url, timeout=1):
            return
        for worker in ready:
            del self.pending[worker["name"]]
            try:
                job = self.client.submit(worker["url"], worker["worker_type"], worker.get("bootstrap_port"),
                                         worker.get("model_id"))
            except RouterWorkersError as exc:
                self.evidence[worker["name"]] = {"error": str(exc)}
                continue
            self.evidence[worker["name"]] = {"seconds": round(time.monotonic() - t0, 3), "job": job}
