#!/usr/bin/python
"""Documentation of the dsv4_worker_probe action (action/dsv4_worker_probe.py); it runs dsv4_worker_check."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_worker_probe
short_description: Run a gate's worker checks on the host of each worker the controller cannot reach
description:
  - Runs on every host (not C(run_once)), before the gate itself (M(dsv4.deploy.dsv4_gate), C(run_once)
    on the controller). For the workers of this host bound to an address the controller cannot count
    on reaching (a loopback or other address than the one Ansible reaches the host at), it runs
    M(dsv4.deploy.dsv4_worker_check) on the host - one module run per host and gate, whatever the
    number of tries.
  - Hosts reached through the local connection, and workers the controller reaches, are left to the
    gate; nothing runs on the host then.
  - Returns RV(probe) for the gate's O(dsv4.deploy.dsv4_gate#module:probes). Never fails for a failing
    server; a check that cannot run is reported per worker as unreachable, with the reason.
options:
  name:
    type: str
    required: true
    description:
      - Gate being run (only C(readiness) and C(config) check workers).
  plan:
    type: dict
    required: true
    description:
      - The plan (C(dsv4_plan)) or a restored release's targets.
  settings:
    type: dict
    default: {}
    description:
      - Overrides of the gate settings for this task.
attributes:
  action:
    support: full
    description: An action plugin; it runs M(dsv4.deploy.dsv4_worker_check) on the host when needed.
  check_mode:
    support: full
    description: Only reads from the servers.
  diff_mode:
    support: none
    description: Nothing is changed.
  platform:
    support: full
    platforms: posix
    description: Any host with Python 3.
notes:
  - Needs the Python package C(dsv4deploy) on the controller (C(pip install dsv4deploy)).
author: dsv4deploy
"""

EXAMPLES = r"""
- name: Worker checks on the hosts that reach them
  dsv4.deploy.dsv4_worker_probe:
    name: readiness
    plan: "{{ dsv4_plan }}"
  register: probe
"""

RETURN = r"""
probe:
  description: What was found on this host.
  returned: always
  type: dict
  contains:
    local:
      description: Whether the host is reached through the local connection (then nothing runs there).
      type: bool
      returned: always
    seconds:
      description: How long the checks took.
      type: float
      returned: always
    workers:
      description: Worker name to its evidence, as M(dsv4.deploy.dsv4_worker_check) returns it.
      type: dict
      returned: always
"""
