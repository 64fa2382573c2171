"""Run a named gate against a rollout plan: the bridge between the playbooks and `dsv4deploy.gates`.

Gate settings are inventory variables of the names of :class:`GateSettings`' fields. A variable
that looks like a gate setting (``readiness_``, ``config_``, ``smoke_``, ``needle_``, ``soak_``)
but is not one is an error naming it, so a typo cannot silently weaken a gate. The needle's
required length follows the deployment's ``index_topk`` unless set (:data:`REQUIRED_BY_TOPK`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dsv4deploy.gates import (
    GateResult,
    Progress,
    ServerConfigInput,
    WorkerEndpoint,
    check_config,
    check_readiness,
    run_needle,
    run_smoke,
    run_soak,
    skipped,
)

GATES = ("readiness", "config", "smoke", "needle", "soak")
GATE_VAR_PREFIXES = tuple(f"{g}_" for g in GATES)
# What the needle must recall per index_topk, as in the seeds: 1024 flipped the 5.5K-token needle
# from lost to found; 512 (the model's default) is reliable only up to about 2K tokens.
REQUIRED_BY_TOPK = {512: 2000, 1024: 5500}
DEFAULT_INDEX_TOPK = 512  # what DeepSeek-V4 runs with when the spec does not set index_topk


class GateSettingsError(ValueError):
    """Gate variables that cannot be used; ``problems`` are one line each, naming the variable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class GateSettings(BaseModel):
    """Deadlines, the needle grid and the soak load, from inventory variables of the same names."""

    model_config = ConfigDict(extra="forbid")

    readiness_deadline_s: float = Field(600, gt=0)
    smoke_deadline_s: float = Field(300, gt=0)
    needle_deadline_s: float = Field(1800, gt=0)
    # None: follow index_topk (REQUIRED_BY_TOPK); 0: report the curve without a requirement.
    needle_required_tokens: int | None = Field(None, ge=0)
    needle_lengths: list[int] = [1000, 2000, 4000, 5500, 8000, 12000]
    needle_depths: list[float] = [0.1, 0.5, 0.9]
    needle_concurrency: int = Field(4, ge=1)
    needle_size_tolerance: float = Field(0.02, gt=0, lt=0.5)
    needle_seed: int = 0
    soak_enabled: bool = True
    soak_sessions: int = Field(50, ge=1)
    soak_turns: int = Field(4, ge=1)
    soak_concurrency: int = Field(16, ge=1)
    soak_max_corruption_rate: float = Field(0.02, ge=0, le=1)
    soak_deadline_s: float = Field(600, gt=0)
    soak_seed: int = 0

    def required_tokens(self, index_topk: int | None) -> int:
        """The needle requirement: as set, else what ``index_topk`` must recall."""
        if self.needle_required_tokens is not None:
            return self.needle_required_tokens
        topk = index_topk or DEFAULT_INDEX_TOPK
        return REQUIRED_BY_TOPK.get(topk, round(REQUIRED_BY_TOPK[512] * topk / 512))


def gate_variables(variables: Mapping[str, Any], resolve: Callable[[Any], Any]) -> dict[str, Any]:
    """The variables with a gate's prefix, each passed through ``resolve`` (templating)."""
    return {k: resolve(v) for k, v in variables.items() if k.startswith(GATE_VAR_PREFIXES)}


def settings_from_vars(variables: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                       index_topk: int | None = None) -> GateSettings:
    """GateSettings from inventory variables plus ``overrides``; GateSettingsError naming every bad one.

    Checks that the needle grid can prove the requirement (a length at least the required one),
    so a deploy is refused before anything changes rather than promoted on a grid too short.
    """
    fields = GateSettings.model_fields
    unknown = [k for k in variables if k.startswith(GATE_VAR_PREFIXES) and k not in fields]
    unknown += [k for k in (overrides or {}) if k not in fields]
    problems = [_unknown(k) for k in sorted(set(unknown))]
    data = {k: v for k, v in variables.items() if k in fields}
    data.update({k: v for k, v in (overrides or {}).items() if k in fields})
    try:
        settings = GateSettings.model_validate(data)
    except ValidationError as exc:
        problems += [f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})" for e in exc.errors()]
        raise GateSettingsError(problems) from None
    required = settings.required_tokens(index_topk)
    if required > 0 and max(settings.needle_lengths, default=0) < required:
        source = "needle_required_tokens" if settings.needle_required_tokens is not None else (
            f"the default for index_topk {index_topk or DEFAULT_INDEX_TOPK}")
        problems.append(f"needle_lengths {settings.needle_lengths} cannot reach the required {required} tokens "
                        f"({source}): add a length of at least {required}, e.g. "
                        f"{sorted({*settings.needle_lengths, required})}")
    if problems:
        raise GateSettingsError(problems)
    return settings


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, GateSettings.model_fields, n=1)
    hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(GateSettings.model_fields)}"
    return f"unknown gate variable {key}{hint}"


def plan_index_topk(plan: Mapping[str, Any]) -> int | None:
    """The smallest index_topk any server of the plan runs with (None when none sets it)."""
    values = [o["index_topk"] for o in (plan.get("expected_overrides") or {}).values()
              if isinstance(o, Mapping) and isinstance(o.get("index_topk"), int)]
    return min(values) if values else None


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
        breaker = plan.get("router_breaker_s")
        return run_smoke(endpoint, model, settings.smoke_deadline_s, api_key=api_key, progress=progress,
                         **({"breaker_cooldown_s": float(breaker)} if breaker else {}))
    if name == "needle":
        return run_needle(endpoint, model, context_lengths=settings.needle_lengths, depths=settings.needle_depths,
                          required_tokens=settings.required_tokens(plan_index_topk(plan)),
                          deadline_s=settings.needle_deadline_s, concurrency=settings.needle_concurrency,
                          seed=settings.needle_seed,
                          api_key=api_key, progress=progress)
    if name == "soak":
        if not settings.soak_enabled:
            return skipped("soak", "soak_enabled is false")
        return run_soak(endpoint, model, sessions=settings.soak_sessions, turns=settings.soak_turns,
                        concurrency=settings.soak_concurrency, max_corruption_rate=settings.soak_max_corruption_rate,
                        deadline_s=settings.soak_deadline_s, seed=settings.soak_seed, api_key=api_key,
                        progress=progress)
    raise ValueError(f"unknown gate '{name}'; choose one of {', '.join(GATES)}")
