"""Judge a release's performance samples against the last good release's (Kayenta's way).

Each figure (TTFT p50/p99, inter-token p50, output tokens/s from the client; the servers' histogram
p50s) is measured once per round of the fixed load, so a release has one sample per round and figure.
A figure regresses only when both hold:

- **significant**: a one-sided Mann-Whitney U test (scipy, through
  :func:`dsv4deploy.gates.evidence.mann_whitney_greater`) says the release's rounds are worse than the
  baseline's (latencies larger, throughput smaller) with p < ``alpha``; and
- **outside the band**: the median of its rounds is worse than the baseline's median by at least the
  tolerance band (``1 + band`` times; a throughput ``1 / (1 + band)``), and for a latency by more than a
  noise floor in seconds.

A loaded machine moves every figure a little, often significantly over enough samples; the band keeps
such shifts from refusing a release. A one-off slow round moves a rank test by one rank only.

Why per-round figures and not per-request samples: the requests of one round share their batches and
the machine's momentary load, so they are not independent, and a rank test over them would take one
slow round for sixteen pieces of evidence (its p-value would be far too small). Rounds are the
independent unit, and the throughput and the servers' histograms exist per round only.

A figure that cannot be judged is listed as not judged, with why: missing on a side, too few rounds
on a side for the test to reach ``alpha`` at all (a release recorded before the rounds, whose record
has one point per figure, is such a side), or a count (requests, tokens: they describe the load, they
are not latencies). Figures of different hosts or topology are never compared: the key says what the
figures were measured on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dsv4deploy.gates.evidence import mann_whitney_greater

HIGHER_IS_BETTER_SUFFIX = "_per_s"
#: Figures that count what the load did (the servers' request counter): recorded, never judged.
COUNT_FIGURES = frozenset({"requests", "output_tokens"})

Samples = dict[str, dict[str, list[float]]]  # where ("client" or a server's name) -> figure -> per-round values


@dataclass(frozen=True)
class Judgement:
    """One figure judged: its medians, how many times worse, the test's p-value, and the verdict."""

    where: str  # "client" or a server's name
    figure: str
    baseline: float  # median of the baseline's rounds
    current: float  # median of this release's rounds
    factor: float  # how many times worse the median is (<= 1: not worse)
    p_value: float  # one-sided Mann-Whitney U: this release is worse
    rounds: tuple[int, int]  # (this release's, the baseline's)
    regressed: bool

    def line(self) -> str:
        """``client itl_p50_s 0.0300 vs 0.0100 (3.0x worse, p=0.004)``."""
        return (f"{self.where} {self.figure} {self.current:.4g} vs {self.baseline:.4g} "
                f"({self.factor:.2f}x worse, p={self.p_value:.2g})")

    def record(self) -> dict[str, Any]:
        """JSON-able, for the gate's evidence."""
        out = asdict(self)
        out["rounds"] = list(self.rounds)
        out["p_value"] = float(f"{self.p_value:.3g}")
        return out


def is_latency(figure: str) -> bool:
    """True for a time (lower is better); False for a throughput."""
    return not figure.endswith(HIGHER_IS_BETTER_SUFFIX)


def worse_factor(figure: str, baseline: float, current: float) -> float:
    """How many times worse `current` is than `baseline` (1.0 or less: not worse)."""
    if not is_latency(figure):
        return baseline / current if current > 0 else float("inf")
    return current / baseline if baseline > 0 else (float("inf") if current > 0 else 1.0)


def smallest_p(n: int, m: int) -> float:
    """The smallest one-sided Mann-Whitney p-value `n` against `m` samples can give (every one of one
    side above every one of the other): ``1 / C(n + m, n)``."""
    return 1.0 / math.comb(n + m, n) if n and m else 1.0


