#!/usr/bin/python
"""The record of a previous release kept warm after a blue_green switch, and what the next run does with it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_keep_record
short_description: Write, read or remove the record of a previous release kept warm after a blue_green switch
description:
  - After a blue_green switch with C(dsv4_rollout_keep_previous_s) above 0 the new release serves from the
    other slot ({root}/slot-b) while the previous one runs on at home, unregistered, for the window; this
    record says so (docs/strategies.md).
  - O(state=present) writes the record atomically; the window's end is the host's clock plus O(keep_s).
  - O(state=query) reads it and returns RV(action), what this run must do first -
    C(none) (no record), C(drop) (the slot no longer runs, O(slot_running) false - a run that died was
    repaired, so the home serves its active release; the record is stale), C(switch_back) (a rollback inside
    the window to the previous release), C(park) (a stop - the new release becomes the active one at home,
    nothing starts) or C(move_home) (anything else - the window is over or this run needs the home).
  - O(state=absent) removes the record.
  - With O(strategy=blue_green_hosts) the record is that strategy's (C(blue_green_hosts.json) on the router's host) -
    the old host set's workers run on, out of the production router, for the window; the same RV(action) names
    what the run does with them (C(switch_back) the router back to them, C(park) or C(move_home) stops them).
options:
  install_root:
    type: path
    required: true
    description: [The deployment's install root (home).]
  state:
    type: str
    choices: [present, query, absent]
    default: query
    description: [What to do.]
  record:
    type: dict
    default: {}
    description:
      - With O(state=present) - C(release), C(previous), C(slot_root), C(home_workers) and what moving home
        needs; C(until) is added.
  keep_s:
    type: int
    default: 0
    description: [With O(state=present), seconds the previous release stays warm.]
  phase:
    type: str
    default: deploy
    description: [With O(state=query), this run's phase (deploy, rollback, verify, stop, purge).]
  target:
    type: str
    default: ""
    description: [With O(state=query) and a rollback, the release asked for (empty - the previous one).]
  strategy:
    type: str
    choices: [blue_green, blue_green_hosts]
    default: blue_green
    description: [Whose record - blue_green's kept-warm slot, or blue_green_hosts' kept-warm old host set.]
  slot_running:
    type: bool
    default: true
    description: [With O(state=query), whether the other slot's services still run.]
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  check_mode:
    support: full
    description: Reads the record; a write or removal is only reported, nothing changes.
  diff_mode:
    support: none
    description: The result holds the record (RV(record)).
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Decide what a rollback does with a previous release kept warm
  dsv4.deploy.dsv4_keep_record:
    install_root: /opt/dsv4deploy
    state: query
    phase: rollback
    slot_running: true
  register: keep
"""

RETURN = r"""
record:
  description: The record (empty when there is none).
  type: dict
  returned: always
action:
  description: What this run does first (none, drop, switch_back, park, move_home).
  type: str
  returned: state=query
remaining_s:
  description: Seconds left in the window (0 when over).
  type: int
  returned: state=query
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils.files import write_atomic
from ansible_collections.dsv4.deploy.plugins.module_utils.layout import KEEP_HOSTS_RECORD, KEEP_RECORD

FILES = {"blue_green": KEEP_RECORD, "blue_green_hosts": KEEP_HOSTS_RECORD}


def record_path(root: str, strategy: str = "blue_green") -> str:
    """Where the strategy's record lives: beside state.json."""
    return os.path.join(root, FILES[strategy])


def read_record(root: str, strategy: str = "blue_green") -> dict:
    """The record, or {} when there is none; an unreadable one is reported, never guessed at."""
    try:
        with open(record_path(root, strategy), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict) or not data.get("release"):
        raise ValueError(f"{record_path(root, strategy)} is not a {strategy} record; fix: remove it after checking "
                         "which workers serve (the production router's GET /workers)")
    return data


def decide(record: dict, now: float, phase: str, target: str = "", slot_running: bool = True) -> str:
    """What a run in `phase` does first with the kept-warm record (see DOCUMENTATION)."""
    if not record:
        return "none"
    if not slot_running:
        return "drop"
    inside = now < float(record.get("until", 0))
    if phase.startswith("rollback") and inside and target in ("", record.get("previous", "")):
        return "switch_back"
    if phase in ("stop", "purge"):
        return "park"
    return "move_home"


def main() -> None:
    """Run the module."""
    module = AnsibleModule(
        argument_spec={
            "install_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "query", "absent"], "default": "query"},
            "record": {"type": "dict", "default": {}},
            "keep_s": {"type": "int", "default": 0},
            "phase": {"type": "str", "default": "deploy"},
            "target": {"type": "str", "default": ""},
            "slot_running": {"type": "bool", "default": True},
            "strategy": {"type": "str", "choices": list(FILES), "default": "blue_green"},
        },
        supports_check_mode=True,
    )
    p = module.params
    root, strategy = p["install_root"], p["strategy"]
    if p["state"] == "present":
        record = dict(p["record"], until=int(time.time()) + p["keep_s"])
        if not module.check_mode:
            write_atomic(record_path(root, strategy), json.dumps(record, indent=1, sort_keys=True) + "\n")
        module.exit_json(changed=True, record=record)
    try:
        record = read_record(root, strategy)
    except ValueError as e:
        module.fail_json(msg=str(e))
    if p["state"] == "absent":
        if record and not module.check_mode:
            os.unlink(record_path(root, strategy))
        module.exit_json(changed=bool(record), record=record)
    now = time.time()
    module.exit_json(
        changed=False, record=record,
        action=decide(record, now, p["phase"], p["target"], p["slot_running"]),
        remaining_s=max(0, int(float(record.get("until", 0)) - now)) if record else 0,
    )


if __name__ == "__main__":
    main()
