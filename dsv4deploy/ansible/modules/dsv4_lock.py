#!/usr/bin/python
"""A per-host deploy lock with owner and time, so two rollouts never interleave on one host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_lock
short_description: Take or release the dsv4deploy deploy lock of a host
description:
  - O(state=present) creates O(path) exclusively, recording O(owner), O(run_id) and the time. When the
    lock is held by another run it fails at once naming the holder; a lock older than O(stale_after_s)
    is reported as stale with the command that clears it. Taking a lock this run already holds succeeds.
  - O(state=absent) removes the lock when this run holds it (or when O(force) is set).
options:
  path:
    type: path
    required: true
    description:
      - Lock file.
  state:
    type: str
    choices: [present, absent]
    default: present
    description:
      - Take or release.
  owner:
    type: str
    default: ""
    description:
      - Who deploys (user@controller), shown to a second deploy.
  run_id:
    type: str
    required: true
    description:
      - Identifies this playbook run.
  stale_after_s:
    type: int
    default: 7200
    description:
      - Age in seconds after which a lock is called stale.
  force:
    type: bool
    default: false
    description:
      - Release even a lock held by another run.
attributes:
  check_mode:
    support: full
    description: Reports whether the lock could be taken or released; writes nothing.
  diff_mode:
    support: none
    description: The lock lives only for the run.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host.
author: dsv4deploy
"""

EXAMPLES = r"""
- name: Take the deploy lock
  dsv4.deploy.dsv4_lock:
    path: /opt/dsv4deploy/deploy.lock
    owner: "ops@controller"
    run_id: "{{ run_id }}"

- name: Release it
  dsv4.deploy.dsv4_lock:
    path: /opt/dsv4deploy/deploy.lock
    run_id: "{{ run_id }}"
    state: absent
"""

RETURN = r"""
holder:
  description: The lock's record (C(owner), C(run_id), C(since)) - this run's, or the other run's that holds it.
  returned: when a lock exists or was taken
  type: dict
stale:
  description: Whether the lock held by another run is older than O(stale_after_s).
  returned: when another run holds the lock
  type: bool
"""


import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "owner": {"type": "str", "default": ""},
            "run_id": {"type": "str", "required": True},
            "stale_after_s": {"type": "int", "default": 7200},
            "force": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    held = _read(path) if os.path.exists(path) else None
    if p["state"] == "absent":
        if held is None:
            module.exit_json(changed=False)
        if held.get("run_id") != p["run_id"] and not p["force"]:
            module.exit_json(changed=False, msg="lock held by another run; left in place", holder=held)
        if not module.check_mode:
            os.unlink(path)
        module.exit_json(changed=True)

    if held is not None:
        if held.get("run_id") == p["run_id"]:
            module.exit_json(changed=False, holder=held)
        age = time.time() - float(held.get("since", 0))
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(held.get("since", 0))))
        who = f"{held.get('owner') or 'unknown'} (run {held.get('run_id', '?')}, since {since})"
        if age > p["stale_after_s"]:
            module.fail_json(msg=f"stale deploy lock {path} held by {who}, {int(age)} s old: if no deploy is "
                                 f"running, clear it with `rm {path}` and retry",
                             holder=held, stale=True)
        module.fail_json(msg=f"another deploy holds {path}: {who}; wait for it to finish", holder=held, stale=False)
    if module.check_mode:
        module.exit_json(changed=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        module.fail_json(msg=f"another deploy took {path} a moment ago: {_read(path)}")
    record = {"owner": p["owner"], "run_id": p["run_id"], "since": time.time(), "host": os.uname().nodename}
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    module.exit_json(changed=True, holder=record)


if __name__ == "__main__":
    main()
