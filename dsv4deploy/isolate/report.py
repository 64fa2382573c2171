"""The isolation report: PD and combined side by side, the verdict, and whether production came back.

``build_isolate_report`` turns the gate results of a run of ``playbooks/isolate.yml`` into one
JSON-able mapping; ``write_isolate_report`` writes ``report.json``, ``report.md`` and, with
matplotlib, the two needle heatmaps side by side into ``reports/isolate/<timestamp>/``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dsv4deploy.gates.result import GateResult
from dsv4deploy.isolate import decide, parity_suite, side_summary
from dsv4deploy.isolate.sequential import pool_soak
from dsv4deploy.report import (
    JSON_NAME,
    MD_NAME,
    failure_sections,
    md_cell,
    needle_section,
    needle_table,
    status_mark,
    write_atomic,
)
from dsv4deploy.report.heatmap import LEGEND, write_heatmaps

HEATMAPS_NAME = "needle-heatmaps.png"
SIDES = ("pd", "combined")
#: Phases of the gate results a run records (dsv4_gates_phase), in the order they happen.
PHASES = ("original", "pd", "combined", "restore")


def build_isolate_report(
    *,
    suite: Sequence[str],
    original: Mapping[str, Any],
    combined: Mapping[str, Any],
    gates: Sequence[Mapping[str, Any]],
    settings: Sequence[Mapping[str, Any]] = (),
    notes: Sequence[str] = (),
    pd_error: str | None = None,
    combined_error: str | None = None,
    restored: bool,
    restore_error: str | None = None,
    manual_steps: str | None = None,
    refused: str | None = None,
    soak_rounds: int = 1,
    generated_at: datetime | None = None,
) -> dict[str, Any]:
    """The report as one mapping.

    `original` and `combined` are plans (release_id, endpoint, topology); `gates` every gate result
    of the run, each with its `phase`. `pd_error` and `combined_error` say why a side stopped early
    (e.g. a combined server that never started); `refused` why the run stopped before changing anything.
    `soak_rounds`: the alternating design's rounds; each side's soak blocks are pooled and judged at the
    level of the look they reached (dsv4deploy.isolate.sequential).
    """
    by_phase: dict[str, list[dict[str, Any]]] = {p: [] for p in PHASES}
    for gate in gates:
        by_phase.setdefault(str(gate.get("phase", "")), []).append(dict(gate))
    # The PD side's readiness is the check of the original before anything changed.
    health = by_phase["original"]
    pd_gates = pool_soak([g for g in health if g["name"] == "readiness"] + by_phase["pd"], soak_rounds)
    sides = {
        "pd": {"release": original.get("release_id"), "topology": "pd", "endpoint": original.get("endpoint"),
               **side_summary(pd_gates, suite, refused or pd_error)},
        "combined": {"release": combined.get("release_id"), "topology": "combined",
                     "endpoint": combined.get("endpoint"),
                     **side_summary(pool_soak(by_phase["combined"], soak_rounds), suite,
                                    "not run: the experiment was refused" if refused else combined_error)},
    }
    parity = parity_suite.comparison(sides)  # the parity suite's comparison of the two sides
    verdict, why = parity_suite.with_parity(decide(sides["pd"], sides["combined"]), parity)
    if refused:
        status = "refused"
    elif not restored:
        status = "failed"
    else:
        status = "ok"
    return {
        "kind": "isolate",
        "status": status,
        "verdict": verdict,
        "why": why,
        "suite": list(suite),
        "original_release": original.get("release_id"),
        "combined_release": combined.get("release_id"),
        # A refused run changed nothing: the original still serves, unverified.
        "serving_release": original.get("release_id") if restored or refused else None,
        "restored": restored,
        "restore": {"gates": by_phase["restore"], "error": restore_error, "manual_steps": manual_steps},
        # The original's returns between the alternating soak's rounds, and the proof that it served each time.
        "between": by_phase.get("between", []),
        "original_health": health,
        "sides": sides,
        "parity": parity,
        "settings": list(settings),
        "notes": list(notes),
        "refused": refused,
        "generated_at": (generated_at or datetime.now(UTC)).isoformat(timespec="seconds"),
    }


def write_isolate_report(directory: Path | str, data: dict[str, Any]) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and (with matplotlib) the heatmaps; return their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    needles = {side: _needle(data["sides"][side]) for side in SIDES}
    heatmap_note = None
    if any(n and n.get("cells") for n in needles.values()):
        panels = [(f"{side.upper() if side == 'pd' else side}: {LEGEND}", (needles[side] or {}).get("cells") or [])
                  for side in SIDES]
        if write_heatmaps(out / HEATMAPS_NAME, panels):
            paths["heatmaps"] = out / HEATMAPS_NAME
        else:
            heatmap_note = "Heatmaps skipped: matplotlib is not installed (install the `plot` extra)."
    paths["json"] = write_atomic(out / JSON_NAME, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    md = render_isolate_markdown(data, needles, heatmaps=paths.get("heatmaps"), heatmap_note=heatmap_note)
    paths["md"] = write_atomic(out / MD_NAME, md)
    return paths


def _needle(side: Mapping[str, Any]) -> dict[str, Any] | None:
    return needle_section([GateResult.model_validate({k: v for k, v in g.items() if k != "phase"})
                           for g in side["gates"]])


def headline(data: Mapping[str, Any]) -> str:
    """One line: the verdict and why, and what serves now."""
    verdict = f"**{data['verdict'].upper()}**: {data['why']}"
    if data["status"] == "refused":
        return f"**REFUSED**, nothing was changed: {data['refused']}"
    if not data["restored"]:
        return (f"**RESTORE FAILED**: release `{data['original_release']}` is NOT verified serving "
                f"({data['restore'].get('error') or 'see below'}). Experiment: {verdict}")
    return f"{verdict}. Production: release `{data['original_release']}` restored and verified (readiness, smoke)."


def render_isolate_markdown(data: Mapping[str, Any], needles: Mapping[str, dict[str, Any] | None],
                            heatmaps: Path | None = None, heatmap_note: str | None = None) -> str:
    """The report a person reads: verdict, production, the two sides, settings, recall, raw failures."""
    sides = data["sides"]
    lines = ["# Isolation report: PD versus combined", "", headline(data), ""]
    if data["restore"].get("manual_steps"):
        lines += ["## Manual steps (production is not verified)", "", data["restore"]["manual_steps"], ""]
    lines += ["| | PD | combined |", "|---|---|---|"]
    rows = [
        ("release", lambda s: f"`{s['release']}`" if s["release"] else "-"),
        ("endpoint", lambda s: s["endpoint"] or "-"),
        ("ready", lambda s: "yes" if s["ready"] else "no"),
        *[(f"suite: {name}", _suite_cell(name)) for name in data["suite"]],
        ("recall breaks at", lambda s: f"{s['recall_breaks_at']} tokens" if s["recall_breaks_at"] else
         ("never (within the grid)" if s["recall_curve"] else "-")),
        ("realised occupancy (soak)", _occupancy_cell),
        ("stopped early", lambda s: s["error"] or "-"),
    ]
    for label, cell in rows:
        lines.append(f"| {label} | {md_cell(cell(sides['pd']))} | {md_cell(cell(sides['combined']))} |")
    lines += ["", f"Suite: {', '.join(data['suite'])}. Generated {data['generated_at']}.", ""]
    if data["settings"]:
        lines += ["## What each side runs", "", "| setting | PD | combined | same |", "|---|---|---|:-:|"]
        for row in data["settings"]:
            pd_text = "; ".join(f"{role}: {value}" for role, value in row["pd"].items())
            same = {True: "✓", False: "✗", None: "(layout)"}[row["same"]]
            lines.append(f"| {row['setting']} | {md_cell(pd_text)} | {md_cell(row['combined'])} | {same} |")
        lines.append("")
    if data["notes"]:
        lines += ["Differences on purpose or by necessity:", "", *[f"- {note}" for note in data["notes"]], ""]
    lines += parity_suite.markdown(data.get("parity"))
    lines += _curve_table(sides)
    lines += _blocks_table(sides)
    if heatmaps is not None:
        lines += [f"![needle recall, PD and combined side by side]({heatmaps.name})", ""]
    elif heatmap_note:
        lines += [f"_{heatmap_note}_", ""]
    for side in SIDES:
        if needles.get(side) and needles[side].get("cells"):
            lines += [*needle_table(needles[side], title=f"Needle grid: {_label(side)}"), ""]
    lines += ["## Gates", "", "| phase | gate | status | seconds | summary |", "|---|---|---|---:|---|"]
    pd_suite = [g for g in sides["pd"]["gates"] if g.get("phase") != "original"]
    for gate in [*data["original_health"], *pd_suite, *sides["combined"]["gates"], *data.get("between", []),
                 *data["restore"]["gates"]]:
        lines.append(f"| {gate.get('phase', '')} | {gate['name']} | {status_mark(gate['status'])} | "
                     f"{gate['seconds']:.1f} | {md_cell(gate['summary'])} |")
    for side in SIDES:
        failures = failure_sections(sides[side]["gates"])
        if failures:
            lines += ["", f"## Failures on {_label(side)} (raw answers)", *failures]
    return "\n".join(lines).rstrip() + "\n"


def _occupancy_cell(side: Mapping[str, Any]) -> str:
    """Each server's mean and peak running requests (sglang's /metrics) while the soak ran."""
    soak = next((g for g in side["gates"] if g["name"] == "soak"), None)
    rows = ((soak or {}).get("evidence") or {}).get("occupancy") or []
    return "; ".join(f"{r['name']} ({r['role']}): " + (f"{r['mean_running']:g} running on average, peak "
                                                      f"{r['peak_running']:g}" if r["mean_running"] is not None
                                                      else f"not read ({r['error']})") for r in rows) or "-"


def _label(side: str) -> str:
    return "PD" if side == "pd" else "the combined server"


def _suite_cell(name: str) -> Any:
    def cell(side: Mapping[str, Any]) -> str:
        gate = next((g for g in side["gates"] if g["name"] == name), None)
        return f"{status_mark(gate['status'])}: {gate['summary']}" if gate else "not run"
    return cell


def _blocks_table(sides: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each soak block's figures, PD and combined side by side (the sides alternate block by block)."""
    blocks = {side: next((((g.get("evidence") or {}).get("blocks") or []) for g in sides[side]["gates"]
                          if g["name"] == "soak"), []) for side in SIDES}
    if not blocks["pd"] and not blocks["combined"]:
        return []
    lines = ["## Soak blocks (PD, then combined, in turn)", "", "| block | PD corrupted | combined corrupted |",
             "|---:|---:|---:|"]
    for i in range(max(len(blocks["pd"]), len(blocks["combined"]))):
        cells = [blocks[side][i] if i < len(blocks[side]) else None for side in SIDES]
        text = [f"{b['corrupted_sessions']} of {b['finished']}" if b else "-" for b in cells]
        lines.append(f"| {i + 1} | {text[0]} | {text[1]} |")
    return [*lines, ""]


def _curve_table(sides: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Recall per context length, one column per side: where recall breaks."""
    curves = {side: {p["context_tokens"]: p for p in sides[side]["recall_curve"]} for side in SIDES}
    lengths = sorted(set(curves["pd"]) | set(curves["combined"]))
    if not lengths:
        return []
    lines = ["## Recall curve", "", "| context (target tokens) | PD recall | combined recall |", "|---:|---:|---:|"]
    for n in lengths:
        cells = [curves[side].get(n) for side in SIDES]
        text = [f"{p['recalled']}/{p['cells']} ({p['fraction']:.0%})" if p else "-" for p in cells]
        lines.append(f"| {n} | {text[0]} | {text[1]} |")
    return [*lines, ""]
