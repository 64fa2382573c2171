"""The deploy lock's record on a host (`{install_root}/deploy.lock`), shared by every module that takes it
or records a phase in it (standard library only)."""

from __future__ import annotations

import json
import os
import time

from ansible_collections.dsv4.deploy.plugins.module_utils import switch_record
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


def release(path: str, run_id: str, force: bool = False, check: bool = False) -> dict:
    """Remove the lock at `path` when run `run_id` holds it (or any holder, with `force`); what the module
    returns (C(changed); C(msg) and C(holder) when another run holds it and it stays; C(would) in check mode).
    No lock there changes nothing, so a second release of the same run is a no-op."""
    held = read(path)
    if held is None:
        return {"changed": False}
    if held.get("run_id") != run_id and not force:
        return {"changed": False, "msg": "lock held by another run; left in place", "holder": held}
    if check:
        return {"changed": True, "would": [f"remove the lock {path}"]}
    try:
        os.unlink(path)
    except FileNotFoundError:  # removed between the read and here: released all the same
        return {"changed": False}
    return {"changed": True}


class Refused(Exception):
    """The lock cannot be taken; `extra` (the holder, its age, whether it is stale) goes into the failed result."""

    def __init__(self, msg: str, **extra: object) -> None:
        super().__init__(msg)
        self.extra = extra


def _retire(path: str, run_id: str) -> bool:
    """Move a dead run's lock aside, only if that run still holds it; False when another run got there first."""
    grave = f"{path}.retired-{os.getpid()}"
    try:
        os.rename(path, grave)
    except FileNotFoundError:
        return False
    moved = read(grave) or {}
    if moved.get("run_id", "") != run_id:
        os.rename(grave, path)  # a live run replaced it between our read and the rename: put it back
        return False
    os.unlink(grave)
    return True


def take(path: str, record: dict, takeover_from: str | None = None, stale_after_s: int = 7200,
         check: bool = False) -> dict:
    """Take the lock at `path` for `record` (owner, run_id, the controller's identity, phase, target), or take
    over the lock of the dead run `takeover_from`; what the module returns (C(changed), C(holder), C(previous),
    in check mode C(would)). Taking a lock this run holds already changes nothing. Raises Refused naming the
    holder when another run holds it (or took it a moment ago), or when the lock cannot be written."""
    held = read(path)
    if held is not None and held.get("run_id") == record["run_id"]:
        return {"changed": False, "holder": held}
    takeover = held is not None and takeover_from is not None and held.get("run_id", "") == takeover_from
    if held is not None and not takeover:
        age = time.time() - float(held.get("since", 0) or os.path.getmtime(path))
        raise Refused(f"another run holds {path}: {describe(held)}", holder=held, age_s=int(age),
                      stale=age > stale_after_s)
    if check:
        would = f"take over the lock of run {held.get('run_id')}" if takeover else f"take the lock {path}"
        return {"changed": True, "would": [would]}
    now = time.time()
    record = {**record, "since": now, "host": os.uname().nodename, "phase_since": now}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if takeover and not _retire(path, str(takeover_from)):
            raise Refused(f"another run took over {path} a moment ago: {describe(read(path) or {})}",
                          holder=read(path) or {}, stale=False)
        if not create(path, record):
            raise Refused(f"another run took {path} a moment ago: {describe(read(path) or {})}",
                          holder=read(path) or {}, stale=False)
    except OSError as exc:
        raise Refused(f"cannot take the deploy lock {path}: {exc.strerror or exc}; check that the install "
                      "root's folder exists and is writable (and not full); nothing was changed") from None
    # A blue_green switch left in progress is repaired whatever the lock says (its record, switch_record.py).
    return {"changed": True, "holder": record, "previous": switch_record.as_previous(path, held if takeover else None)}