def samples(record: Mapping[str, Any]) -> Samples:
    """A perf record's per-round samples; a record from before the rounds (one point per figure, no
    ``samples``) gives one-sample lists, which :func:`judge` lists as too few to judge."""
    if record.get("samples"):
        stored = record["samples"]
        out: Samples = {"client": _clean(stored.get("client") or {})}
        out.update({name: _clean(figs or {}) for name, figs in (stored.get("servers") or {}).items()})
        return out
    out = {"client": {f: [float(v)] for f, v in (record.get("client") or {}).items() if v is not None}}
    out.update({name: {f: [float(v)] for f, v in (figs or {}).items() if v is not None}
                for name, figs in (record.get("servers") or {}).items()})
    return out


def _clean(figs: Mapping[str, Any]) -> dict[str, list[float]]:
    return {f: [float(v) for v in values if v is not None] for f, values in figs.items()
            if [v for v in values or [] if v is not None]}


def judge(current: Mapping[str, Any], baseline: Mapping[str, Any], *, alpha: float, band: float,
          noise_floor_s: float, ttft_band: float | None = None) -> tuple[list[Judgement], list[str]]:
    """Every figure of `current` judged against `baseline` (perf records), and what was not judged, with
    why (``decode ttft_p50_s (no figure now)``). A time-to-first-token figure is judged with `ttft_band`
    (default: `band`): it is mostly queueing, which a busy machine moves most (its p99 is the slowest
    request or two of a round)."""
    now_all, before_all = samples(current), samples(baseline)
    judged: list[Judgement] = []
    skipped: list[str] = [f"{name} (no server figures now)" for name in sorted(set(before_all) - set(now_all))]
    skipped += [f"{name} (no server figures before)" for name in sorted(set(now_all) - set(before_all))]
    for where in ["client", *sorted(set(now_all) & set(before_all) - {"client"})]:
        now, before = now_all.get(where, {}), before_all.get(where, {})
        for figure in sorted(set(now) | set(before)):
            what = f"{where} {figure}"
            if figure in COUNT_FIGURES:
                continue  # a count describes the load (listed in the figures), it is no latency to judge
            if figure not in now or figure not in before:
                skipped.append(f"{what} (no figure {'now' if figure not in now else 'before'})")
                continue
            n, m = len(now[figure]), len(before[figure])
            if smallest_p(n, m) >= alpha:
                skipped.append(f"{what} (too few rounds for a rank test at alpha {alpha:g}: {n} now, {m} before)")
                continue
            judged.append(judge_figure(where, figure, now[figure], before[figure], alpha=alpha,
                                       band=ttft_band if ttft_band is not None and figure.startswith("ttft") else band,
                                       noise_floor_s=noise_floor_s))
    return judged, skipped


def judge_figure(where: str, figure: str, now: list[float], before: list[float], *, alpha: float, band: float,
                 noise_floor_s: float) -> Judgement:
    """One figure's rounds `now` against `before`: regressed when significant at `alpha` and beyond `band`."""
    median_now, median_before = statistics.median(now), statistics.median(before)
    latency = is_latency(figure)
    # Worse: a latency larger, a throughput smaller.
    p_value = mann_whitney_greater(now, before) if latency else mann_whitney_greater(before, now)
    factor = worse_factor(figure, median_before, median_now)
    beyond = factor >= 1 + band and not (latency and median_now - median_before <= noise_floor_s)
    return Judgement(where, figure, median_before, median_now, factor, p_value, (len(now), len(before)),
                     regressed=p_value < alpha and beyond)


def baseline_problem(current_key: str, baseline: Mapping[str, Any] | None) -> str:
    """Why `baseline` cannot judge figures measured on `current_key` ('' when it can)."""
    if not baseline or not (baseline.get("client") or baseline.get("samples")):
        return "no earlier figures: the first release with a performance record"
    if baseline.get("key") != current_key:
        return (f"the last good release ({baseline.get('release') or '?'}) was measured on other hosts, topology "
                f"or load ({baseline.get('key')!r}, now {current_key!r})")
    return ""
