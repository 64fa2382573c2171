#!/usr/bin/python
"""A per-host deploy lock with owner, controller process and phase, so two runs never interleave on a host
and a later run can tell a dead holder from a live one."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_lock
short_description: Take, update or release the dsv4deploy deploy lock of a host
description:
  - O(state=present) creates O(path) atomically (never empty, never half-written), recording O(owner),
    O(run_id), the controller host, process id and process start time, and the phase. When another run
    holds the lock it fails at once naming the holder (RV(holder)); the action of the same name then
    decides on the controller whether that holder is dead (the same controller - host name, boot
    and process namespace - with its process gone or replaced, or an empty lock file) and takes its
    lock over with O(takeover_from), saying whose run died and in which phase. A holder on another
    controller cannot be checked from here - the failure names it and says how to clear it. Taking a
    lock this run already holds succeeds.
  - O(state=phase) records the phase in progress (and the release it targets) in the lock this run holds.
  - O(state=absent) removes the lock when this run holds it (or when O(force) is set).
options:
  path:
    type: path
    required: true
    description:
      - Lock file.
  state:
    type: str
    choices: [present, phase, absent]
    default: present
    description:
      - What to do.
  owner:
    type: str
    default: ""
    description:
      - Who runs (user@controller), shown to a second run.
  run_id:
    type: str
    required: true
    description:
      - Identifies this playbook run.
  controller:
    type: str
    default: ""
    description:
      - Host name of the controller running the playbook (the action fills it in).
  controller_pid:
    type: int
    default: 0
    description:
      - Process id of ansible-playbook on the controller (the action fills it in).
  controller_start:
    type: str
    default: ""
    description:
      - Start time of that process, which tells a reused pid apart (the action fills it in).
  controller_boot:
    type: str
    default: ""
    description:
      - The controller's boot and process namespace, which tell apart two controllers of the same host name
        (cloned VMs or containers; the action fills it in).
  phase:
    type: str
    default: locked
    description:
      - Phase in progress.
  target:
    type: str
    default: ""
    description:
      - Release the phase works towards.
  takeover_from:
    type: str
    description:
      - Replace the lock only if this run id (or an empty string, for an empty file) holds it.
  stale_after_s:
    type: int
    default: 7200
    description:
      - Age in seconds after which a lock of another controller is called stale.
  force:
    type: bool
    default: false
    description:
      - Release even a lock held by another run.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  action:
    support: full
    description: The action of the same name adds the controller's identity and takes over dead holders' locks.
  check_mode:
    support: full
    description: Reports whether the lock could be taken or released; writes nothing.
  diff_mode:
    support: none
    description: The lock lives only for the run.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Take the deploy lock
  dsv4.deploy.dsv4_lock:
    path: /opt/dsv4deploy/deploy.lock
    owner: "ops@controller"
    run_id: "{{ run_id }}"

- name: Say which phase this run is in
  dsv4.deploy.dsv4_lock:
    path: /opt/dsv4deploy/deploy.lock
    run_id: "{{ run_id }}"
    state: phase
    phase: switchover
    target: "{{ dsv4_plan.release_id }}"

- name: Release it
  dsv4.deploy.dsv4_lock:
    path: /opt/dsv4deploy/deploy.lock
    run_id: "{{ run_id }}"
    state: absent
"""

RETURN = r"""
holder:
  description: The lock's record (C(owner), C(run_id), C(controller), C(phase), C(since), ...) - this run's,
    or that of the run that holds it.
  returned: when a lock exists or was taken
  type: dict
previous:
  description: The record of the dead run whose lock was taken over.
  returned: O(state=present) when the lock was taken
  type: dict
phase:
  description: The phase recorded.
  returned: O(state=phase)
  type: str
age_s:
  description: Age of the lock another run holds.
  returned: when another run holds the lock
  type: int
would:
  description: In check mode, what a real run would do (take the lock, or take over a dead run's).
  returned: check mode, when the lock would be taken or removed
  type: list
  elements: str
stale:
  description: Whether the lock another run holds is older than O(stale_after_s).
  returned: when another run holds the lock
  type: bool
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import lock as deploy_lock


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
            "controller_boot": {"type": "str", "default": ""},
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
    if p["state"] == "absent":
        module.exit_json(**deploy_lock.release(path, p["run_id"], p["force"], module.check_mode))

    if p["state"] == "phase":
        if module.check_mode:  # a check run takes no lock, so it has none to update
            module.exit_json(changed=False, phase=p["phase"])
        try:
            deploy_lock.record_phase(path, p["run_id"], p["phase"], p["target"])
        except deploy_lock.LockLost as exc:
            module.fail_json(msg=str(exc))
        module.exit_json(changed=False, phase=p["phase"])

    record = {"owner": p["owner"], "run_id": p["run_id"], "controller": p["controller"],
              "controller_pid": p["controller_pid"], "controller_start": p["controller_start"],
              "controller_boot": p["controller_boot"], "phase": p["phase"], "target": p["target"]}
    try:
        module.exit_json(**deploy_lock.take(path, record, p["takeover_from"], p["stale_after_s"], module.check_mode))
    except deploy_lock.Refused as exc:
        module.fail_json(msg=str(exc), **exc.extra)


if __name__ == "__main__":
    main()
