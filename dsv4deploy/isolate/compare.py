"""The soak side of the isolation experiment: a decision procedure with stated hypotheses.

The seeds' question (``002``): does PD corrupt tool calls more than one combined server with the same
settings, and does the combined server corrupt at all? Each side gives ``k`` corrupted sessions of ``n``
finished ones; ``a`` is the acceptable corrupted-session rate (the soak's ``soak_acceptable_rate``). Every
statement is a test that rejected at :data:`SIGNIFICANCE`, never a test that did not:

- *PD shown worse*: Fisher's exact test, one-sided (H0: PD's rate <= the combined server's), rejects.
- *a side shown clean*: its exact one-sided upper bound is below ``a`` (H0: rate >= a rejected).
- *a side shown failing*: its exact one-sided lower bound is above ``a`` (H0: rate <= a rejected).
- *rates shown alike*: the exact conditional interval of the rate ratio PD/combined (Clopper-Pearson on
  ``k_pd`` of ``k_pd + k_combined``, scaled by the sessions: exact for Poisson counts and conservative for
  binomial ones) has its upper bound below :data:`RATIO_MARGIN`.

Verdicts: ``pd_specific`` = PD shown worse and combined shown clean; ``pd_amplified`` = PD shown worse and
combined shown failing; ``shared_path`` = both shown failing and rates shown alike; ``clean`` = both shown
clean; otherwise ``inconclusive``, naming what would decide. A side with no finished session is
``inconclusive`` before any test. The operating characteristics of this procedure at the seeds' rates are
in docs/evidence.md (``bench/isolation_oc.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dsv4deploy.gates.evidence import exact_interval, rate_above_p_value

#: The significance of every test.
SIGNIFICANCE = 0.05
#: A side's acceptable corrupted-session rate when its soak evidence does not say (the soak's default).
ACCEPTABLE = 0.005
#: "Alike": the PD/combined rate ratio shown below this. The seeds' amplification is 9x; 3x (6 % against
#: 2 %) is still an amplification worth finding, so the margin sits below it.
RATIO_MARGIN = 2.0


def rate_below_p_value(events: int, trials: int, rate: float) -> float:
    """Exact one-sided p-value of "the true rate is at least ``rate``" given ``events`` of ``trials``."""
    if trials == 0:
        return 1.0
    from scipy.stats import binomtest  # lazy: see dsv4deploy.gates.evidence

    return float(binomtest(events, trials, rate, alternative="less").pvalue)


def sessions_to_show_clean(bound: float = ACCEPTABLE, significance: float = SIGNIFICANCE) -> int:
    """The fewest sessions, all clean, that show a rate below ``bound``: 598 for 0.5 % at 0.05."""
    return math.ceil(math.log(significance) / math.log(1.0 - bound))


def fisher_greater(a_events: int, a_trials: int, b_events: int, b_trials: int) -> float:
    """Fisher's exact one-sided p-value that side A's rate exceeds side B's: the hypergeometric tail that
    scipy's ``fisher_exact(alternative="greater")`` sums, taken directly (a hundred times faster, which
    the operating characteristics' enumeration needs)."""
    from scipy.stats import hypergeom

    events = a_events + b_events
    return float(min(1.0, hypergeom.sf(a_events - 1, a_trials + b_trials, events, a_trials)))


