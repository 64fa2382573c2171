"""The deploy lock's record on a host (`{install_root}/deploy.lock`), shared by every module that takes it
or records a phase in it (standard library only)."""

from __future__ import annotations

import json
import time

from ansible_collections.dsv4.deploy.plugins.module_utils.files import write_atomic, write_new

PREFIX = ".deploy.lock-"


class LockLost(Exception):
    """The run no longer holds the lock it means to write to."""


def read(path: str) -> dict | None:
    """The lock record; None when there is no lock; {} when the file is empty or not a record."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) and data.get("run_id") else {}


def create(path: str, record: dict) -> bool:
    """Take the lock with `record`, atomically and exclusively; False when another record is there."""
    return write_new(path, json.dumps(record), prefix=PREFIX)


def describe(holder: dict) -> str:
    """One line naming the holder: who, which run, which controller process, which phase, since when."""
    if not holder:
        return "(empty or unreadable)"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("since", 0))))
    where = f"pid {holder.get('controller_pid', '?')} on {holder.get('controller') or '?'}"
    return (f"{holder.get('owner') or 'unknown'} (run {holder.get('run_id')}, {where}, "
            f"phase {holder.get('phase', '?')}, since {since})")


def record_phase(path: str, run_id: str, phase: str, target: str = "") -> dict:
    """Record `phase` (and the target release) in the lock run `run_id` holds, atomically; the new record.
    Raises LockLost when another run holds it now, or none does."""
    held = read(path)
    if not held or held.get("run_id") != run_id:
        now = describe(held) if held is not None else "no lock"
        raise LockLost(f"this run no longer holds {path} (now: {now}); stopping here")
    record = {**held, "phase": phase, "target": target, "phase_since": time.time()}
    write_atomic(path, json.dumps(record), prefix=PREFIX)
    return record
