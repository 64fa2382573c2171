"""The record a roll leaves on each host (`{install_root}/rolling.json`) and what the next run repairs from it.

A roll (`dsv4_rollout_strategy: rolling`) writes the record on every host before its first step changes
anything, again as each step begins (`at`) and once a surge step's old lone workers leave the router
(`left`), and removes it when the roll ends, promoted or put back. A record still there means the run that
wrote it died mid-roll: some workers run the new release, some the old, a step's workers may be out of
the router or stopped, and a surge worker may be running in `{install_root}/slot-b` and registered with
the production router.

The next run **undoes** the roll rather than finishing it: the old release is the one that passed its
gates and served before, while the new one never finished its gates; undoing leaves exactly the state
the dead run began from, whatever the next run then does (a deploy of either release or of another one
rolls again from there, gated step by step). A deploy puts the old release back step by step behind the
production router (`undo_parts`), the way a failed roll is put back; stop and rollback only point every
host at the old release before they stop or restore it all (their router stops or restarts anyway).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dsv4deploy.rollout import rolling

RECORD_FILE = "rolling.json"
# A record's keys (roles/dsv4_rolling/tasks/record.yml writes it): `old` and `new` (release ids),
# `at` (the step in progress, 0 before the first), `left` (that step's old lone workers left the router),
# `roll` (the steps as the step tasks take them, dsv4_rolling_plan's) and `steps` (as planned, for the table).


def merge(found: Mapping[str, str | Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The roll as far as any host got, from each host's record (JSON text or parsed; None or empty where
    the host has none): the furthest step, and `left` only when a host recorded it at that step.
    None when no host has a record. Records of two different rolls are refused (ValueError)."""
    records = []
    for host, raw in sorted(found.items()):
        if not raw:
            continue
        try:
            rec = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except ValueError as exc:
            raise ValueError(f"{RECORD_FILE} on {host} is not a roll's record ({exc}); fix: remove it once "
                             "no run is alive") from exc
        records.append((host, rec))
    if not records:
        return None
    rolls = {(r["old"], r["new"]) for _, r in records}
    if len(rolls) > 1:
        named = ", ".join(f"{a} -> {b}" for a, b in sorted(rolls))
        raise ValueError(f"the hosts' {RECORD_FILE} name different rolls ({named}): fix: put one release back "
                         "everywhere by hand (rollback.yml -e dsv4_rollback_release=ID)")
    at = max(int(r.get("at") or 0) for _, r in records)
    furthest = [r for _, r in records if int(r.get("at") or 0) == at]
    merged = dict(furthest[0])
    merged["at"], merged["left"] = at, any(bool(r.get("left")) for r in furthest)
    merged["hosts"] = [h for h, _ in records]
    return merged


def undo_parts(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What a deploy puts back on the old release, one step part at a time, the furthest step first: every
    worker of the steps up to `at`, except, in the step in progress, a surge step's lone workers whose old
    one never left (they still run the old release and serve). A lone worker that already moved (its
    surge step before `at`, or `left`) is put back in place like the others (`outage_paths`)."""
    at, left = int(rec["at"]), bool(rec.get("left"))
    out = []
    for step in reversed([s for s in rec["roll"]["steps"] if int(s["step"]) <= at]):
        part = step
        if step.get("surge") and int(step["step"]) == at and not left:
            part = step["rest"]
        if part["paths"]:
            out.append(part)
    return out


def outage_paths(rec: Mapping[str, Any]) -> list[str]:
    """The lone workers whose put back leaves their role without a worker while they reload: the new
    release runs them at home and no surge worker serves beside them any more (their step is done)."""
    at = int(rec["at"])
    return [p for s in rec["roll"]["steps"] if s.get("surge") and int(s["step"]) < at for p in s["surge"]["paths"]]


def release_workers(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The worker API entries of every worker of the release at home (each step's, in step order): what the
    production router lists once the roll is undone."""
    seen: dict[str, dict[str, Any]] = {}
    for step in rec["roll"]["steps"]:
        for entry in step["api"]:
            seen.setdefault(entry["url"], dict(entry))
    return list(seen.values())


def table(rec: Mapping[str, Any]) -> list[str]:
    """Which worker ran which release when the run died (the report's table, the step in progress last)."""
    at = int(rec["at"])
    lines = rolling.release_table(rec["steps"], rec["old"], rec["new"], max(at - 1, 0), at or None)
    return [line.replace(f"| {at} (failed) |", f"| {at} (run died) |") for line in lines]


def repair(found: Mapping[str, str | Mapping[str, Any] | None], mode: str) -> dict[str, Any]:
    """What the next run does about a dead roll: `found` is each host's record, `mode` `undo` (a deploy:
    step by step behind the production router) or `point` (stop and rollback: every host pointed at the
    old release, which they then stop or restore). `found` false when no host has a record."""
    rec = merge(found)
    if rec is None:
        return {"found": False}
    parts = undo_parts(rec) if mode == "undo" else []
    outage = outage_paths(rec) if mode == "undo" else []
    how = (f"put back step by step behind the production router ({', '.join(p for s in parts for p in s['paths'])})"
           if parts else "no worker had left the old release") if mode == "undo" else \
        "every host pointed at it before this run acts on it"
    line = (f"a roll from {rec['old']} to {rec['new']} died at step {rec['at']} (hosts {', '.join(rec['hosts'])}): "
            f"release {rec['old']} is {how}; the surge slot and the preview router are stopped"
            + (f"; {', '.join(outage)} had moved home alone in their role: their role has no worker while "
               "they reload (an outage)" if outage else ""))
    return {"found": True, "old": rec["old"], "new": rec["new"], "at": rec["at"], "left": rec["left"],
            "roll": rec["roll"], "parts": parts, "workers": release_workers(rec), "outage": outage,
            "table": table(rec), "line": line, "hosts": rec["hosts"]}
