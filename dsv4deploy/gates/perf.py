"""Performance gate: several rounds of a fixed short streaming load through the client-facing endpoint.

From the client, per round: time to first token (p50, p99), inter-token latency (p50 of each request's
mean gap between its first and last token) and output tokens per second over the round. From the
servers: the change of their ``/metrics`` histograms (``sglang:time_to_first_token_seconds``,
``sglang:inter_token_latency_seconds``, ``sglang:e2e_request_latency_seconds``) across each round, read
with prometheus_client's parser (:mod:`dsv4deploy.gates.prom`).

The rounds are judged against the last good release's stored rounds (:mod:`dsv4deploy.gates.perf_compare`:
a one-sided Mann-Whitney U test and a tolerance band, as Kayenta does) when they were measured on the
same hosts, topology and load. Otherwise, or when no figure could be judged, the gate is skipped:
recorded, not judged, and the summary says why (not judged is never a pass). A request that fails
fails the gate: figures of a broken load mean nothing.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from dsv4deploy.gates import prom
from dsv4deploy.gates.chat import CHAT_PATH
from dsv4deploy.gates.http import check_url, describe_error, make_client
from dsv4deploy.gates.perf_compare import baseline_problem, judge
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify

GATE = "perf"
# Figure -> what of the servers' histogram delta (prom.summarize).
SERVER_FIGURES = {
    "ttft_p50_s": "sglang:time_to_first_token_seconds@p50",
    "itl_p50_s": "sglang:inter_token_latency_seconds@p50",
    "e2e_p50_s": "sglang:e2e_request_latency_seconds@p50",
    "requests": "sglang:num_requests_total",
}
FILLER = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "omicron"]


@dataclass(frozen=True)
class PerfLoad:
    """The fixed load: how many streamed requests, how many at once, their prompt and output sizes."""

    requests: int = 16
    concurrency: int = 4
    prompt_tokens: int = 128
    output_tokens: int = 32

    def key(self) -> str:
        """What the load was, for the baseline's key."""
        return f"{self.requests}x{self.concurrency}c/{self.prompt_tokens}in/{self.output_tokens}out"


@dataclass
class Timing:
    """One streamed request as the client saw it."""

    ok: bool = False
    status: int | None = None
    error: str = ""
    body: str = ""
    ttft_s: float | None = None
    e2e_s: float = 0.0
    tokens: int = 0
    token_times: list[float] = field(default_factory=list)

    @property
    def itl_s(self) -> float | None:
        """Mean gap between this request's tokens after the first."""
        if self.tokens < 2 or len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (self.tokens - 1)


def perf_prompt(prompt_tokens: int, output_tokens: int) -> str:
    """A prompt of about `prompt_tokens` words whose answer is `output_tokens` words (a "Say ..." echo)."""
    context = " ".join(FILLER[i % len(FILLER)] for i in range(max(0, prompt_tokens - output_tokens - 8)))
    words = " ".join(FILLER[(i * 7) % len(FILLER)] for i in range(output_tokens))
    return f"Background: {context}.\nSay {words}"


def stream_once(client: httpx.Client, url: str, model: str, load: PerfLoad, timeout_s: float) -> Timing:
    """One streamed chat completion; never raises for the server."""
    body = {"model": model, "messages": [{"role": "user", "content": perf_prompt(load.prompt_tokens,
                                                                                load.output_tokens)}],
            "max_tokens": load.output_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True},
            # sglang's own switch: exactly max_tokens out, so every release decodes the same work.
            "ignore_eos": True}
    t = Timing()
    start = time.monotonic()
    usage_tokens: int | None = None
    pieces = 0
    try:
        with client.stream("POST", url + CHAT_PATH, json=body, timeout=timeout_s) as resp:
            t.status = resp.status_code
            if resp.status_code != 200:
                t.body = clip(resp.read().decode(errors="replace"))
                t.error = f"HTTP {resp.status_code}"
                return t
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("error"):
                    t.error, t.body = "error event in the stream", clip(data)
                    return t
                if event.get("usage"):
                    usage_tokens = event["usage"].get("completion_tokens")
                for choice in event.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
                    if text:
                        now = time.monotonic()
                        if t.ttft_s is None:
                            t.ttft_s = now - start
                        t.token_times.append(now)
                        pieces += 1
    except (httpx.HTTPError, OSError) as exc:
        t.error = describe_error(exc)
        return t
    except ValueError as exc:  # a data line that is not JSON
        t.error = f"bad stream event: {exc}"
        return t
    t.e2e_s = time.monotonic() - start
    t.tokens = int(usage_tokens) if usage_tokens is not None else pieces
    t.ok = t.ttft_s is not None
    if not t.ok:
        t.error = "the stream carried no token"
    return t


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank q-quantile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


