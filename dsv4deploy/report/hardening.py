"""How exposed each rendered systemd unit is, per `systemd-analyze security --offline=true`.

The score (0 = locked down, 10 = fully exposed) and systemd's rating word (OK, MEDIUM, EXPOSED,
UNSAFE) go into the deploy report, so a change that loosens a unit shows in the numbers. Scored on
the machine that renders the units; without systemd-analyze there the report says so instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_OVERALL = re.compile(r"Overall exposure level for (?P<unit>\S+): (?P<score>\d+(?:\.\d+)?) (?P<rating>[A-Z]+)")


def unit_files(files: Mapping[str, str]) -> dict[str, str]:
    """The systemd units among a release's files (`units/NAME.service` -> text), by unit name."""
    return {Path(rel).name: text for rel, text in sorted(files.items())
            if rel.startswith("units/") and rel.endswith(".service")}


def score_units(units: Mapping[str, str], timeout_s: float = 30) -> dict[str, dict[str, Any]]:
    """`{unit: {"exposure": 2.5, "rating": "OK"}}` for each unit text, or `{"error": why}` per unit."""
    if not units:
        return {}
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return {name: {"error": "systemd-analyze not found on the controller"} for name in units}
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="dsv4-units-") as tmp:
        for name, text in units.items():
            path = Path(tmp) / name
            path.write_text(text)
            # --offline reads the file alone: no running systemd, no unit search path needed.
            proc = subprocess.run([tool, "security", "--offline=true", "--no-pager", str(path)],
                                  capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
            found = _OVERALL.search(proc.stdout)
            out[name] = ({"exposure": float(found["score"]), "rating": found["rating"]} if found else
                         {"error": (proc.stderr.strip() or proc.stdout.strip() or f"rc {proc.returncode}")[:300]})
    return out


def score_plan(plan: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Scores of every systemd unit of a plan, per host: `{host: {unit: score}}` (hosts without units left out)."""
    scores = {}
    for host, part in sorted((plan.get("hosts") or {}).items()):
        units = unit_files(part.get("files") or {})
        if units:
            scores[host] = score_units(units)
    return scores


def markdown(scores: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """A report section: one row per host and unit."""
    if not scores:
        return []
    lines = ["## Unit hardening", "", "`systemd-analyze security --offline=true` (0 = locked down, 10 = exposed).",
             "", "| host | unit | exposure | rating |", "|---|---|---:|---|"]
    for host, units in sorted(scores.items()):
        for unit, score in sorted(units.items()):
            if "error" in score:
                lines.append(f"| {host} | {unit} | - | not scored: {score['error']} |")
            else:
                lines.append(f"| {host} | {unit} | {score['exposure']:.1f} | {score['rating']} |")
    return lines