@functools.lru_cache(maxsize=65536)
def ratio_interval(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact conditional interval of the rate ratio (k_a/n_a)/(k_b/n_b): the Clopper-Pearson interval of
    k_a of k_a + k_b (its beta quantiles), scaled by n_b/n_a ((0, inf) when neither side has an event)."""
    total = k_a + k_b
    if total == 0 or n_a == 0 or n_b == 0:
        return 0.0, math.inf
    from scipy.stats import beta

    tail = (1 - confidence) / 2
    low = float(beta.ppf(tail, k_a, total - k_a + 1)) if k_a > 0 else 0.0
    high = float(beta.ppf(1 - tail, k_a + 1, total - k_a)) if k_a < total else 1.0
    scale = n_b / n_a
    return low / (1 - low) * scale, (high / (1 - high) * scale if high < 1 else math.inf)


@dataclass(frozen=True)
class RateComparison:
    """Every test of one comparison of two sides' event counts, and the verdict they give."""

    verdict: str
    pd: tuple[int, int]
    combined: tuple[int, int]
    acceptable: float
    pd_worse_p: float  # Fisher one-sided, PD worse
    combined_worse_p: float  # Fisher one-sided, combined worse
    pd_above_p: float
    pd_below_p: float
    combined_above_p: float
    combined_below_p: float
    ratio_95: tuple[float, float] | None  # computed where it decides (both sides shown failing)

    def evidence(self) -> dict[str, Any]:
        """JSON-able: the counts, every p-value and the ratio interval."""
        out = asdict(self)
        ratio = self.ratio_95 or ratio_interval(*self.pd, *self.combined)
        out["ratio_95"] = [x if math.isfinite(x) else None for x in ratio]
        return out


@functools.lru_cache(maxsize=65536)
def _side_p_values(k: int, n: int, rate: float) -> tuple[float, float]:
    """(above, below): the exact one-sided p-values of one side's count against ``rate`` (cached: the
    operating characteristics judge each count against many of the other side's)."""
    return rate_above_p_value(k, n, rate), rate_below_p_value(k, n, rate)


def decide_rates(kp: int, np_: int, kc: int, nc: int, acceptable: float,
                 significance: float = SIGNIFICANCE, margin: float = RATIO_MARGIN) -> RateComparison:
    """The procedure of the module docstring on raw counts (also what bench/isolation_oc.py enumerates)."""
    pd_worse = fisher_greater(kp, np_, kc, nc) if np_ and nc else 1.0
    combined_worse = fisher_greater(kc, nc, kp, np_) if np_ and nc else 1.0
    ps = (*_side_p_values(kp, np_, acceptable), *_side_p_values(kc, nc, acceptable))
    shown = [p < significance for p in ps]
    pd_bad, pd_clean, combined_bad, combined_clean = shown
    ratio = ratio_interval(kp, np_, kc, nc, 1 - significance) if pd_bad and combined_bad else None
    if not np_ or not nc:
        verdict = "inconclusive"
    elif pd_worse < significance and combined_clean:
        verdict = "pd_specific"
    elif pd_worse < significance and combined_bad:
        verdict = "pd_amplified"
    elif ratio is not None and ratio[1] < margin and combined_worse >= significance:
        verdict = "shared_path"
    elif pd_clean and combined_clean:
        verdict = "clean"
    else:
        verdict = "inconclusive"
    return RateComparison(verdict, (kp, np_), (kc, nc), acceptable, pd_worse, combined_worse, *ps, ratio)


def _side_rate(ev: Mapping[str, Any]) -> tuple[int, int, float]:
    k, n = int(ev.get("corrupted_sessions", 0)), int(ev.get("finished", 0))
    acceptable = float((ev.get("design") or {}).get("acceptable_rate", ACCEPTABLE))
    return k, n, acceptable


def shown(label: str, k: int, n: int, unit: str = "sessions corrupted") -> str:
    """``PD 3 of 150 sessions corrupted (95% interval 0.4%-5.7%)``."""
    low, high = exact_interval(k, n)
    return f"{label} {k} of {n} {unit} (95% interval {low:.1%}-{high:.1%})"


def _ratio_text(ratio: tuple[float, float]) -> str:
    low, high = ratio
    return f"rate ratio PD/combined 95% interval {low:.2g}-{'inf' if not math.isfinite(high) else f'{high:.2g}'}"


def compare_soak(pd: Mapping[str, Any], combined: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(verdict, why, evidence) from the two sides' soak evidence."""
    kp, np_, acceptable = _side_rate(pd)
    kc, nc, _ = _side_rate(combined)
    if not np_ or not nc:
        side = "PD" if not np_ else "combined"
        return "inconclusive", (f"soak: no session finished on the {side} side, so it measured nothing "
                                f"({shown('PD', kp, np_)}; {shown('combined', kc, nc)})"), {"pd": [kp, np_],
                                                                                           "combined": [kc, nc]}
    # An interim look of the alternating design judges at its spent level (dsv4deploy.isolate.sequential).
    level = float(pd.get("significance") or SIGNIFICANCE)
    r = decide_rates(kp, np_, kc, nc, acceptable, significance=level)
    counts = f"{shown('PD', kp, np_)}; {shown('combined', kc, nc)}"
    if pd.get("blocks") and combined.get("blocks"):
        counts += (f"; look {pd.get('look')} of {pd.get('rounds')} at level {level:.3g}, blocks PD/combined: "
                   + ", ".join(f"{a['corrupted_sessions']}/{b['corrupted_sessions']} of {a['finished']}/{b['finished']}"
                               for a, b in zip(pd["blocks"], combined["blocks"], strict=False)))
    tests = (f"Fisher p={r.pd_worse_p:.2g} (PD worse); combined above {acceptable:.1%}: p={r.combined_above_p:.2g}, "
             f"below: p={r.combined_below_p:.2g}; {_ratio_text(r.ratio_95 or ratio_interval(kp, np_, kc, nc))}")
    why = {
        "pd_specific": f"PD corrupts more and the combined server is shown below {acceptable:.1%}: the bug is in "
                       "the PD path (KV transfer)",
        "pd_amplified": f"PD corrupts more, and the combined server too is shown above {acceptable:.1%}: the bug "
                        "is in the code both share, and PD amplifies it",
        "shared_path": f"both sides are shown above {acceptable:.1%} and their rates within {RATIO_MARGIN:g}x of "
                       "each other: the bug is in the code both share, not in the PD transfer",
        "clean": f"both sides are shown below {acceptable:.1%}",
    }.get(r.verdict) or _soak_undecided(r)
    load, load_evidence = compare_load(pd, combined)
    return r.verdict, f"soak: {why} ({counts}; {tests}){load}", {**r.evidence(), **load_evidence}


#: The sides ran comparable batches when their decode occupancy is within this factor of each other.
LOAD_FACTOR = 1.5


def compare_load(pd: Mapping[str, Any], combined: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the why's load clause, evidence): each side's realised decode occupancy (mean running requests from
    sglang's own /metrics while the soak ran) and whether they differ by more than :data:`LOAD_FACTOR`."""
    from dsv4deploy.gates.occupancy import decode_occupancy

    mine, theirs = decode_occupancy(pd.get("occupancy") or []), decode_occupancy(combined.get("occupancy") or [])
    evidence = {"pd_occupancy": mine, "combined_occupancy": theirs, "load_factor": LOAD_FACTOR}
    if mine is None or theirs is None:
        evidence["confounded_by_load"] = None
        return "; realised occupancy not measured on both sides (servers' /metrics)", evidence
    apart = max(mine, theirs) / max(min(mine, theirs), 1e-9) > LOAD_FACTOR
    evidence["confounded_by_load"] = apart
    figures = f"PD's decode ran {mine:g} requests at once on average, the combined server {theirs:g}"
    if apart:
        return (f"; CONFOUNDED BY LOAD: {figures}, more than {LOAD_FACTOR:g}x apart: the corruption depends on the "
                "batch, so the rates are not comparable (match soak_concurrency or the servers' limits)"), evidence
    return f"; load comparable: {figures}", evidence


def _soak_undecided(r: RateComparison) -> str:
    """What the counts could not show, and what more evidence would decide."""
    kc, nc = r.combined
    clean_n = sessions_to_show_clean(r.acceptable)
    if r.combined_worse_p < SIGNIFICANCE:
        return "the combined server corrupts more than PD: it differs in more than the PD path; look at its notes"
    if r.pd_worse_p < SIGNIFICANCE:
        more = f"{clean_n - nc} more clean sessions" if kc == 0 else "more sessions (dsv4_isolate_soak_sessions)"
        return (f"PD corrupts more, but the combined server is neither shown below nor above {r.acceptable:.1%}: "
                f"{more} on the combined side would decide")
    if r.pd_above_p < SIGNIFICANCE and r.combined_above_p < SIGNIFICANCE:
        return (f"both sides corrupt, but neither PD shown worse nor the rates shown within {RATIO_MARGIN:g}x: "
                "more sessions a side (dsv4_isolate_soak_sessions) would decide")
    return (f"the counts show neither side clean nor a difference ({clean_n} clean sessions a side show "
            f"{r.acceptable:.1%}): more sessions a side (dsv4_isolate_soak_sessions) would decide")


#: Which verdict wins when suites disagree: a PD finding first, then a shared one, then doubt, then clean.
ORDER = ("pd_specific", "pd_amplified", "shared_path", "inconclusive", "clean")


def combine_suites(verdicts: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """One verdict from the suites' (verdict, why): the first by :data:`ORDER`, every suite's why joined."""
    best = min((v for v, _ in verdicts), key=ORDER.index)
    return best, "; ".join(why for _, why in verdicts)
