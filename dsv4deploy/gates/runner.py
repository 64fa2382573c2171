"""Run a named gate against a rollout plan: the bridge between the playbooks and `dsv4deploy.gates`.

Worker checks run where the worker's address is reachable: from the controller, or on the worker's
own host (``dsv4_worker_probe``), whose answers come in as ``probes``. Whatever the controller
asks itself is first checked to be reachable from here, so an address that cannot be reached is
reported within seconds instead of being polled until the deadline.

Gate settings are inventory variables of the names of :class:`GateSettings`' fields. A variable
that looks like a gate setting (``readiness_``, ``config_``, ``smoke_``, ``needle_``, ``soak_``)
but is not one is an error naming it, so a typo cannot silently weaken a gate. The needle's
required length follows the deployment's ``index_topk`` unless set (:data:`REQUIRED_BY_TOPK`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dsv4deploy.gates import (
    GateResult,
    GateStatus,
    Progress,
    ServerConfigInput,
    SoakDesign,
    WorkerEndpoint,
    check_config,
    check_readiness,
    reach,
    run_needle,
    run_smoke,
    run_soak,
    skipped,
)
from dsv4deploy.gates.bake import BakeSettings, run_bake
from dsv4deploy.gates.canary import canary_analyses
from dsv4deploy.gates.chain import GATES, names_problems
from dsv4deploy.gates.occupancy import OccupancySampler
from dsv4deploy.gates.perf import PerfLoad, run_perf
from dsv4deploy.gates.quality_runner import accuracy_gate, bake_canary, override_behaviour, parity_gate
from dsv4deploy.gates.readiness import deadline_reason, whole_wait
from dsv4deploy.gates.recall_rule import BAD_RECALL, DEFAULT_MIN_RECALLED, DEFAULT_TRIALS, RecallRule
from dsv4deploy.gates.result import Stopwatch, make_result

# The bake's settings are the dsv4_bake role's variables (dsv4_bake_*), handed in whole, not gate variables.
GATE_VAR_PREFIXES = tuple(f"{g}_" for g in GATES if g != "bake")
# Gate variables no longer read, each with what to do instead; set, they warn and do not fail the plan.
RETIRED_GATE_VARS = {
    "perf_enabled": "the perf gate is opt-in: it runs only when 'perf' is in dsv4_gates_names; leave it out "
                    "instead of setting perf_enabled: false",
    "perf_p99_tolerance": "the perf gate judges every time-to-first-token figure (TTFT p50 and p99) with one band, "
                          "perf_ttft_tolerance (docs/evidence.md); set that instead",
}
# What the needle must recall per index_topk, as in the seeds: 1024 flipped the 5.5K-token needle
# from lost to found; 512 (the model's default) is reliable only up to about 2K tokens.
REQUIRED_BY_TOPK = {512: 2000, 1024: 5500}
DEFAULT_INDEX_TOPK = 512  # what DeepSeek-V4 runs with when the spec does not set index_topk
# Gates that ask the workers themselves (the others talk to the client-facing endpoint only).
WORKER_GATES = ("readiness", "config")
class GateSettingsError(ValueError):
    """Gate variables that cannot be used; ``problems`` are one line each, naming the variable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


DEFAULT_READINESS_DEADLINE_S = 600.0


