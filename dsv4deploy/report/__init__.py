"""Deploy reports: ``report.json`` for machines, ``report.md`` for people, and a needle heatmap.

``build_report`` turns gate results and release metadata into one JSON-able mapping;
``write_report`` writes it into a directory; ``update_latest`` points ``reports/latest`` at it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dsv4deploy.gates.recall_rule import RecallRule
from dsv4deploy.gates.result import GateResult, GateStatus
from dsv4deploy.report import fleet, hardening, perf_section, rollout_section
from dsv4deploy.report.heatmap import write_heatmap, write_perf_comparison

VERDICTS = ("promoted", "unchanged", "rolled_back", "failed")
JSON_NAME, MD_NAME, HEATMAP_NAME = "report.json", "report.md", "needle-heatmap.png"
PERF_PLOT_NAME = "perf-vs-previous.png"
LATEST = "latest"
MARKS = {"recalled": "✓", "missed": "✗", "error": "!", "inconclusive": "?", "absent": "·"}
FAILURES_SHOWN = 20  # per gate in the markdown; report.json keeps them all
# The gates run after a release's own, by the phase the gates role recorded.
PHASE_TITLES = {"rollback": "## Re-checks after the rollback (the release put back, not the one that failed)",
                "verify": "## Verify run"}


def build_report(
    *,
    release: str,
    previous_release: str | None,
    topology: str,
    verdict: str,
    endpoint: str | None,
    gates: Sequence[GateResult],
    metadata: dict[str, Any] | None = None,
    generated_at: datetime | None = None,
    router: str | None = None,
) -> dict[str, Any]:
    """The report as one JSON-able mapping; ``failed_gate`` is the first gate that failed."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    if not release:
        raise ValueError("release must be a release id")
    failed = next((g for g in gates if g.status in (GateStatus.FAILED, GateStatus.ERROR)), None)
    if failed is None and verdict in ("rolled_back", "failed"):  # refused as undecided (dsv4_gates_inconclusive)
        failed = next((g for g in gates if g.status is GateStatus.INCONCLUSIVE and g.name != "bake"), None)
    return {
        "release": release,
        "previous_release": previous_release,
        "topology": topology,
        "router": router,
        "verdict": verdict,
        "failed_gate": failed.name if failed else None,
        "endpoint": endpoint,
        "generated_at": (generated_at or datetime.now(UTC)).isoformat(timespec="seconds"),
        "gates": [g.model_dump(mode="json") for g in gates],
        "needle": needle_section(gates),
        "metadata": metadata or {},
    }


def needle_section(gates: Sequence[GateResult]) -> dict[str, Any] | None:
    needle = next((g for g in gates if g.name == "needle" and "cells" in g.evidence), None)
    if needle is None:
        return None
    keep = ("context_tokens", "prompt_tokens", "depth", "recalled", "error", "outcome", "recalled_trials",
            "asked_trials", "interval")
    return {
        "status": needle.status.value,
        "required_tokens": needle.evidence.get("required_tokens"),
        "rule": needle.evidence.get("rule"),
        "cells": [{k: cell.get(k) for k in keep} for cell in needle.evidence["cells"]],
        "curve": needle.evidence.get("curve", []),
    }


def heatmap_name(needle: dict[str, Any], release: str | None = None) -> str:
    """The file name of the heatmap of needle section `needle` for `release`, by what it shows (each cell's place
    and colour, the requirement, the verdict and release in its title): the same drawing has the same name
    wherever its cells came from."""
    shown = sorted((int(c["context_tokens"]), float(c["depth"]), 2 if c.get("recalled") else 0 if c.get("error") else 1)
                   for c in needle.get("cells") or [])
    said = [shown, needle.get("required_tokens"), needle.get("status"), release]
    digest = hashlib.sha256(json.dumps(said).encode()).hexdigest()[:24]
    return f"needle-heatmap-{digest}.png"


def _draw_needle(path: Path, needle: dict[str, Any], release: str | None) -> bool:
    return write_heatmap(path, needle["cells"], needle.get("required_tokens"), needle.get("status"), release)


