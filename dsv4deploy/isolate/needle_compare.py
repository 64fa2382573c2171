"""The needle side of the isolation experiment: the two recall curves compared length by length.

Both sides ask the same prompts (same seed, grid, trial number and needle), so trials pair on identical
prompts. The seeds' question (``000``): does PD lose recall the combined server keeps? Hypotheses, each
stated only when its test rejected at :data:`SIGNIFICANCE`:

- *PD shown worse at N tokens*: only at lengths where the combined server recalls (each of its cells there
  passed the needle's k-of-n rule), McNemar's exact one-sided test of the prompts PD alone missed against
  those the combined server alone missed, Holm-corrected over those lengths.
- *a side shown failing / clean*: its needle gate failed / passed by its own rule (k of n trials a cell,
  risks in docs/evidence.md) over the cells within ``needle_required_tokens``.
- *misses shown alike*: over the paired prompts of the required lengths where the combined server does not
  recall (where it does, McNemar above speaks), the PD/combined miss-rate ratio's exact bound
  (:func:`miss_ratio_interval`: each side's Clopper-Pearson 95 % interval, the ratio of their ends) is below
  :data:`~dsv4deploy.isolate.compare.RATIO_MARGIN`.

Verdicts as for the soak (``pd_specific``: PD shown worse, combined passes; ``pd_amplified``: PD shown worse,
combined fails; ``shared_path``: both fail, misses alike; ``clean``: both pass, PD nowhere shown worse).
Lengths where both sides miss alike are reported as "the model's limit at N tokens", apart from the verdict.
A side whose gate could not measure (an error, a deadline, no trial answered) makes it ``inconclusive``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsv4deploy.gates.evidence import exact_interval
from dsv4deploy.isolate.compare import RATIO_MARGIN, SIGNIFICANCE

Key = tuple[Any, ...]


def _trials(ev: Mapping[str, Any]) -> dict[Key, tuple[int, bool, bool]]:
    """Per answered prompt: (its length, whether it recalled, whether its cell is required)."""
    out: dict[Key, tuple[int, bool, bool]] = {}
    for c in ev.get("cells") or []:
        n, required = int(c.get("context_tokens") or 0), bool(c.get("required", True))
        trials = c.get("trials")
        if trials is None:  # one answer a cell
            out[(n, c.get("depth"), c.get("code"))] = (n, bool(c.get("recalled")), required)
            continue
        for t in trials:
            if t.get("error") is None:
                out[(n, c.get("depth"), t.get("trial"), t.get("code"))] = (n, bool(t.get("recalled")), required)
    return out


def _recalls(ev: Mapping[str, Any]) -> dict[int, bool]:
    """Per length: every cell there passed its rule."""
    out: dict[int, bool] = {}
    for c in ev.get("cells") or []:
        n = int(c.get("context_tokens") or 0)
        ok = c.get("outcome", "recalled" if c.get("recalled") else "missed") == "recalled"
        out[n] = out.get(n, True) and ok
    return out


def miss_ratio_interval(k_a: int, n_a: int, k_b: int, n_b: int) -> tuple[float, float]:
    """A conservative exact interval of the miss-rate ratio (k_a/n_a)/(k_b/n_b): each rate's Clopper-Pearson
    95 % interval, the ratio of their ends (coverage at least 1 - 2 x 2.5 %). Misses near 1, the needle's case
    beyond a limit, bound it tightly: 8 of 8 against 8 of 8 gives 0.63-1.6."""
    if not n_a or not n_b:
        return 0.0, float("inf")
    low_a, high_a = exact_interval(k_a, n_a)
    low_b, high_b = exact_interval(k_b, n_b)
    return low_a / high_b if high_b > 0 else 0.0, (high_a / low_b if low_b > 0 else float("inf"))


def one_sided_mcnemar(only_a: int, only_b: int) -> float:
    """Exact one-sided p-value that side A misses more: ``only_a`` of the discordant pairs at 1/2."""
    if only_a + only_b == 0:
        return 1.0
    from scipy.stats import binomtest  # lazy: see dsv4deploy.gates.evidence

    return float(binomtest(only_a, only_a + only_b, 0.5, alternative="greater").pvalue)


def holm(p_values: Mapping[int, float], significance: float = SIGNIFICANCE) -> set[int]:
    """The keys whose hypotheses Holm's step-down procedure rejects (family-wise error <= significance)."""
    rejected: set[int] = set()
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    for i, (key, p) in enumerate(ordered):
        if p >= significance / (len(ordered) - i):
            break
        rejected.add(key)
    return rejected


