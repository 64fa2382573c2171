#!/usr/bin/python
"""A per-host deploy lock with owner, controller process and phase, so two runs never interleave on a host
and a later run can tell a dead holder from a live one."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_lock
short_description: Take, update or release the dsv4deploy deploy lock of a host
description:
  - C(state=present) creates I(path) atomically (never empty, never half-written), recording I(owner),
    I(run_id), the controller host, process id and process start time, and the phase. When another run
    holds the lock it fails at once naming the holder (C(holder) in the result); the dsv4_lock action
    plugin then decides on the controller whether that holder is dead and retries with I(takeover_from).
    Taking a lock this run already holds succeeds.
  - C(state=phase) records the phase in progress (and the release it targets) in the lock this run holds.
  - C(state=absent) removes the lock when this run holds it (or when I(force) is set).
options:
  path: {type: path, required: true, description: Lock file.}
  state: {type: str, choices: [present, phase, absent], default: present, description: What to do.}
  owner: {type: str, default: '', description: Who runs (user@controller).}
  run_id: {type: str, required: true, description: Identifies this playbook run.}
  controller: {type: str, default: '', description: Host name of the controller running the playbook.}
  controller_pid: {type: int, default: 0, description: Process id of ansible-playbook on the controller.}
  controller_start: {type: str, default: '', description: Start time of that process (tells pid reuse apart).}
  phase: {type: str, default: locked, description: Phase in progress.}
  target: {type: str, default: '', description: Release the phase works towards.}
  takeover_from: {type: str, description: Replace the lock only if this run id (or '' for an empty file) holds it.}
  stale_after_s: {type: int, default: 7200, description: Age after which a lock of another controller is called stale.}
  force: {type: bool, default: false, description: Release even a lock held by another run.}
author: dsv4deploy
"""

import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

EMPTY = "(empty or unreadable)"


def _read(path: str) -> dict | None:
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


def _write_new(path: str, record: dict) -> bool:
    """Create `path` holding `record`, atomically and exclusively; False when it exists."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".deploy.lock-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)  # exclusive like O_EXCL, but the file appears with its content
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


def _replace(path: str, record: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".deploy.lock-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _retire(path: str, run_id: str) -> bool:
    """Move a dead run's lock aside, only if that run still holds it; False when another run got there first."""
    grave = f"{path}.retired-{os.getpid()}"
    try:
        os.rename(path, grave)
    except FileNotFoundError:
        return False
    moved = _read(grave) or {}
    if moved.get("run_id", "") != run_id:
        os.rename(grave, path)  # a live run replaced it between our read and the rename: put it back
        return False
    os.unlink(grave)
    return True


def describe(holder: dict) -> str:
    """One line naming the holder: who, which run, which controller process, which phase, since when."""
    if not holder:
        return EMPTY
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("since", 0))))
    where = f"pid {holder.get('controller_pid', '?')} on {holder.get('controller') or '?'}"
    return (f"{holder.get('owner') or 'unknown'} (run {holder.get('run_id')}, {where}, "
            f"phase {holder.get('phase', '?')}, since {since})")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "phase", "absent"], "default": "present"},
            "owner": {"type": "str", "default": ""},
            "run_id": {"type": "str", "required": True},
            "controller": {"type": "str", "default": ""},
            "controller_pid": {"type": "int", "default": 0},
            "controller_start": {"type": "str", "default": ""},
            "phase": {"type": "str", "default": "locked"},
            "target": {"type": "str", "default": ""},
            "takeover_from": {"type": "str"},
            "stale_after_s": {"type": "int", "default": 7200},
            "force": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    held = _read(path)
    if p["state"] == "absent":
        if held is None:
            module.exit_json(changed=False)
        if held.get("run_id") != p["run_id"] and not p["force"]:
            module.exit_json(changed=False, msg="lock held by another run; left in place", holder=held)
        if not module.check_mode:
            os.unlink(path)
        module.exit_json(changed=True)

    if p["state"] == "phase":
        if module.check_mode:  # a check run takes no lock, so it has none to update
            module.exit_json(changed=False, phase=p["phase"])
        if held is None or held.get("run_id") != p["run_id"]:
            module.fail_json(msg=f"this run no longer holds {path} (now: {describe(held or {})}); stopping here")
        _replace(path, {**held, "phase": p["phase"], "target": p["target"], "phase_since": time.time()})
        module.exit_json(changed=False, phase=p["phase"])

    if held is not None and held.get("run_id") == p["run_id"]:
        module.exit_json(changed=False, holder=held)
    takeover = held is not None and p["takeover_from"] is not None and held.get("run_id", "") == p["takeover_from"]
    if held is not None and not takeover:
        age = time.time() - float(held.get("since", 0) or os.path.getmtime(path))
        module.fail_json(msg=f"another run holds {path}: {describe(held)}", holder=held, age_s=int(age),
                         stale=age > p["stale_after_s"])
    if module.check_mode:
        module.exit_json(changed=True)
    record = {"owner": p["owner"], "run_id": p["run_id"], "since": time.time(), "host": os.uname().nodename,
              "controller": p["controller"], "controller_pid": p["controller_pid"],
              "controller_start": p["controller_start"], "phase": p["phase"], "target": p["target"],
              "phase_since": time.time()}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if takeover and not _retire(path, p["takeover_from"]):
            module.fail_json(msg=f"another run took over {path} a moment ago: {describe(_read(path) or {})}",
                             holder=_read(path) or {}, stale=False)
        if not _write_new(path, record):
            module.fail_json(msg=f"another run took {path} a moment ago: {describe(_read(path) or {})}",
                             holder=_read(path) or {}, stale=False)
    except OSError as exc:
        module.fail_json(msg=f"cannot take the deploy lock {path}: {exc.strerror or exc}; check that the install "
                             "root's folder exists and is writable (and not full); nothing was changed")
    module.exit_json(changed=True, holder=record, previous=held if takeover else None)


if __name__ == "__main__":
    main()