class GateSettings(BaseModel):
    """Deadlines, the needle grid and the soak load, from inventory variables of the same names."""

    model_config = ConfigDict(extra="forbid")

    # None: the model profile's readiness_deadline_s (the plan's), else DEFAULT_READINESS_DEADLINE_S.
    readiness_deadline_s: float | None = Field(None, gt=0)
    config_deadline_s: float = Field(60, gt=0)
    smoke_deadline_s: float = Field(300, gt=0)
    # Whether smoke also wants the answer to say OK; None: as the model's profile says
    # (profiles.yml `smoke_expects_ok`: on for DeepSeek-V4, off for a generic model).
    smoke_expect_ok: bool | None = None
    needle_deadline_s: float = Field(1800, gt=0)
    # None: follow index_topk (REQUIRED_BY_TOPK); 0: report the curve without a requirement.
    needle_required_tokens: int | None = Field(None, ge=0)
    needle_lengths: list[int] = [1000, 2000, 4000, 5500, 8000, 12000]
    needle_depths: list[float] = [0.1, 0.5, 0.9]
    needle_concurrency: int = Field(4, ge=1)
    needle_size_tolerance: float = Field(0.02, gt=0, lt=0.5)
    needle_seed: int = 0
    # Each cell is asked up to needle_trials independent trials, read in order: it passes once
    # needle_pass_early[m] recalled with m missed (needle_min_recalled past the schedule), fails past
    # needle_trials - needle_min_recalled misses (dsv4deploy.gates.recall_rule, docs/evidence.md). The defaults
    # pass a 90 %-recall cell with probability 0.976 and a 50 % one with 0.073; a clean cell costs 4 trials.
    # needle_pass_early unset: the default schedule with the default trials, else a plain k of n.
    # Transport retries above needle_max_retry_share of the requests fail it.
    needle_trials: int = Field(DEFAULT_TRIALS, ge=1)
    needle_min_recalled: int = Field(DEFAULT_MIN_RECALLED, ge=1)
    needle_pass_early: list[int] | None = None
    # Cells past the requirement only draw the recall curve: this many trials each, never judged.
    needle_curve_trials: int = Field(1, ge=1)
    needle_max_retry_share: float = Field(0.05, ge=0, le=1)
    soak_enabled: bool = True
    # The soak decides by Wald's sequential test (dsv4deploy.gates.evidence, docs/evidence.md): it tells a
    # clean release (at most soak_acceptable_rate corrupted sessions) from a bad one (at least
    # soak_max_corruption_rate), refusing a clean one with risk soak_alpha and promoting a bad one with risk
    # soak_beta; model mistakes (a well-formed call that is not the one asked for) against their own pair,
    # each test at soak_alpha / 2. soak_sessions is the budget: a clean release passes after 65 sessions, the
    # seeds' PD fault (15 %) fails in about 20; undecided at the budget or the deadline, the soak is
    # inconclusive (which refuses too: 400 keeps the joint refusal of a clean release within soak_alpha).
    soak_sessions: int = Field(400, ge=1)
    soak_turns: int = Field(4, ge=1)
    # 32 in flight: a clean verdict's 65 sessions then take about as long as the former 50-session soak took at
    # 16 (bench: soak_verdict_time), and the decode is loaded as the seeds' corruption needed.
    soak_concurrency: int = Field(32, ge=1)
    soak_acceptable_rate: float = Field(0.005, gt=0, lt=1)
    soak_max_corruption_rate: float = Field(0.05, gt=0, lt=1)
    soak_acceptable_mistake_rate: float = Field(0.02, gt=0, lt=1)
    soak_max_mistake_rate: float = Field(0.10, gt=0, lt=1)
    soak_alpha: float = Field(0.01, gt=0, lt=0.5)
    soak_beta: float = Field(0.05, gt=0, lt=0.5)
    # Transient failures retried, as a share of the soak's requests, above which it fails (a retry must not
    # hide an intermittent PD failure).
    soak_max_retry_share: float = Field(0.05, ge=0, le=1)
    soak_deadline_s: float = Field(900, gt=0)
    soak_seed: int = 0
    # false: run all soak_sessions and judge them at once (the isolation experiment, whose two sides are
    # compared by Fisher's exact test at a sample size chosen for the question).
    soak_sequential: bool = True
    # The performance gate (docs/evidence.md#perf): perf_rounds rounds of a fixed load (about half a second
    # each on the embedded host); a figure regresses when a one-sided Mann-Whitney U test over the rounds
    # is significant at perf_alpha (Kayenta's 98 % confidence) and its median is worse than the last good
    # release's by at least the band perf_tolerance (perf_ttft_tolerance for the time-to-first-token figures:
    # queueing, which a busy machine moves most) and, for a latency, by more than perf_noise_floor_s.
    perf_requests: int = Field(16, ge=1)
    perf_concurrency: int = Field(4, ge=1)
    perf_prompt_tokens: int = Field(128, ge=16)
    perf_output_tokens: int = Field(32, ge=2)
    perf_rounds: int = Field(5, ge=1, le=50)
    perf_alpha: float = Field(0.02, gt=0, lt=0.5)
    perf_tolerance: float = Field(0.3, gt=0)
    perf_ttft_tolerance: float = Field(1.0, gt=0)
    perf_noise_floor_s: float = Field(0.002, ge=0)
    perf_deadline_s: float = Field(300, gt=0)
    # The accuracy gate (dsv4deploy.gates.accuracy): a question set ('builtin' or a JSONL path on the
    # controller, GSM8K's format), judged against the model profile's reference score for accuracy_task
    # (None: 'builtin' for the built-in set, 'gsm8k' for a file) or accuracy_expected, minus the margin.
    accuracy_questions: str = "builtin"
    accuracy_task: str | None = None
    accuracy_expected: float | None = Field(None, gt=0, le=1)
    accuracy_margin: float = Field(0.05, gt=0, lt=1)
    accuracy_count: int = Field(200, ge=1)
    accuracy_concurrency: int = Field(16, ge=1)
    accuracy_temperature: float = Field(0.0, ge=0)
    accuracy_top_p: float | None = Field(None, gt=0, le=1)
    accuracy_max_tokens: int = Field(1024, ge=8)
    accuracy_alpha: float = Field(0.05, gt=0, lt=0.5)
    accuracy_beta: float = Field(0.1, gt=0, lt=0.5)
    accuracy_seed: int = 0
    accuracy_deadline_s: float = Field(600, gt=0)
    # The parity gate (dsv4deploy.gates.parity): logprob tolerance (None: by hardware, gpu 0.05, cpu 0.01).
    parity_hardware: Literal["gpu", "cpu"] = "gpu"
    parity_tolerance: float | None = Field(None, ge=0)
    parity_deadline_s: float = Field(300, gt=0)

    def readiness_deadline(self, plan: Mapping[str, Any] | None = None) -> float:
        """The readiness deadline: as set, else the model profile's (the plan's gate targets), else 600 s."""
        if self.readiness_deadline_s is not None:
            return self.readiness_deadline_s
        profile = (plan or {}).get("readiness_deadline_s")
        return float(profile) if profile else DEFAULT_READINESS_DEADLINE_S

    @model_validator(mode="after")
    def _soak_design_works(self) -> GateSettings:
        if self.soak_acceptable_rate >= self.soak_max_corruption_rate:
            raise ValueError(f"soak_acceptable_rate {self.soak_acceptable_rate:g} must be below "
                             f"soak_max_corruption_rate {self.soak_max_corruption_rate:g}")
        if self.soak_acceptable_mistake_rate >= self.soak_max_mistake_rate:
            raise ValueError(f"soak_acceptable_mistake_rate {self.soak_acceptable_mistake_rate:g} must be below "
                             f"soak_max_mistake_rate {self.soak_max_mistake_rate:g}")
        if self.soak_enabled and self.soak_sequential:
            # A budget below what a clean release needs to pass makes every soak inconclusive: refused here,
            # before anything changes, rather than found after the rollout stopped production.
            needed = max(t.more_to_pass() for t in self.soak_design().tests(self.soak_sessions))
            if needed > self.soak_sessions:
                raise ValueError(
                    f"soak_sessions {self.soak_sessions} cannot pass even a clean release: the sequential test "
                    f"(clean at most {self.soak_acceptable_rate:g}, refused from {self.soak_max_corruption_rate:g}, "
                    f"risks soak_alpha {self.soak_alpha:g} and soak_beta {self.soak_beta:g}) needs {needed} clean "
                    f"sessions; fix: soak_sessions {needed} or more (400 is the default), or a wider design "
                    f"(a higher soak_max_corruption_rate or soak_acceptable_rate)")
        if self.needle_min_recalled > self.needle_trials:
            raise ValueError(f"needle_min_recalled {self.needle_min_recalled} must be at most needle_trials "
                             f"{self.needle_trials}")
        self.recall_rule()  # a needle_pass_early that does not fit the rule is refused here, naming it
        return self

    def recall_rule(self) -> RecallRule:
        """The needle's per-cell rule (dsv4deploy.gates.recall_rule)."""
        early = None if self.needle_pass_early is None else tuple(self.needle_pass_early)
        return RecallRule(self.needle_trials, self.needle_min_recalled, early)

    def soak_design(self) -> SoakDesign:
        """What the soak tells apart, and at what risk."""
        return SoakDesign(acceptable_rate=self.soak_acceptable_rate, max_rate=self.soak_max_corruption_rate,
                          acceptable_mistake_rate=self.soak_acceptable_mistake_rate,
                          max_mistake_rate=self.soak_max_mistake_rate, alpha=self.soak_alpha, beta=self.soak_beta,
                          max_retry_share=self.soak_max_retry_share)

    def required_tokens(self, index_topk: int | None) -> int:
        """The needle requirement: as set, else what ``index_topk`` must recall."""
        if self.needle_required_tokens is not None:
            return self.needle_required_tokens
        topk = index_topk or DEFAULT_INDEX_TOPK
        return REQUIRED_BY_TOPK.get(topk, round(REQUIRED_BY_TOPK[512] * topk / 512))


