"""The two sides of the isolation experiment compared by exact tests, suite by suite.

The seeds' questions are comparisons: does PD corrupt tool calls more than one combined server with the
same settings (about 15-18 % of sessions against about 2 %), and does PD lose more long-context recall than
the combined server. So each suite is judged by a test of the two sides, never by two pass/fail flags:

- soak: corrupted sessions of finished ones on each side, each with its exact 95 % interval; a side is
  bad when its rate is significantly above the acceptable rate (exact binomial, p < 0.05); PD against
  combined by Fisher's exact test (one-sided: PD worse). ``pd_specific`` needs the combined side shown
  below :data:`CLEAN_BOUND` (2 %, the seeds' non-PD rate) by an exact one-sided test: 0 of 150 does it
  (0.98^150 = 0.048), 0 of 50 cannot (its interval reaches 7 %), and the verdict then says how many more
  clean sessions would.
- needle: the trials of both sides are the same prompts (same seed, grid, trial number and needle), so they
  are paired trial by trial: McNemar's exact test on the prompts one side recalled and the other missed. A
  cell's trials stop at its verdict, so only the trials asked on both sides are paired. Both curves are compared
  whatever the requirement: both missing alike (index_topk 512 collapsing at 4K on both sides) is
  ``shared_path``, the model's own limit, even when both pass the requirement.

Verdicts: ``pd_specific`` (PD fails, combined shown clean), ``pd_amplified`` (both fail, PD significantly
worse), ``shared_path`` (both fail, no significant difference), ``clean``, ``inconclusive`` (naming what
more evidence would decide). Each carries its p-value or interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dsv4deploy.gates.evidence import exact_interval, fisher_greater, mcnemar_p_value, rate_above_p_value

#: The significance of every comparison.
SIGNIFICANCE = 0.05
#: The rate below which the combined side must be shown for a PD-specific verdict: the seeds' non-PD rate.
CLEAN_BOUND = 0.02
#: A side's acceptable corrupted-session rate when its soak evidence does not say (the soak's default).
ACCEPTABLE = 0.005


def rate_below_p_value(events: int, trials: int, rate: float) -> float:
    """Exact one-sided p-value of "the true rate is at least ``rate``" given ``events`` of ``trials``."""
    if trials == 0:
        return 1.0
    from scipy.stats import binomtest  # lazy: see dsv4deploy.gates.evidence

    return float(binomtest(events, trials, rate, alternative="less").pvalue)


def sessions_to_show_clean(bound: float = CLEAN_BOUND, significance: float = SIGNIFICANCE) -> int:
    """The fewest sessions, all clean, that show a rate below ``bound``: 149 for 2 % at 0.05."""
    return math.ceil(math.log(significance) / math.log(1.0 - bound))


def _side_rate(ev: Mapping[str, Any]) -> tuple[int, int, float]:
    k, n = int(ev.get("corrupted_sessions", 0)), int(ev.get("finished", 0))
    acceptable = float((ev.get("design") or {}).get("acceptable_rate", ACCEPTABLE))
    return k, n, acceptable


def _shown(label: str, k: int, n: int) -> str:
    low, high = exact_interval(k, n)
    return f"{label} {k} of {n} sessions corrupted (95% interval {low:.1%}-{high:.1%})"


def compare_soak(pd: Mapping[str, Any], combined: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(verdict, why, evidence) from the two sides' soak evidence."""
    kp, np_, acceptable = _side_rate(pd)
    kc, nc, _ = _side_rate(combined)
    fisher = fisher_greater(kp, np_, kc, nc)
    pd_bad = rate_above_p_value(kp, np_, acceptable) < SIGNIFICANCE
    combined_bad = rate_above_p_value(kc, nc, acceptable) < SIGNIFICANCE
    below = rate_below_p_value(kc, nc, CLEAN_BOUND)
    shown = f"{_shown('PD', kp, np_)}; {_shown('combined', kc, nc)}"
    evidence = {"pd": [kp, np_], "combined": [kc, nc], "fisher_p": fisher, "combined_below_2pct_p": below,
                "pd_interval_95": list(exact_interval(kp, np_)), "combined_interval_95": list(exact_interval(kc, nc))}
    if pd_bad and combined_bad:
        if fisher < SIGNIFICANCE:
            return "pd_amplified", (f"soak: both sides corrupt, PD significantly more ({shown}; Fisher "
                                    f"p={fisher:.2g}): the bug is in the shared code, and PD amplifies it"), evidence
        return "shared_path", (f"soak: both sides corrupt alike ({shown}; Fisher p={fisher:.2g}): the bug is in the "
                               "code both share, not in the PD transfer"), evidence
    if pd_bad and below < SIGNIFICANCE:
        return "pd_specific", (f"soak: PD corrupts and the combined server is shown below {CLEAN_BOUND:.0%} ({shown}; "
                               f"Fisher p={fisher:.2g}; combined below {CLEAN_BOUND:.0%}: p={below:.2g}): the bug is "
                               "in the PD path (KV transfer)"), evidence
    if pd_bad:
        more = max(1, sessions_to_show_clean() - nc) if kc == 0 else None
        need = (f"{more} more clean sessions on the combined side would show it below {CLEAN_BOUND:.0%}" if more
                else f"more combined sessions (soak_sessions; {sessions_to_show_clean()} clean ones show "
                     f"{CLEAN_BOUND:.0%})")
        return "inconclusive", (f"soak: PD corrupts ({shown}; Fisher p={fisher:.2g}) but the combined side is not "
                                f"shown clean to {CLEAN_BOUND:.0%}: {need}"), evidence
    if combined_bad:
        return "inconclusive", (f"soak: the combined server corrupts and PD does not ({shown}): the combined server "
                                "differs in more than the PD path; look at its notes"), evidence
    return "clean", f"soak: neither side corrupts beyond {acceptable:.1%} ({shown})", evidence