def client_figures(timings: Sequence[Timing], wall_s: float) -> dict[str, float | None]:
    """TTFT p50/p99, ITL p50 and output tokens per second of a load, as the client saw it."""
    ttfts = [t.ttft_s for t in timings if t.ttft_s is not None]
    itls = [t.itl_s for t in timings if t.itl_s is not None]
    tokens = sum(t.tokens for t in timings)
    return {"ttft_p50_s": quantile(ttfts, 0.5), "ttft_p99_s": quantile(ttfts, 0.99),
            "itl_p50_s": quantile(itls, 0.5),
            "output_tokens_per_s": tokens / wall_s if wall_s > 0 else None}


def scrape(client: httpx.Client, url: str) -> tuple[prom.Scrape | None, str]:
    """A server's metrics, or None and why not."""
    try:
        resp = client.get(url + "/metrics", timeout=10)
    except httpx.HTTPError as exc:
        return None, describe_error(exc)
    if resp.status_code != 200:
        return None, f"/metrics answered HTTP {resp.status_code} (is --enable-metrics on?)"
    try:
        return prom.parse(resp.text), ""
    except prom.MetricsFormatError as exc:
        return None, str(exc)


def _fmt(figures: Mapping[str, Any]) -> str:
    def ms(name: str) -> str:
        value = figures.get(name)
        return f"{value * 1000:.1f} ms" if value is not None else "n/a"
    rate = figures.get("output_tokens_per_s")
    tokens = f"{rate:.1f}" if rate is not None else "n/a"
    return f"TTFT p50 {ms('ttft_p50_s')}, p99 {ms('ttft_p99_s')}, ITL p50 {ms('itl_p50_s')}, {tokens} output tok/s"