def settings_from_vars(variables: Mapping[str, Any], template: Callable[[Any], Any],
                       overrides: Mapping[str, Any] | None = None, index_topk: int | None = None) -> GateSettings:
    """GateSettings from play variables with a gate's prefix (templated), then ``overrides``.

    Raises GateSettingsError naming every unknown or invalid one. Checks too that the needle grid
    can prove the requirement (a length at least the required one), so a deploy is refused before
    anything changes rather than promoted on a grid too short.

    """
    fields = GateSettings.model_fields
    unknown = [k for k in variables if k.startswith(GATE_VAR_PREFIXES) and k not in fields
               and k not in RETIRED_GATE_VARS]
    unknown += [k for k in (overrides or {}) if k not in fields]
    problems = [_unknown(k) for k in sorted(set(unknown))]
    if "dsv4_gates_names" in variables:
        problems += names_problems(template(variables["dsv4_gates_names"]))
    data = {k: template(v) for k, v in variables.items() if k in fields}
    data.update({k: v for k, v in (overrides or {}).items() if k in fields})
    try:
        settings = GateSettings.model_validate(data)
    except ValidationError as exc:
        problems += [_invalid(e) for e in exc.errors()]
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


#: The gate list a deploy runs when dsv4_gates_names is not set (roles/dsv4_gates/defaults/main.yml).
DEFAULT_GATE_NAMES = ("readiness", "config", "smoke", "needle", "soak")


