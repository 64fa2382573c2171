"""blue_green's on-host record of a switch in progress (standard library only).

From the moment the production router may hold the other slot's workers until it holds only the
release at home again (or the keep record takes over), every host keeps `<install_root>/blue_green_switch.json`
beside its deploy lock. A controller that crashed and rebooted cannot be called dead, so its lock is
removed by hand; the record still says a switch was in progress, and the next run repairs it whatever the
lock says: `as_previous` makes a record without a dead run's lock read as that run's lock.
"""

from __future__ import annotations

import json
import os

RECORD = "blue_green_switch.json"
PHASE = "blue_green: switch"


def record_path(lock_path: str) -> str:
    """Where the switch record of the install root holding `lock_path` lives."""
    return os.path.join(os.path.dirname(lock_path), RECORD)


def read(lock_path: str) -> dict | None:
    """The switch record beside `lock_path` (None when there is none; an unreadable one still counts)."""
    path = record_path(lock_path)
    if not os.path.lexists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        record = {}
    return record if isinstance(record, dict) else {}


def as_previous(lock_path: str, previous: dict | None) -> dict | None:
    """The dead run this one repairs: `previous` (the lock it took over) or, when that says nothing of
    blue_green, the switch record left beside the lock, read as that run's lock in phase PHASE."""
    if previous and str(previous.get("phase", "")).startswith("blue_green"):
        return previous
    record = read(lock_path)
    if record is None:
        return previous
    return {**(previous or {}), "run_id": str(record.get("run_id") or "?"), "target": str(record.get("target") or ""),
            "phase": PHASE, "from_record": record_path(lock_path)}