def predraw_heatmap(directory: Path | str, gates: Sequence[GateResult], release: str | None = None) -> Path | None:
    """Draw the heatmap of the needle gate among `gates` into `directory` ahead of the report (the needle
    finishes while the soak still runs), under `heatmap_name`; None with no cells or no matplotlib.

    `write_report` given the same `directory` as `drawn` takes it instead of drawing it again."""
    needle = needle_section(gates)
    if not needle or not needle["cells"]:
        return None
    path = Path(directory) / heatmap_name(needle, release)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}-partial.png")  # savefig's format is by the suffix
    if not _draw_needle(tmp, needle, release):
        return None
    os.replace(tmp, path)  # whole or absent: a report never copies half a drawing
    return path


def write_report(directory: Path | str, data: dict[str, Any], drawn: Path | str | None = None) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and, with matplotlib, the heatmap; return their paths.

    With `drawn`, a folder where `predraw_heatmap` may have drawn this report's heatmap already: it is
    copied from there instead of being drawn (and matplotlib imported) now."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    needle = data.get("needle") or {}
    heatmap_note: str | None = None
    if needle.get("cells"):
        ready = Path(drawn) / heatmap_name(needle, data.get("release")) if drawn else None
        if ready is not None and ready.is_file():
            paths["heatmap"] = Path(shutil.copyfile(ready, out / HEATMAP_NAME))
        elif _draw_needle(out / HEATMAP_NAME, needle, data.get("release")):
            paths["heatmap"] = out / HEATMAP_NAME
        else:
            heatmap_note = "Heatmap skipped: matplotlib is not installed (install the `plot` extra)."
    compared = perf_section.comparison(data.get("gates", []))
    if compared and write_perf_comparison(out / PERF_PLOT_NAME, compared["current"], compared["previous"],
                                          release=data["release"], previous_release=compared["release"]):
        paths["perf_plot"] = out / PERF_PLOT_NAME
    paths["json"] = write_atomic(out / JSON_NAME, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    md = render_markdown(data, heatmap=paths.get("heatmap"), heatmap_note=heatmap_note,
                         perf_plot=paths.get("perf_plot"))
    paths["md"] = write_atomic(out / MD_NAME, md)
    return paths


def free_name(root: Path, name: str) -> str:
    """`name`, or `name-N` when `root/name` exists already (a re-run keeps the first report)."""
    candidate, n = name, 1
    while (root / candidate).exists():
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def update_latest(reports_root: Path | str, release: str) -> Path:
    """Point ``<reports_root>/latest`` at ``<reports_root>/<release>`` (relative, replaced atomically)."""
    root = Path(reports_root)
    if not (root / release).is_dir():
        raise ValueError(f"no report directory {root / release} to point {LATEST} at")
    link = root / LATEST
    if link.exists() and not link.is_symlink():
        raise ValueError(f"{link} exists and is not a symlink; refusing to replace it (this report is in "
                         f"{root / release}); fix: move {link} aside, and the next report links it to the newest")
    tmp = root / f".{LATEST}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(release)
    os.replace(tmp, link)  # readers see the old or the new link, never none
    return link


def render_markdown(data: dict[str, Any], heatmap: Path | None = None, heatmap_note: str | None = None,
                    perf_plot: Path | None = None) -> str:
    """The report a person reads: a summary line, the gates, the needle grid, raw failure bodies."""
    weak = data.get("weakened") or []
    mark = f"**WEAKENED** ({'; '.join(weak)}). " if weak else ""
    lines = [f"# Deploy report: {data['release']}", "", mark + summary_line(data), ""]
    lines += ["| | |", "|---|---|"]
    for label, key in (
        ("release", "release"),
        ("previous release", "previous_release"),
        ("serving now", "serving_release"),
        ("failed at", "failed_gate"),
        ("topology", "topology"),
        ("router", "router"),
        ("endpoint", "endpoint"),
        ("generated", "generated_at"),
    ):
        lines.append(f"| {label} | {md_cell(data.get(key) or '-')} |")
    for who, env in ((data.get("metadata") or {}).get("env_switches") or {}).items():
        switches = ", ".join(f"{k}={v}" for k, v in env.items())
        lines.append(f"| env switches added ({md_cell(who)}) | {md_cell(switches)} |")
    glance = fleet.markdown(data)
    if glance:
        lines += ["", *glance]
    # The gates of this release, then those run after it (the re-checks of the release put back by a rollback).
    phases = list((data.get("metadata") or {}).get("gate_phases") or [])
    gates = list(data.get("gates", []))
    for phase, title in (("deploy", "## Gates"), *((p, PHASE_TITLES.get(p, f"## Gates ({p})"))
                                                    for p in dict.fromkeys(phases) if p != "deploy")):
        chosen = [g for i, g in enumerate(gates) if (phases[i] if i < len(phases) else "deploy") == phase]
        if not chosen and phase != "deploy":
            continue
        lines += ["", title, "", "| gate | status | seconds | summary |", "|---|---|---:|---|"]
        for gate in chosen:
            lines.append(f"| {gate['name']} | {status_mark(gate['status'])} | {gate['seconds']:.1f} | "
                         f"{md_cell(gate['summary'])} |")
    needle = data.get("needle")
    if needle and needle.get("cells"):
        lines += ["", *needle_table(needle)]
        if heatmap is not None:
            lines += ["", f"![needle recall heatmap]({heatmap.name})"]
        elif heatmap_note:
            lines += ["", f"_{heatmap_note}_"]
    rollout = rollout_section.markdown(data)
    if rollout:
        lines += ["", *rollout]
    performance = perf_section.markdown(data.get("gates", []))
    if performance:
        lines += ["", *performance]
        if perf_plot is not None:
            lines += ["", f"![latency and throughput against the previous release]({perf_plot.name})"]
    if data.get("rolling_table"):
        lines += ["", "## Rolling: which worker runs which release", "", *data["rolling_table"]]
    scores = hardening.markdown(data.get("hardening") or {})
    if scores:
        lines += ["", *scores]
    failures = failure_sections(data.get("gates", []))
    if failures:
        lines += ["", "## Failures (raw answers)", *failures]
    for host, log in sorted((data.get("failure_logs") or {}).items()):
        # A service that did not start, or the servers a failed gate names: their log since the start.
        lines += ["", f"## Log since the start on {host}", *_fenced("\n".join(log))]
    return "\n".join(lines).rstrip() + "\n"


def summary_line(data: dict[str, Any]) -> str:
    """One line: what happened to the release and, if a gate failed, which and why."""
    release, verdict = data["release"], data["verdict"]
    gates = data.get("gates", [])
    failed = next((g for g in gates if g["name"] == data.get("failed_gate")), None)
    why = f"gate `{failed['name']}` failed: {failed['summary']}" if failed else ""
    if not why and data.get("failure"):
        # Failures outside the gates (preflight, switchover) carry their own message.
        why = f"`{data.get('failed_gate') or 'deploy'}` failed: {data['failure']}"
    match verdict:
        case "promoted":
            passed = sum(g["status"] == "passed" for g in gates)
            unsure = [g["name"] for g in gates if g["status"] == "inconclusive"]
            # An inconclusive bake is said on the first line: the release serves without being baked.
            note = f" INCONCLUSIVE: {', '.join(unsure)} (the release stays, not judged)." if unsure else ""
            return f"**PROMOTED** `{release}`: {passed} of {len(gates)} gates passed.{note}"
        case "unchanged":
            return f"**UNCHANGED** `{release}` was already active and healthy; nothing restarted."
        case "rolled_back":
            back = data.get("serving_release") or data.get("previous_release") or "the previous release"
            return f"**ROLLED BACK** from `{release}` to `{back}`: {why or 'see the gates below'}"
        case _:
            return f"**FAILED** `{release}`: {why or 'see the gates below'}"


def needle_table(needle: dict[str, Any], title: str = "Needle recall") -> list[str]:
    """Markdown table: target context length down, depth across, ✓/✗ per cell, recall per row."""
    cells = needle["cells"]
    lengths = sorted({c["context_tokens"] for c in cells})
    depths = sorted({c["depth"] for c in cells})
    by_key = {(c["context_tokens"], c["depth"]): c for c in cells}
    required = needle.get("required_tokens")
    lines = [f"## {title}", ""]
    if required:
        lines += [f"Every cell up to {required} real tokens must recall; longer rows are the recall curve.", ""]
    rule = needle.get("rule") or {}
    if rule.get("trials"):
        schedule = RecallRule(rule["trials"], rule["min_recalled"], tuple(rule.get("pass_early") or ())).schedule()
        lines += [f"A cell recalls on {schedule} independent trials, read in order (each "
                  f"cell: recalled/asked, 95% interval): a {rule['clean_recall']:.0%}-recall cell passes with "
                  f"{rule['cell_pass_at_clean']:.3f}, a {rule['bad_recall']:.0%} one with "
                  f"{rule['cell_pass_at_bad']:.3f}.", ""]
    header = " | ".join(f"depth {d:g}" for d in depths)
    lines.append(f"| context (target) | real tokens | {header} | recall |")
    lines.append("|---:|---:|" + ":-:|" * len(depths) + "---:|")
    for n in lengths:
        row = [by_key.get((n, d)) for d in depths]
        real = sorted(c["prompt_tokens"] for c in row if c and c.get("prompt_tokens") is not None)
        present = [c for c in row if c]
        recalled = sum(bool(c.get("recalled")) for c in present)
        marks = " | ".join(_mark(c) for c in row)
        real_text = str(real[len(real) // 2]) if real else "-"
        lines.append(f"| {n} | {real_text} | {marks} | {recalled}/{len(present)} |")
    lines += [
        "",
        f"{MARKS['recalled']} recalled, {MARKS['missed']} missed, {MARKS['error']} error, "
        f"{MARKS['inconclusive']} undecided, {MARKS['absent']} not in the grid; depth 0 is the start of the prompt.",
    ]
    return lines


def failure_sections(gates: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for gate in gates:
        failures = gate.get("evidence", {}).get("failures") or []
        if not failures:
            continue
        label = gate["status"] if gate["status"] in ("failed", "inconclusive", "error") else (
            f"{gate['status']}, after retries")
        lines += ["", f"### {gate['name']} ({label})"]
        for failure in failures[:FAILURES_SHOWN]:
            status = failure.get("status")
            head = f"**{failure.get('what', '?')}**: status {status if status is not None else 'none'}"
            if failure.get("error"):
                head += f", {failure['error']}"
            if failure.get("expected"):
                head += f", expected `{failure['expected']}`"
            lines += ["", head]
            body = str(failure.get("body") or "")
            if body:
                lines += ["", *_fenced(body)]
        if len(failures) > FAILURES_SHOWN:
            lines += ["", f"... and {len(failures) - FAILURES_SHOWN} more in {JSON_NAME}."]
    return lines


def _mark(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return MARKS["absent"]
    if cell.get("recalled"):
        mark = MARKS["recalled"]
    elif cell.get("outcome") == "inconclusive":
        mark = MARKS["inconclusive"]
    else:
        mark = MARKS["error"] if cell.get("error") else MARKS["missed"]
    interval = cell.get("interval")
    if cell.get("asked_trials") and interval:
        return f"{mark} {cell['recalled_trials']}/{cell['asked_trials']} ({interval[0]:.0%}-{interval[1]:.0%})"
    return mark


def status_mark(status: str) -> str:
    return {"passed": "✅ passed", "failed": "❌ failed", "skipped": "⏭ skipped",
            "inconclusive": "❔ inconclusive", "error": "⛔ error"}.get(status, status)


def md_cell(value: Any) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _fenced(body: str) -> list[str]:
    fence = "```"
    while fence in body:  # a body that contains a fence gets a longer one
        fence += "`"
    return [fence, body.rstrip("\n"), fence]


def write_atomic(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