def weakened(settings: GateSettings, index_topk: int | None, variables: Mapping[str, Any],
             template: Callable[[Any], Any]) -> list[str]:
    """Each setting that makes the gates weaker than the spec implies, named with what it should be: the
    run is then marked WEAKENED on the plan line and the report's first line.

    `variables` are the play's (dsv4_gates_names, dsv4_gates_inconclusive, dsv4_bake_s,
    dsv4_bake_canary_tokens; unset ones take their defaults)."""
    out: list[str] = []
    topk = index_topk or DEFAULT_INDEX_TOPK
    implied = REQUIRED_BY_TOPK.get(topk, round(REQUIRED_BY_TOPK[512] * topk / 512))
    required = settings.required_tokens(index_topk)
    if required < implied:
        out.append(f"needle_required_tokens {required} is below the {implied} that index_topk {topk} implies")
    defaults = GateSettings()
    for name in ("soak_acceptable_rate", "soak_max_corruption_rate", "soak_acceptable_mistake_rate",
                 "soak_max_mistake_rate", "soak_alpha", "soak_beta", "soak_max_retry_share"):
        if getattr(settings, name) > getattr(defaults, name):
            out.append(f"{name} {getattr(settings, name):g} is above the default {getattr(defaults, name):g}")
    if settings.needle_max_retry_share > defaults.needle_max_retry_share:
        out.append(f"needle_max_retry_share {settings.needle_max_retry_share:g} is above the default "
                   f"{defaults.needle_max_retry_share:g}")
    rule, default_rule = settings.recall_rule(), defaults.recall_rule()
    if rule != default_rule and rule.pass_probability(BAD_RECALL) > default_rule.pass_probability(BAD_RECALL):
        out.append(f"the needle rule {rule.schedule()} (needle_trials, needle_min_recalled, needle_pass_early) "
                   f"passes a {BAD_RECALL:.0%}-recall cell with probability {rule.pass_probability(BAD_RECALL):.4f}, "
                   f"above the default's {default_rule.pass_probability(BAD_RECALL):.4f}")
    if not settings.soak_enabled:
        out.append("soak_enabled is false")
    raw = variables.get("dsv4_gates_names")
    names = {n for entry in (template(raw) if raw is not None else DEFAULT_GATE_NAMES)
             for n in ([entry] if isinstance(entry, str) else entry)}
    out += [f"{gate} is left out of dsv4_gates_names" for gate in ("needle", "soak") if gate not in names]
    if str(template(variables.get("dsv4_gates_inconclusive", "fail"))) == "pass":
        out.append("dsv4_gates_inconclusive is pass (an undecided gate lets the release through)")
    bake_s = float(template(variables.get("dsv4_bake_s", 0)) or 0)
    canary = int(template(variables.get("dsv4_bake_canary_tokens", BakeSettings().canary_tokens)))
    if bake_s > 0 and required > canary:
        out.append(f"dsv4_bake_canary_tokens {canary} is shorter than the needle requirement {required}")
    return out


