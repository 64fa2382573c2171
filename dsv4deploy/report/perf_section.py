"""The report's performance section: the perf gate's figures beside the last good release's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

LABELS = {"ttft_p50_s": "TTFT p50", "ttft_p99_s": "TTFT p99", "itl_p50_s": "inter-token p50",
          "e2e_p50_s": "end-to-end p50", "output_tokens_per_s": "output tokens/s", "requests": "requests"}


def _value(figure: str, value: Any) -> str:
    if value is None:
        return "-"
    if figure.endswith("_s") and not figure.endswith("_per_s"):
        return f"{float(value) * 1000:.1f} ms"
    return f"{float(value):.1f}" if figure.endswith("_per_s") else f"{value:g}"


def comparison(gates: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The last judged perf gate's client figures and the previous release's they were judged against
    (``{current, previous, release}``), or None when no perf gate compared two releases."""
    perf = [g for g in gates if g.get("name") == "perf" and (g.get("evidence") or {}).get("judged")]
    if not perf:
        return None
    evidence = perf[-1]["evidence"]
    baseline = evidence.get("baseline") or {}
    return {"current": evidence["figures"].get("client") or {}, "previous": baseline.get("client") or {},
            "release": baseline.get("release") or "?"}


def markdown(gates: Sequence[Mapping[str, Any]]) -> list[str]:
    """``## Performance`` lines for the last perf gate that measured figures ([] when none did)."""
    perf = [g for g in gates if g.get("name") == "perf" and (g.get("evidence") or {}).get("figures")]
    if not perf:
        return []
    evidence = perf[-1]["evidence"]
    figures, baseline = evidence["figures"], evidence.get("baseline") or {}
    if evidence.get("judged"):
        count = len(evidence["regressions"])
        verdict = f"{count} figure(s) regressed." if count else "none regressed."
        # Records written before the rank test carry no alpha.
        test = (f"one-sided Mann-Whitney U over {evidence.get('rounds')} rounds at alpha {evidence['alpha']:g}, "
                if evidence.get("alpha") is not None else "")
        head = (f"Judged against release {baseline.get('release') or '?'} (the last good one on these hosts), "
                f"{test}tolerance {float(evidence['tolerance']):.0%}: {verdict}")
    else:
        head = f"Recorded, not judged: {evidence.get('not_judged_because') or 'no baseline'}."
    if evidence.get("not_judged"):
        head += f" Not judged: {', '.join(evidence['not_judged'])}."
    load = figures.get("load") or {}
    lines = ["## Performance", "", head,
             f"Load: {load.get('requests')} streamed requests, {load.get('concurrency')} at once, "
             f"{load.get('prompt_tokens')}-token prompts, {load.get('output_tokens')} output tokens.", "",
             "| measured by | figure | this release | last good | change |", "|---|---|---:|---:|---:|"]
    regressed = {(r["where"], r["figure"]) for r in evidence.get("regressions") or []}
    groups = [("client", figures.get("client") or {}, baseline.get("client") or {})]
    groups += [(name, figs, (baseline.get("servers") or {}).get(name) or {})
               for name, figs in sorted((figures.get("servers") or {}).items())]
    for where, now, before in groups:
        for figure, value in now.items():
            old = before.get(figure) if evidence.get("judged") else None
            change = f"{float(value) / float(old):.2f}x" if value is not None and old else "-"
            mark = " ✗" if (where, figure) in regressed else ""
            lines.append(f"| {where} | {LABELS.get(figure, figure)} | {_value(figure, value)} | "
                         f"{_value(figure, old)} | {change}{mark} |")
    return lines
