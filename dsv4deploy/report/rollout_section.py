"""The report's rollout section: how the release replaced the serving one and what clients saw.

`rollout_section` picks, from the plan's `rollout` part (dsv4deploy.rollout.strategy), what a reader needs -
the strategy, why, and a replacement of the production router (a short outage, by the changed field) -
and `markdown` shows it with the continuous client's figures (dsv4deploy.rollout.downtime) taken during the run.
"""

from __future__ import annotations

from typing import Any


def rollout_section(rollout: dict[str, Any] | None) -> dict[str, Any]:
    """The report's `rollout`: strategy, why, and the router's changed fields (empty when none)."""
    rollout = rollout or {}
    return {"strategy": rollout.get("strategy") or "recreate", "why": rollout.get("why") or "",
            "router_change": rollout.get("router_change") or {}}


def downtime_line(figures: dict[str, Any]) -> str:
    """`sent 120, failed 0, longest gap between answers 0.21 s over 42.0 s`."""
    return (f"sent {figures.get('sent', 0)}, failed {figures.get('failed', 0)}, longest gap between answers "
            f"{float(figures.get('longest_gap_s') or 0):.2f} s over {float(figures.get('seconds') or 0):.1f} s")


def markdown(data: dict[str, Any]) -> list[str]:
    """The `## Rollout` lines of report.md (none for a report without a rollout or figures)."""
    rollout, figures = data.get("rollout") or {}, data.get("downtime") or {}
    if not rollout and not figures:
        return []
    lines = ["## Rollout", "", "| | |", "|---|---|"]
    if rollout:
        lines.append(f"| strategy | {_cell(rollout.get('strategy') or 'recreate')} |")
    change = rollout.get("router_change") or {}
    if change.get("fields"):
        lines.append(f"| production router replaced | {_cell(change.get('line') or ', '.join(change['fields']))} |")
    if figures:
        lines.append(f"| what clients saw (continuous client on {_cell(figures.get('endpoint') or 'the endpoint')}) "
                     f"| {_cell(downtime_line(figures))} |")
    else:
        lines.append("| what clients saw | not measured (dsv4_rollout_measure_downtime) |")
    failures = figures.get("failures") or []
    if failures:
        lines += ["", "First failed requests (status 0: no answer):", "", *[f"- {_cell(f)}" for f in failures]]
    return lines


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