def retired_warnings(variables: Mapping[str, Any]) -> list[str]:
    """One warning per retired gate variable set in `variables`, saying what to do instead."""
    return [f"'{name}' is no longer read: {why}" for name, why in RETIRED_GATE_VARS.items() if name in variables]


def _invalid(error: Mapping[str, Any]) -> str:
    where = ".".join(map(str, error["loc"]))
    line = f"{where}: {error['msg']} (got {error.get('input')!r})"
    if error["type"] == "list_type" and str(error.get("input", "")).lstrip().startswith("["):
        # `-e key=[1,2]` is text to ansible-playbook; JSON extra vars keep the list.
        line += f"; fix: pass a list as JSON, e.g. -e '{{\"{where}\": {error['input']}}}'"
    return line


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, GateSettings.model_fields, n=1)
    hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(GateSettings.model_fields)}"
    return f"unknown gate variable {key}{hint}"


def plan_index_topk(plan: Mapping[str, Any]) -> int | None:
    """The smallest index_topk any server of the plan runs with (None when none sets it)."""
    values = [o["index_topk"] for o in (plan.get("expected_overrides") or {}).values()
              if isinstance(o, Mapping) and isinstance(o.get("index_topk"), int)]
    return min(values) if values else None


def host_checks(plan: Mapping[str, Any], host: str, host_is_local: bool) -> list[dict[str, Any]]:
    """The workers of `host` whose checks must run on `host` itself (see dsv4deploy.gates.reach)."""
    endpoint = plan.get("endpoint")
    return [w for w in plan["workers"]
            if w["host"] == host and w["url"] != endpoint
            and reach.checked_on_host(w["url"], w.get("host_address", ""), host_is_local)]


