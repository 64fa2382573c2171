"""The bake: watch a promoted release for a while, interval by interval, Argo Rollouts' way.

Every interval runs the same analyses, each ``successful``, ``failed`` or ``inconclusive`` (Argo's
measurement phases):

- the router's error rate (sglang-router 0.3.x and smg: ``smg_http_responses_total`` with a 5xx
  ``status_code`` over all of them, as the real 0.3.2 serves them; sglang-router 0.2.x:
  ``sgl_router_request_errors_total`` and its PD error counters over ``sgl_router_requests_total``),
- the servers' abort rate (``sglang:num_aborted_requests_total`` over ``sglang:num_requests_total``),
- in PD, KV transfer failures (``sglang:num_transfer_failed_reqs_total`` and
  ``sglang:num_bootstrap_failed_reqs_total``),
- a canary needle (one cell of the needle gate) and a tool-call probe (a few one-turn soak sessions).

The counters are read as their change over the interval (the traffic of the interval: users' and the
probes'). A rate over fewer than ``min_requests`` requests is inconclusive, never a pass; a rate above its
limit fails only when an exact binomial test says so (p < 0.05 against the limit), else it is
inconclusive: one 5xx among a few probe requests is no evidence. Metrics that cannot be read are an
``error`` (could not measure), kept apart from ``inconclusive`` as Argo Rollouts keeps its
``consecutiveErrorLimit`` apart from its ``inconclusiveLimit``.

The bake fails once more intervals failed than ``failure_limit`` (Argo's ``failureLimit``), and at a
failed interval when no more intervals remain than the failure limit (a bake of one interval can fail);
it ends ``error`` after ``error_limit`` error intervals in a row, ``inconclusive`` after
``inconclusive_limit`` inconclusive intervals in a row or when its time is up with no interval
successful, and passes otherwise. An error refuses the release like a failure; an inconclusive bake
leaves it serving, reported as not baked.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from dsv4deploy.gates import prom
from dsv4deploy.gates.evidence import rate_above_p_value
from dsv4deploy.gates.http import describe_error, make_client
from dsv4deploy.gates.needle import run_needle
from dsv4deploy.gates.parity import PROMPT_COUNT
from dsv4deploy.gates.probe_rule import ProbeRule
from dsv4deploy.gates.recall_rule import RecallRule
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, make_result, notify
from dsv4deploy.gates.soak import SoakDesign, run_soak

GATE = "bake"
SERVER_REQUESTS = "sglang:num_requests_total"
SERVER_ABORTS = "sglang:num_aborted_requests_total"
TRANSFER_FAILURES = ("sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total")
ROUTER_REQUESTS = "sgl_router_requests_total"
ROUTER_ERRORS = "sgl_router_request_errors_total"
ROUTER_PD_ERRORS = ("sgl_router_pd_prefill_errors_total", "sgl_router_pd_decode_errors_total")
SMG_RESPONSES = "smg_http_responses_total"

#: The canary needle: one trial an interval (a probe; the interval count is the bake's evidence).
CANARY_RULE = RecallRule(trials=1, min_recalled=1)


class Phase(StrEnum):
    """An analysis' or an interval's outcome (Argo Rollouts' measurement phases)."""

    SUCCESSFUL = "successful"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"  # could not measure (metrics unreadable): kept apart from inconclusive, as Argo does


class BakeSettings(BaseModel):
    """How long to bake, how often to analyse and what fails an interval (the ``dsv4_bake_*`` variables)."""

    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(0, ge=0)
    interval_s: float = Field(60, gt=0)
    failure_limit: int = Field(1, ge=0)
    inconclusive_limit: int = Field(3, ge=1)
    error_limit: int = Field(2, ge=1)
    max_error_rate: float = Field(0.01, ge=0, le=1)
    max_abort_rate: float = Field(0.01, ge=0, le=1)
    max_transfer_failures: int = Field(0, ge=0)
    # Fewer requests than this in an interval: its rates are inconclusive (the probes send about 33).
    min_requests: int = Field(20, ge=1)
    canary_tokens: int = Field(1000, ge=100)
    # One-turn sessions at once: the soak's concurrency, where the seeds' corruption lives.
    probe_sessions: int = Field(16, ge=1)
    probe_deadline_s: float = Field(120, gt=0)
    # Quality canaries per interval (dsv4deploy.gates.canary), opt-in: accuracy questions and parity prompts.
    canary_questions: int = Field(0, ge=0, le=64)
    canary_prompts: int = Field(0, ge=0, le=PROMPT_COUNT)

    def intervals(self) -> int:
        """How many intervals the bake runs (at least one when it runs at all)."""
        return max(1, math.ceil(self.seconds / self.interval_s))


@dataclass
class Analysis:
    """One analysis of one interval."""

    name: str
    phase: Phase
    detail: str
    value: float | None = None


@dataclass
class Interval:
    """One interval: its analyses and their verdict."""

    index: int
    phase: Phase
    seconds: float
    analyses: list[Analysis] = field(default_factory=list)

    def failures(self) -> list[Analysis]:
        """The analyses that failed, else those that were inconclusive."""
        bad = [a for a in self.analyses if a.phase is Phase.FAILED]
        return bad or [a for a in self.analyses if a.phase is Phase.INCONCLUSIVE]


def interval_phase(analyses: Sequence[Analysis]) -> Phase:
    """Failed when any analysis failed; else error when any could not measure; else inconclusive when any
    was; else successful."""
    phases = {a.phase for a in analyses}
    for worst in (Phase.FAILED, Phase.ERROR, Phase.INCONCLUSIVE):
        if worst in phases:
            return worst
    return Phase.SUCCESSFUL


#: The significance at which an interval's rate is judged above its limit.
RATE_SIGNIFICANCE = 0.05


def rate(name: str, bad: float | None, total: float | None, limit: float, what: str,
         min_requests: int = 1) -> Analysis:
    """A rate analysis: failed when significantly above `limit` (exact binomial test, p < 0.05), inconclusive
    when above it without significance or over fewer than `min_requests` requests, error when unread."""
    if bad is None or total is None:
        return Analysis(name, Phase.ERROR, f"no {what} metrics could be read")
    if total <= 0:
        return Analysis(name, Phase.INCONCLUSIVE, f"no request counted in the interval ({what})")
    value = bad / total
    text = f"{bad:g} of {total:g} ({value:.1%}, limit {limit:.1%}) [{what}]"
    if total < min_requests:
        why = f"{text}: fewer than {min_requests} requests (dsv4_bake_min_requests)"
        return Analysis(name, Phase.INCONCLUSIVE, why, round(value, 4))
    if value <= limit:
        return Analysis(name, Phase.SUCCESSFUL, text, round(value, 4))
    p = rate_above_p_value(round(bad), round(total), limit) if limit > 0 else 0.0
    if p < RATE_SIGNIFICANCE:
        return Analysis(name, Phase.FAILED, f"{text}, p={p:.2g}", round(value, 4))
    return Analysis(name, Phase.INCONCLUSIVE, f"{text}, above the limit but not significantly (p={p:.2g})",
                    round(value, 4))


def router_counts(text: str) -> tuple[float, float]:
    """(requests, errors) counted by the router's metrics so far.

    sglang-router 0.3.x and smg count every answer in ``smg_http_responses_total{status_code}`` (an
    error: a 5xx); sglang-router 0.2.x has ``sgl_router_requests_total`` and its error counters.
    """
    by_status = prom.by_label(text, SMG_RESPONSES, "status_code")
    if by_status:
        return sum(by_status.values()), sum(v for k, v in by_status.items() if k.startswith("5"))
    values = prom.parse(text).values
    # A PD failure may be counted by the general error counter, the PD ones, or both: take the larger.
    errors = max(values.get(ROUTER_ERRORS, 0.0), sum(values.get(n, 0.0) for n in ROUTER_PD_ERRORS))
    return values.get(ROUTER_REQUESTS, 0.0), errors


@dataclass
class Counters:
    """What one reading of every metrics endpoint counted so far (None: that source could not be read)."""

    router: tuple[float, float] | None = None
    servers: dict[str, float] | None = None
    unread: list[str] = field(default_factory=list)

    def minus(self, earlier: Counters) -> Counters:
        """The change since `earlier` (a source missing on either side is missing)."""
        router = None
        if self.router is not None and earlier.router is not None:
            router = (self.router[0] - earlier.router[0], self.router[1] - earlier.router[1])
        servers = None
        if self.servers is not None and earlier.servers is not None:
            servers = {k: v - earlier.servers.get(k, 0.0) for k, v in self.servers.items()}
        return Counters(router, servers, sorted({*self.unread, *earlier.unread}))


def _get(client: httpx.Client, url: str) -> tuple[str | None, str]:
    try:
        resp = client.get(url, timeout=10)
    except httpx.HTTPError as exc:
        return None, describe_error(exc)
    if resp.status_code != 200:
        return None, f"HTTP {resp.status_code}"
    return resp.text, ""


def read_counters(client: httpx.Client, workers: Sequence[Mapping[str, str]],
                  router_metrics_url: str | None) -> Counters:
    """Read the router's and every worker's counters now."""
    out = Counters()
    if router_metrics_url:
        text, why = _get(client, router_metrics_url.rstrip("/") + "/metrics")
        try:
            out.router = router_counts(text) if text is not None else None
        except prom.MetricsFormatError as exc:
            why = str(exc)
        if out.router is None:
            out.unread.append(f"router metrics at {router_metrics_url}: {why}")
    totals: dict[str, float] = {}
    read = 0
    for w in workers:
        text, why = _get(client, w["url"] + "/metrics")
        try:
            values = prom.parse(text).values if text is not None else None
        except prom.MetricsFormatError as exc:
            values, why = None, str(exc)
        if values is None:
            out.unread.append(f"{w['name']} metrics: {why}")
            continue
        read += 1
        for name in (SERVER_REQUESTS, SERVER_ABORTS, *TRANSFER_FAILURES):
            totals[name] = totals.get(name, 0.0) + values.get(name, 0.0)
    out.servers = totals if read else None
    return out


def metric_analyses(change: Counters, settings: BakeSettings, pd: bool, has_router: bool,
                    has_servers: bool = True) -> list[Analysis]:
    """The interval's metric analyses from its counters' change (a source not read by design, no router or
    no worker the controller reaches, gives no analysis: it is not inconclusive for lack of it)."""
    out: list[Analysis] = []
    if has_router:
        requests, errors = change.router if change.router else (None, None)
        out.append(rate("error rate", errors, requests, settings.max_error_rate, "router", settings.min_requests))
    if not has_servers:
        return out
    servers = change.servers
    # A counter a server does not serve counts nothing (read_counters fills each one it read).
    out.append(rate("abort rate", servers.get(SERVER_ABORTS, 0.0) if servers is not None else None,
                    servers.get(SERVER_REQUESTS, 0.0) if servers is not None else None, settings.max_abort_rate,
                    "servers", settings.min_requests))
    if pd:
        if servers is None:
            out.append(Analysis("transfer failures", Phase.ERROR, "no server metrics could be read"))
        else:
            count = sum(servers.get(n, 0.0) for n in TRANSFER_FAILURES)
            phase = Phase.FAILED if count > settings.max_transfer_failures else Phase.SUCCESSFUL
            out.append(Analysis("transfer failures", phase,
                                f"{count:g} failed KV transfers or bootstraps (limit {settings.max_transfer_failures})",
                                count))
    return out


def run_probes(endpoint: str, model: str, *, canary_tokens: int, probe_sessions: int, deadline_s: float,
               seed: int, api_key: str | None, counted_only: bool = False) -> tuple[GateResult, GateResult]:
    """The light probes, through the client-facing endpoint: a canary needle (one cell) and a tool-call
    probe (one-turn soak sessions). Shared by the bake and the continuous verification timer. The tool-call
    probe fails on one corrupted session; ``counted_only``: it fails only when a session could not finish,
    and its counts are judged by the caller (the bake's :class:`ProbeRule`)."""
    # The canary is a probe of one request an interval, judged across intervals by the bake's own rule: one
    # trial, and a retried request is the bake's transfer-failure count's to judge, not a share of one.
    needle = run_needle(endpoint, model, context_lengths=[canary_tokens], depths=[0.5],
                        required_tokens=canary_tokens, deadline_s=deadline_s, concurrency=1, seed=seed,
                        api_key=api_key, rule=CANARY_RULE, max_retry_share=1.0)
    design = SoakDesign(max_mistake_rate=1.0) if counted_only else None
    tools = run_soak(endpoint, model, sessions=probe_sessions, turns=1, concurrency=probe_sessions,
                     max_corruption_rate=1.0 if counted_only else 0.0, design=design, sequential=False,
                     deadline_s=deadline_s, seed=seed, api_key=api_key)
    return needle, tools


def probe_rule(settings: BakeSettings) -> ProbeRule:
    """The counts that fail an interval's tool-call probe, for this bake's length and failure limit."""
    return ProbeRule(settings.probe_sessions, settings.intervals(), settings.failure_limit)


def tool_probe_analysis(tools: GateResult, rule: ProbeRule) -> Analysis:
    """The tool-call probe judged by ``rule``: failed when a session could not finish or a count reached the
    rule's, else successful; the detail names the counts and the rule's risk."""
    if not tools.passed:
        return Analysis("tool-call probe", Phase.FAILED, tools.summary)
    corrupted, mistaken = int(tools.evidence["corrupted_sessions"]), int(tools.evidence["mistaken_sessions"])
    phase = Phase.FAILED if rule.interval_fails(corrupted, mistaken) else Phase.SUCCESSFUL
    n = tools.evidence["finished"]
    return Analysis("tool-call probe", phase,
                    f"{corrupted} corrupted and {mistaken} mistaken of {n} sessions; {rule.describe()}",
                    round(corrupted / n, 4) if n else None)


def probe_analyses(endpoint: str, model: str, settings: BakeSettings, index: int,
                   api_key: str | None) -> list[Analysis]:
    """The probes of one interval as analyses (a probe that fails is a failed analysis)."""
    needle, tools = run_probes(endpoint, model, canary_tokens=settings.canary_tokens,
                               probe_sessions=settings.probe_sessions, deadline_s=settings.probe_deadline_s,
                               seed=index, api_key=api_key, counted_only=True)
    return [Analysis("canary needle", Phase.SUCCESSFUL if needle.passed else Phase.FAILED, needle.summary),
            tool_probe_analysis(tools, probe_rule(settings))]


def run_bake(endpoint: str, model: str, *, workers: Sequence[Mapping[str, str]], settings: BakeSettings,
             topology: str, router_metrics_url: str | None = None,
             api_key: str | None = None, progress: Progress | None = None,
             sleep: Callable[[float], None] = time.sleep,
             canaries: Callable[[int], list[Analysis]] | None = None, notes: Sequence[str] = ()) -> GateResult:
    """Bake the release serving at `endpoint` for ``settings.seconds`` and judge it (gate ``bake``).

    `workers` are the servers whose ``/metrics`` the controller reads (``{name, url}``);
    `router_metrics_url` is the router's Prometheus listener (None: no router, or not reachable here).
    `canaries` gives interval i's quality canaries as more analyses (:mod:`dsv4deploy.gates.canary`); `notes`
    (why a canary asked for does not run) go into the evidence.
    """
    watch = Stopwatch()
    total = settings.intervals()
    intervals: list[Interval] = []
    failed = inconclusive_run = error_run = 0
    verdict = Phase.SUCCESSFUL
    with make_client(api_key, timeout_s=30) as client:
        for index in range(total):
            started = time.monotonic()
            before = read_counters(client, workers, router_metrics_url)
            analyses = probe_analyses(endpoint, model, settings, index, api_key)
            if canaries is not None:
                analyses += canaries(index)
            sleep(max(0.0, settings.interval_s - (time.monotonic() - started)))
            change = read_counters(client, workers, router_metrics_url).minus(before)
            analyses = metric_analyses(change, settings, topology == "pd", bool(router_metrics_url),
                                       bool(workers)) + analyses
            interval = Interval(index + 1, interval_phase(analyses), round(time.monotonic() - started, 2), analyses)
            intervals.append(interval)
            notify(progress, index + 1, total, f"interval {index + 1}: {interval.phase}"
                   + "".join(f"; {a.name}: {a.detail}" for a in interval.failures()))
            failed += interval.phase is Phase.FAILED
            inconclusive_run = inconclusive_run + 1 if interval.phase is Phase.INCONCLUSIVE else 0
            error_run = error_run + 1 if interval.phase is Phase.ERROR else 0
            remaining = total - (index + 1)
            if failed > settings.failure_limit or (interval.phase is Phase.FAILED
                                                   and remaining <= settings.failure_limit):
                verdict = Phase.FAILED
                break
            if error_run >= settings.error_limit:
                verdict = Phase.ERROR
                break
            if inconclusive_run >= settings.inconclusive_limit:
                verdict = Phase.INCONCLUSIVE
                break
        else:
            if not any(i.phase is Phase.SUCCESSFUL for i in intervals):
                verdict = Phase.INCONCLUSIVE  # its time is up and no interval could be judged a success
    # Said in the evidence: without the router's metrics there is no error-rate analysis.
    return _result(watch, settings, intervals, verdict, total,
                   router_metrics_url or "not read (no router, or not reachable from here)",
                   [w["name"] for w in workers], list(notes))


def _result(watch: Stopwatch, settings: BakeSettings, intervals: list[Interval], verdict: Phase,
            total: int, router_metrics: str, server_metrics: list[str], notes: list[str]) -> GateResult:
    evidence: dict[str, Any] = {"verdict": str(verdict), "settings": settings.model_dump(),
                                "tool_probe_rule": probe_rule(settings).evidence(),
                                "router_metrics": router_metrics,
                                # The servers whose /metrics were read (none: no abort or transfer analysis).
                                "server_metrics": server_metrics,
                                "intervals": [asdict(i) for i in intervals]}
    if notes:
        evidence["canary_notes"] = notes
    counts = {p: sum(i.phase is p for i in intervals) for p in Phase}
    tally = (f"{counts[Phase.SUCCESSFUL]} successful, {counts[Phase.FAILED]} failed, "
             f"{counts[Phase.INCONCLUSIVE]} inconclusive, {counts[Phase.ERROR]} error of {len(intervals)} interval(s) "
             f"of {settings.interval_s:g} s")
    last_bad = next((i for i in reversed(intervals) if i.phase is not Phase.SUCCESSFUL), None)
    why = ""
    if last_bad is not None:
        why = f"; interval {last_bad.index}: " + "; ".join(f"{a.name}: {a.detail}" for a in last_bad.failures())
    if verdict is Phase.FAILED:
        failures = [{"what": f"bake interval {i.index}: {a.name}", "status": None, "body": a.detail,
                     "error": str(a.phase)}
                    for i in intervals for a in i.analyses if a.phase is Phase.FAILED]
        evidence["failures"] = failures
        failed = counts[Phase.FAILED]
        rule = (f"more than the failure limit ({settings.failure_limit}) failed" if failed > settings.failure_limit
                else f"a failed interval with no more intervals left than the failure limit ({settings.failure_limit})")
        return make_result(GATE, GateStatus.FAILED, watch,
                           f"failed after {len(intervals)} of {total} interval(s): {rule} ({tally}){why}", evidence)
    if verdict is Phase.ERROR:
        return make_result(GATE, GateStatus.ERROR, watch,
                           f"error: {settings.error_limit} interval(s) in a row could not be measured (metrics "
                           f"unreadable, dsv4_bake_error_limit); not a pass ({tally}){why}", evidence)
    if verdict is Phase.INCONCLUSIVE:
        run = next((n for n in range(len(intervals), 0, -1)
                    if all(i.phase is Phase.INCONCLUSIVE for i in intervals[-n:])), 0)
        cause = (f"{settings.inconclusive_limit} interval(s) in a row could not be judged"
                 if run >= settings.inconclusive_limit else "its time was up with no interval successful")
        return make_result(GATE, GateStatus.INCONCLUSIVE, watch,
                           f"inconclusive: {cause}; the release stays, not baked ({tally}){why}", evidence)
    return make_result(GATE, GateStatus.PASSED, watch, f"baked {settings.seconds:g} s: {tally}{why}", evidence)
