"""Run a named gate against a rollout plan: the bridge between the playbooks and `dsv4deploy.gates`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsv4deploy.gates import (
    GateResult,
    Progress,
    ServerConfigInput,
    WorkerEndpoint,
    check_config,
    check_readiness,
    run_needle,
    run_smoke,
)

GATES = ("readiness", "config", "smoke", "needle")


class GateSettings(BaseModel):
    """Deadlines and needle grid, from inventory variables of the same names."""

    model_config = ConfigDict(extra="ignore")

    readiness_deadline_s: float = Field(600, gt=0)
    smoke_deadline_s: float = Field(300, gt=0)
    needle_deadline_s: float = Field(1800, gt=0)
    needle_required_tokens: int = Field(4000, ge=0)
    needle_lengths: list[int] = [1000, 2000, 4000, 8000]
    needle_depths: list[float] = [0.1, 0.5, 0.9]
    needle_concurrency: int = Field(4, ge=1)


def run_gate(name: str, plan: Mapping[str, Any], settings: GateSettings, *, logs: Mapping[str, str] | None = None,
             api_key: str | None = None, progress: Progress | None = None) -> GateResult:
    """Run gate `name` against the servers the plan deployed."""
    model = plan["served_model_name"]
    endpoint = plan["endpoint"]
    if name == "readiness":
        workers = [WorkerEndpoint(name=w["name"], role=w["role"], url=w["url"]) for w in plan["workers"]]
        return check_readiness(workers, plan.get("router_url"), model, settings.readiness_deadline_s,
                               api_key=api_key, progress=progress)
    if name == "config":
        servers = [ServerConfigInput(name=w["name"], role=w["role"], url=w["url"],
                                     log_text=(logs or {}).get(w["name"], "")) for w in plan["workers"]]
        expected = next(iter(plan["expected_overrides"].values()), {})
        return check_config(expected, servers, api_key=api_key)
    if name == "smoke":
        return run_smoke(endpoint, model, settings.smoke_deadline_s, api_key=api_key, progress=progress)
    if name == "needle":
        return run_needle(endpoint, model, context_lengths=settings.needle_lengths, depths=settings.needle_depths,
                          required_tokens=settings.needle_required_tokens, deadline_s=settings.needle_deadline_s,
                          concurrency=settings.needle_concurrency, api_key=api_key, progress=progress)
    raise ValueError(f"unknown gate '{name}'; choose one of {', '.join(GATES)}")