def run_gate(name: str, plan: Mapping[str, Any], settings: GateSettings, *, logs: Mapping[str, str] | None = None,
             api_key: str | None = None, progress: Progress | None = None,
             probes: Mapping[str, Any] | None = None, baseline: Mapping[str, Any] | None = None,
             bake: BakeSettings | None = None, parity_baseline: Mapping[str, Any] | None = None) -> GateResult:
    """Run gate `name` against the servers the plan deployed.

    `probes` maps each host to what ``dsv4_worker_probe`` found there: ``{"local": bool, "seconds":
    float, "workers": {name: answers}}``. Without it every host counts as reachable from here.
    `baseline` is the perf figures of the last good release (the perf gate judges against them);
    `bake` the bake's settings (gate ``bake``; none or 0 seconds: skipped); `parity_baseline` the parity
    record of the last good release (gate ``parity`` compares with it; the bake's parity canary, this deploy's
    own record).
    """
    if name not in GATES:
        raise ValueError(f"unknown gate '{name}'; choose one of {', '.join(GATES)}")
    if name == "soak" and not settings.soak_enabled:
        return skipped("soak", "soak_enabled is false")
    watch = Stopwatch()
    probes = probes or {}
    died = [data["died"] for data in probes.values() if data.get("died")]
    if name == "readiness" and died:
        return _died_result(watch, died)
    on_host = {w: (host, found) for host, data in probes.items() for w, found in (data.get("workers") or {}).items()}
    here = _asked_here(name, plan, on_host)
    unreachable = _unreachable(here, probes) + [
        {"what": f"{w} ({host})", "url": found.get("url", ""), "host": host, "checked_from": host,
         "reason": found["unreachable"]}
        for w, (host, found) in on_host.items() if name in WORKER_GATES and "unreachable" in found
    ]
    if unreachable:
        return _unreachable_result(name, watch, unreachable)
    model = plan["served_model_name"]
    endpoint = plan["endpoint"]
    if name == "readiness":
        workers = [WorkerEndpoint(name=w["name"], role=w["role"], url=w["url"], sglang_version=w.get("sglang_version"))
                   for w in plan["workers"] if w["name"] not in on_host]
        settled = [{**entry, "checked_on": host} for host, found in on_host.values() for entry in found["checks"]]
        # The hosts' checks used part of the deadline already; what remains is the controller's.
        elapsed = max((float(data.get("seconds") or 0) for data in probes.values()), default=0.0)
        deadline, why = settings.readiness_deadline(plan), deadline_reason(settings.readiness_deadline_s, plan)
        result = check_readiness(workers, plan.get("router_url"), model, max(deadline - elapsed, 0.5),
                                 api_key=api_key, progress=progress, settled=settled)
        return _with_unstarted(whole_wait(result, elapsed, deadline, why), probes)
    if name == "config":
        servers = [ServerConfigInput(name=w["name"], role=w["role"], url=w["url"],
                                     log_text=(logs or {}).get(w["name"], ""),
                                     server_info=on_host[w["name"]][1]["server_info"] if w["name"] in on_host else None,
                                     checked_on=on_host[w["name"]][0] if w["name"] in on_host else None)
                   for w in plan["workers"]]
        expected = next(iter(plan["expected_overrides"].values()), {})
        return check_config(expected, servers, expected_settings=plan.get("expected_settings"), api_key=api_key,
                            deadline_s=settings.config_deadline_s, expected_transports=plan.get("expected_transports"),
                            behaviour=override_behaviour(plan, settings, parity_baseline, api_key))
    if name == "smoke":
        breaker = plan.get("router_breaker_s")
        expect_ok = settings.smoke_expect_ok
        if expect_ok is None:
            expect_ok = bool(plan.get("smoke_expects_ok", True))
        return run_smoke(endpoint, model, settings.smoke_deadline_s, api_key=api_key, progress=progress,
                         expect_ok=expect_ok, **({"breaker_cooldown_s": float(breaker)} if breaker else {}))
    if name == "needle":
        return run_needle(endpoint, model, context_lengths=settings.needle_lengths, depths=settings.needle_depths,
                          required_tokens=settings.required_tokens(plan_index_topk(plan)),
                          deadline_s=settings.needle_deadline_s, concurrency=settings.needle_concurrency,
                          size_tolerance=settings.needle_size_tolerance, seed=settings.needle_seed,
                          rule=settings.recall_rule(), max_retry_share=settings.needle_max_retry_share,
                          curve_trials=settings.needle_curve_trials, api_key=api_key, progress=progress)
    if name == "perf":
        load = PerfLoad(settings.perf_requests, settings.perf_concurrency, settings.perf_prompt_tokens,
                        settings.perf_output_tokens)
        return run_perf(endpoint, model, workers=_metrics_workers(plan, probes), key=perf_key(plan, load), load=load,
                        tolerance=settings.perf_tolerance, noise_floor_s=settings.perf_noise_floor_s,
                        baseline=baseline, deadline_s=settings.perf_deadline_s, api_key=api_key,
                        progress=progress, ttft_tolerance=settings.perf_ttft_tolerance,
                        rounds=settings.perf_rounds, alpha=settings.perf_alpha)
    if name == "accuracy":
        return accuracy_gate(plan, settings, api_key=api_key, progress=progress)
    if name == "parity":
        return parity_gate(plan, settings, baseline=parity_baseline, api_key=api_key)
    if name == "bake":
        if bake is None or bake.seconds <= 0:
            return skipped("bake", "dsv4_bake_s is 0: no bake")
        canary = bake_canary(plan, settings, bake, parity_baseline)
        return run_bake(endpoint, model, workers=_metrics_workers(plan, probes), settings=bake,
                        topology=plan.get("topology") or "", router_metrics_url=_router_metrics(plan, probes),
                        api_key=api_key, progress=progress, notes=canary.notes(),
                        canaries=(lambda i: canary_analyses(endpoint, model, canary, i, api_key))
                        if canary.runs() else None)
    with OccupancySampler(_metrics_workers(plan, probes)) as occupancy:  # the corruption depends on the batch
        result = run_soak(endpoint, model, sessions=settings.soak_sessions, turns=settings.soak_turns,
                          concurrency=settings.soak_concurrency, max_corruption_rate=settings.soak_max_corruption_rate,
                          design=settings.soak_design(), sequential=settings.soak_sequential, api_key=api_key,
                          deadline_s=settings.soak_deadline_s, seed=settings.soak_seed, progress=progress)
    result.evidence["occupancy"] = occupancy.summary()
    return result