def run_perf(endpoint: str, model: str, *, workers: Sequence[Mapping[str, str]], key: str, load: PerfLoad,
             tolerance: float, noise_floor_s: float, baseline: Mapping[str, Any] | None, deadline_s: float,
             api_key: str | None = None, progress: Progress | None = None,
             ttft_tolerance: float | None = None, rounds: int = 5, alpha: float = 0.02) -> GateResult:
    """Run `rounds` rounds of the load through `endpoint`, measure each from the client and the `workers'`
    metrics, and judge the rounds against the baseline's (:func:`perf_compare.judge`).

    `key` names what the figures are measured on (hosts, topology, router, load); `baseline` is the
    last good release's record (``evidence.figures`` of its perf gate), or None. `tolerance` is the
    band a median may be worse by (`ttft_tolerance` for the time-to-first-token figures), `alpha` the rank
    test's level.
    """
    endpoint = check_url(endpoint, "endpoint")
    watch = Stopwatch()
    per_round: list[dict[str, Any]] = []
    unavailable: dict[str, str] = {}
    with make_client(api_key, timeout_s=deadline_s) as client:
        warm = stream_once(client, endpoint, model, load, deadline_s)  # opens the path; not counted
        if not warm.ok:
            return _broken(watch, [warm], key)
        scrapes = {w["name"]: scrape(client, w["url"]) for w in workers}
        for done in range(rounds):
            notify(progress, done, rounds, f"round {done + 1} of {rounds}: {load.requests} streamed requests, "
                                           f"{load.concurrency} at once")
            started = time.monotonic()
            with ThreadPoolExecutor(load.concurrency) as pool:
                timings = list(pool.map(lambda _: stream_once(client, endpoint, model, load, deadline_s),
                                        range(load.requests)))
            wall = time.monotonic() - started
            if not all(t.ok for t in timings):
                return _broken(watch, timings, key)
            after = {w["name"]: scrape(client, w["url"]) for w in workers}
            servers: dict[str, dict[str, float | None]] = {}
            for w in workers:
                (old, why_old), (new, why_new) = scrapes[w["name"]], after[w["name"]]
                if old is None or new is None:
                    unavailable[w["name"]] = why_old or why_new
                    continue
                servers[w["name"]] = prom.summarize(prom.delta(old, new), SERVER_FIGURES)
            scrapes = after
            per_round.append({"client": client_figures(timings, wall), "servers": servers, "wall_s": wall})
    # A server that could not be read in one round has no samples: it is not judged, and said so.
    for name in unavailable:
        for r in per_round:
            r["servers"].pop(name, None)
    figures = record(key, load, per_round)
    evidence: dict[str, Any] = {"figures": figures, "tolerance": tolerance, "ttft_tolerance": ttft_tolerance,
                                "alpha": alpha, "rounds": rounds, "noise_floor_s": noise_floor_s,
                                "baseline": dict(baseline) if baseline else None,
                                "servers_unavailable": unavailable}
    why_not = baseline_problem(key, baseline)
    measured = _fmt(figures["client"]) + f" (medians of {rounds} round(s))"
    if why_not:
        # Not judged is never a pass: skipped, recorded for the next release to be judged against.
        evidence.update(judged=False, not_judged_because=why_not, regressions=[], not_judged=[])
        return make_result(GATE, GateStatus.SKIPPED, watch, f"recorded, not judged ({why_not}): {measured}",
                           evidence)
    assert baseline is not None
    judgements, skipped = judge(figures, baseline, alpha=alpha, band=tolerance, noise_floor_s=noise_floor_s,
                                ttft_band=ttft_tolerance)
    regressions = [j for j in judgements if j.regressed]
    evidence.update(judged=bool(judgements), regressions=[j.record() for j in regressions],
                    judgements=[j.record() for j in judgements], not_judged=skipped)
    against = f"release {baseline.get('release') or '?'}"
    not_judged = f"; not judged: {', '.join(skipped)}" if skipped else ""
    rule = (f"one-sided Mann-Whitney U at alpha {alpha:g} and a median worse by at least {tolerance:.0%}"
            + (f" ({ttft_tolerance:.0%} for a TTFT)" if ttft_tolerance is not None else ""))
    if not judgements:
        evidence["not_judged_because"] = f"no figure could be judged against {against}"
        return make_result(GATE, GateStatus.SKIPPED, watch,
                           f"recorded, not judged (no figure could be judged against {against}): {measured}"
                           f"{not_judged}", evidence)
    if regressions:
        lines = "; ".join(j.line() for j in regressions)
        return make_result(GATE, GateStatus.FAILED, watch,
                           f"slower than {against} ({rule}): {lines}; now {measured}{not_judged}", evidence)
    return make_result(GATE, GateStatus.PASSED, watch,
                       f"{len(judgements)} figure(s) judged, none slower than {against} ({rule}; "
                       f"{_fmt(baseline.get('client') or {})}): {measured}{not_judged}", evidence)


def record(key: str, load: PerfLoad, per_round: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The release's perf record: per-round samples of every figure (what the next release is judged
    against) and their medians as the point figures the report shows."""
    client: dict[str, list[float]] = {}
    servers: dict[str, dict[str, list[float]]] = {}
    for r in per_round:
        for figure, value in r["client"].items():
            if value is not None:
                client.setdefault(figure, []).append(round(float(value), 6))
        for name, figs in r["servers"].items():
            for figure, value in figs.items():
                if value is not None:
                    servers.setdefault(name, {}).setdefault(figure, []).append(round(float(value), 6))
    def medians(figs: Mapping[str, list[float]]) -> dict[str, float]:
        return {f: statistics.median(v) for f, v in figs.items()}
    names = {name for r in per_round for name in r["servers"]}
    return {"key": key, "load": load.__dict__, "rounds": len(per_round), "client": medians(client),
            "servers": {name: medians(servers.get(name, {})) for name in sorted(names)},
            "samples": {"client": client, "servers": servers},
            "wall_s": round(sum(r["wall_s"] for r in per_round), 3)}


def _broken(watch: Stopwatch, timings: Sequence[Timing], key: str) -> GateResult:
    bad = [t for t in timings if not t.ok]
    failures = [{"what": f"perf request {i}", "status": t.status, "body": t.body, "error": t.error}
                for i, t in enumerate(bad)]
    first = bad[0]
    return make_result(GATE, GateStatus.FAILED, watch,
                       f"{len(bad)} of {len(timings)} load requests failed, so nothing was measured: "
                       f"{first.error}{' ' + first.body[:200] if first.body else ''}",
                       {"failures": failures, "key": key})