def _cells(ev: Mapping[str, Any]) -> dict[tuple[Any, ...], bool]:
    """Recalled or not per prompt: each answered trial of each cell (its needle is the key: the same seed,
    cell and trial ask the same prompt on both sides), or per cell for evidence without trials."""
    out: dict[tuple[Any, ...], bool] = {}
    for c in ev.get("cells") or []:
        trials = c.get("trials")
        if trials is None:
            out[(c.get("context_tokens"), c.get("depth"), c.get("code"))] = bool(c.get("recalled"))
            continue
        for t in trials:
            if t.get("error") is None:
                out[(c.get("context_tokens"), c.get("depth"), t.get("trial"), t.get("code"))] = bool(t.get("recalled"))
    return out


def compare_needle(pd: Mapping[str, Any], combined: Mapping[str, Any],
                   pd_breaks: int | None, combined_breaks: int | None) -> tuple[str, str, dict[str, Any]]:
    """(verdict, why, evidence) from the two sides' needle evidence, cells paired on identical prompts."""
    mine, theirs = _cells(pd), _cells(combined)
    paired = sorted(set(mine) & set(theirs), key=str)
    only_pd = sum(theirs[k] and not mine[k] for k in paired)  # missed in PD alone
    only_combined = sum(mine[k] and not theirs[k] for k in paired)
    pd_missed = sum(not mine[k] for k in paired)
    combined_missed = sum(not theirs[k] for k in paired)
    p = mcnemar_p_value(only_pd, only_combined)
    curves = (f"{len(paired)} paired prompts; missed: PD {pd_missed}, combined {combined_missed}; missed in PD alone "
              f"{only_pd}, on the combined server alone {only_combined} (McNemar p={p:.2g}); recall breaks at "
              f"{pd_breaks or 'none'} (PD) and {combined_breaks or 'none'} (combined) tokens")
    evidence = {"paired_prompts": len(paired), "pd_missed": pd_missed, "combined_missed": combined_missed,
                "only_pd": only_pd, "only_combined": only_combined, "mcnemar_p": p}
    if not paired:
        return "inconclusive", "needle: no prompt was asked on both sides (the grids differ)", evidence
    if pd_missed == 0 and combined_missed == 0:
        return "clean", f"needle: both sides recall every cell ({curves})", evidence
    if pd_missed and combined_missed:
        if p < SIGNIFICANCE and only_pd > only_combined:
            return "pd_amplified", (f"needle: both sides lose recall, PD significantly more ({curves})"), evidence
        if p < SIGNIFICANCE:
            return "inconclusive", (f"needle: the combined server loses more than PD ({curves}): it differs in more "
                                    "than the PD path"), evidence
        return "shared_path", (f"needle: both curves break alike ({curves}): the model's own limit or the code both "
                               "share, not the PD transfer"), evidence
    if pd_missed:
        if p < SIGNIFICANCE:
            return "pd_specific", ("needle: PD loses cells the combined server recalls on identical prompts "
                                   f"({curves}): the bug is in the PD path (KV transfer)"), evidence
        need = next(k for k in range(1, 64) if mcnemar_p_value(k, 0) < SIGNIFICANCE)
        return "inconclusive", (f"needle: PD alone misses {only_pd} prompts ({curves}); at least {need} such prompts "
                                "would decide: widen the grid (needle_lengths, needle_depths) or ask more "
                                "trials (needle_trials)"), evidence
    return "inconclusive", (f"needle: the combined server misses cells PD recalls ({curves}): it differs in more than "
                            "the PD path"), evidence


#: Which verdict wins when suites disagree: a PD finding first, then a shared one, then doubt, then clean.
ORDER = ("pd_specific", "pd_amplified", "shared_path", "inconclusive", "clean")


def combine_suites(verdicts: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """One verdict from the suites' (verdict, why): the first by :data:`ORDER`, every suite's why joined."""
    best = min((v for v, _ in verdicts), key=ORDER.index)
    return best, "; ".join(why for _, why in verdicts)