def _metrics_workers(plan: Mapping[str, Any], probes: Mapping[str, Any]) -> list[dict[str, str]]:
    """The workers whose /metrics the controller reads: one bound to an address only its own host reaches
    is left out (the client-side figures and the probes still judge the release)."""
    return [{"name": w["name"], "url": w["url"], "role": w["role"]} for w in plan["workers"]
            if not reach.checked_on_host(w["url"], w.get("host_address", ""),
                                         bool((probes.get(w["host"]) or {}).get("local", True)))]


def _router_metrics(plan: Mapping[str, Any], probes: Mapping[str, Any]) -> str | None:
    """The router's metrics URL when the controller reaches it (the default listener, loopback on a remote
    router host, is not: the bake then judges without the router's error rate and says so)."""
    url = plan.get("router_metrics_url")
    host = plan.get("endpoint_host", "")
    address = next((w.get("host_address", "") for w in plan["workers"] if w["host"] == host), "")
    if not url or reach.checked_on_host(url, address, bool((probes.get(host) or {}).get("local", True))):
        return None
    return url


def perf_key(plan: Mapping[str, Any], load: PerfLoad) -> str:
    """What perf figures are measured on: topology, router, every worker (role, host, URL) and the load.

    Figures are compared only between releases with the same key (the same hosts and topology)."""
    workers = ",".join(sorted(f"{w['role']}@{w['host']}={w['url']}" for w in plan["workers"]))
    return f"{plan.get('topology')}|{plan.get('router') or '-'}|{plan['endpoint']}|{workers}|{load.key()}"