def per_length(pd: Mapping[str, Any], combined: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows per context length: paired prompts, misses each side, discordant counts, the one-sided
    p-value (where the combined server recalls), Holm's decision, and whether both miss alike."""
    mine, theirs = _trials(pd), _trials(combined)
    recalls = _recalls(combined)
    rows: dict[int, dict[str, Any]] = {}
    for key in set(mine) & set(theirs):
        n, pd_ok, _ = mine[key]
        _, c_ok, _ = theirs[key]
        row = rows.setdefault(n, {"context_tokens": n, "paired": 0, "pd_missed": 0, "combined_missed": 0,
                                  "only_pd": 0, "only_combined": 0})
        row["paired"] += 1
        row["pd_missed"] += not pd_ok
        row["combined_missed"] += not c_ok
        row["only_pd"] += c_ok and not pd_ok
        row["only_combined"] += pd_ok and not c_ok
    tested = {n: one_sided_mcnemar(r["only_pd"], r["only_combined"]) for n, r in rows.items() if recalls.get(n)}
    worse = holm(tested)
    for n, row in rows.items():
        row["combined_recalls"] = bool(recalls.get(n))
        row["p_pd_worse"] = tested.get(n)
        row["pd_shown_worse"] = n in worse
        differs = min(one_sided_mcnemar(row["only_pd"], row["only_combined"]),
                      one_sided_mcnemar(row["only_combined"], row["only_pd"])) < SIGNIFICANCE / 2
        row["limit"] = not row["combined_recalls"] and row["pd_missed"] > 0 and row["combined_missed"] > 0 \
            and not differs
    return [rows[n] for n in sorted(rows)]


def _measured(gate: Mapping[str, Any]) -> str | None:
    """Why a side's needle measured nothing usable, or None."""
    cells = (gate.get("evidence") or {}).get("cells") or []
    if gate.get("status") not in ("passed", "failed"):
        return f"its needle gate is {gate.get('status')}: {gate.get('summary', '')}"
    if not any(c.get("asked_trials", 1 if c.get("trials") is None else 0) for c in cells):
        return f"its needle asked no cell: {gate.get('summary', '')}"
    return None


def compare_needle(pd: Mapping[str, Any], combined: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(verdict, why, evidence) from the two sides' needle gate results (status, summary, evidence)."""
    for side, gate in (("PD", pd), ("combined", combined)):
        why = _measured(gate)
        if why:
            return "inconclusive", f"needle: the {side} side could not measure: {why}", {}
    rows = per_length(pd["evidence"], combined["evidence"])
    recalls = _recalls(combined["evidence"])
    required = {k: v for k, v in _trials(pd["evidence"]).items() if v[2] and not recalls.get(v[0])}
    theirs = _trials(combined["evidence"])
    paired_required = [k for k in required if k in theirs]
    kp = sum(not required[k][1] for k in paired_required)
    kc = sum(not theirs[k][1] for k in paired_required)
    ratio = miss_ratio_interval(kp, len(paired_required), kc, len(paired_required))
    limits = [r["context_tokens"] for r in rows if r["limit"]]
    worse = [r for r in rows if r["pd_shown_worse"]]
    pd_failed, combined_failed = pd["status"] == "failed", combined["status"] == "failed"
    evidence = {"lengths": rows, "required_paired": len(paired_required), "required_missed": [kp, kc],
                "ratio_95": [x if x != float("inf") else None for x in ratio], "limits": limits}
    table = "; ".join(f"{r['context_tokens']}: missed PD {r['pd_missed']}, combined {r['combined_missed']} of "
                      f"{r['paired']}" + (f", PD alone {r['only_pd']} (p={r['p_pd_worse']:.2g})"
                                          if r["p_pd_worse"] is not None else "") for r in rows)
    limit = (f"; the model's limit at {', '.join(map(str, limits))} tokens (both sides miss alike there)"
             if limits else "")
    if not rows:
        return "inconclusive", "needle: no prompt was asked on both sides (the grids differ)", evidence
    if worse and not combined_failed:
        at = ", ".join(str(r["context_tokens"]) for r in worse)
        return "pd_specific", (f"needle: PD loses recall the combined server keeps at {at} tokens (McNemar, "
                               f"Holm-corrected; {table}); the combined server passes: the bug is in the PD path "
                               f"(KV transfer){limit}"), evidence
    if worse:
        return "pd_amplified", (f"needle: both sides fail the requirement and PD loses more ({table}): the bug is "
                                f"in the code both share, and PD amplifies it{limit}"), evidence
    if pd_failed and combined_failed and ratio[1] < RATIO_MARGIN:
        return "shared_path", (f"needle: both sides fail the requirement alike ({kp} and {kc} of "
                               f"{len(paired_required)} prompts missed where the combined server fails; miss-rate "
                               "ratio 95% interval "
                               f"{ratio[0]:.2g}-{ratio[1]:.2g}, within {RATIO_MARGIN:g}x; {table}): the model's own "
                               f"limit or the code both share, not the PD transfer{limit}"), evidence
    if not pd_failed and not combined_failed:
        return "clean", f"needle: both sides pass the requirement and PD is nowhere shown worse ({table}){limit}", \
            evidence
    return "inconclusive", f"needle: {_needle_undecided(pd_failed, combined_failed, ratio)} ({table}){limit}", evidence


def _needle_undecided(pd_failed: bool, combined_failed: bool, ratio: tuple[float, float]) -> str:
    if pd_failed and combined_failed:
        return (f"both sides fail the requirement, but their misses are not shown within {RATIO_MARGIN:g}x "
                f"(ratio interval up to {ratio[1]:.2g}): more required cells (needle_depths) would decide")
    if pd_failed:
        return ("PD fails where the combined server passes, but no length shows PD worse (a cell stopped at its "
                "verdict pairs at most needle_trials - needle_min_recalled + 1 prompts; 5 discordant prompts at one "
                "length give p < 0.05 before the correction): more depths per length (needle_depths) would decide")
    return "the combined server fails where PD passes: it differs in more than the PD path; look at its notes"