def _asked_here(name: str, plan: Mapping[str, Any], on_host: Mapping[str, Any]) -> list[dict[str, str]]:
    """What the controller itself asks for gate `name`: ``{what, url, host}``."""
    endpoint = plan["endpoint"]
    endpoint_host = plan.get("endpoint_host", "")
    asked = [] if name == "config" else [
        {"what": "router" if plan.get("router_url") else "endpoint", "url": endpoint, "host": endpoint_host}]
    if name in WORKER_GATES:
        asked += [{"what": w["name"], "url": w["url"], "host": w["host"]}
                  for w in plan["workers"] if w["name"] not in on_host and w["url"] != endpoint]
    return asked


def _unreachable(asked: list[dict[str, str]], probes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every address the controller cannot reach, with why; asked in parallel, a few seconds at most."""
    # A host the probes did not describe is taken as reachable the ordinary way (local runs, the CLI).
    remote = {host for host, data in probes.items() if not data.get("local", True)}
    out: list[dict[str, Any]] = []
    pending = []
    for item in asked:
        address, _ = reach.url_address(item["url"])
        if item["host"] in remote and reach.is_loopback(address):
            out.append({**item, "checked_from": "controller",
                        "reason": f"{address} is a loopback address of host {item['host']}, and the controller, "
                                  "where this check runs, is another machine; fix: listen on 0.0.0.0 or the "
                                  f"host's own address (with an api_key)"})
        else:
            pending.append(item)
    if pending:
        with ThreadPoolExecutor(len(pending)) as pool:
            for item, why in zip(pending, pool.map(lambda i: reach.controller_reach(i["url"]), pending), strict=True):
                if why:
                    out.append({**item, "checked_from": "controller",
                                "reason": f"unreachable from the controller, where this check runs: {why}"})
    return out


def _died_result(watch: Stopwatch, died: list[dict[str, Any]]) -> GateResult:
    """Readiness failed at once: a program exited or was restarted while the hosts waited for it."""
    # Every program's one line first, then the logs: a cause shortened to its head (the rollout's one line)
    # still names each program and host; with several ranks, the one that died first may be the second.
    heads = [f"{d['name']} on host {d['host']} {_fate(d)}: "
             f"it {d['why']}, {float(d.get('seconds') or 0):.1f} s into the readiness wait" for d in died]
    logs = [f"--- {d['name']} ({d['host']}): {d.get('log_source') or 'log'} ---\n{d['log']}"
            for d in died if d.get("log")]
    lines = ["; ".join(heads), *logs]
    failures = [{"what": f"{d['name']} ({d['host']})", "status": None, "body": d.get("log", ""), "error": d["why"]}
                for d in died]
    return make_result("readiness", GateStatus.FAILED, watch, "\n".join(lines), {"died": died, "failures": failures})


def _with_unstarted(result: GateResult, probes: Mapping[str, Any]) -> GateResult:
    """A failed readiness names the programs the wait was to start once their workers were healthy (the
    router) and did not, because they never were: the router's own "not ready" would hide why."""
    unstarted = [f"{prog} on host {host}" for host, data in probes.items() for prog in data.get("not_started") or []]
    if result.passed or not unstarted:
        return result
    note = f"not started, as its workers never all answered /health: {', '.join(unstarted)}"
    return result.model_copy(update={"summary": f"{result.summary}; {note}",
                                     "evidence": {**result.evidence, "not_started": unstarted}})


def _fate(died: dict[str, Any]) -> str:
    if str(died.get("why", "")).startswith("was stopped"):
        return "is not running"
    return "stopped serving" if died.get("was_healthy") else "did not start"


def _unreachable_result(name: str, watch: Stopwatch, unreachable: list[dict[str, Any]]) -> GateResult:
    lines = [f"{u['what']} at {u['url']} on host {u['host']}: {u['reason']}" for u in unreachable]
    failures = [{"what": u["what"], "status": None, "body": "", "error": u["reason"]} for u in unreachable]
    evidence = {"unreachable": unreachable, "failures": failures}
    return make_result(name, GateStatus.FAILED, watch, "cannot reach " + "; ".join(lines), evidence)
