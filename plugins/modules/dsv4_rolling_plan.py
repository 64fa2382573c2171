#!/usr/bin/python
"""Documentation of the dsv4_rolling_plan action; the work is done on the controller by action/dsv4_rolling_plan.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_rolling_plan
short_description: Check a rolling rollout against the serving release and hand on what its steps act on
description:
  - Runs on the controller (use C(run_once)). Refuses, naming field, host and fix, a change a roll cannot
    carry - C(dsv4deploy.rollout.rolling.compatibility_problems) between the serving release's C(spec.json) and
    the new plan (workers moved, added or removed; model-affecting settings, weights or the router's own
    settings changed), and any program file (supervisord program, systemd unit) that differs between the
    two releases, which would restart the workers still serving the old release.
  - Otherwise returns RV(roll) - each step's programs and GPUs per host, its entries
    for the router's worker API, its preview router (URL, port, command) and the gate targets that point
    the gates at the preview router with the step's new workers only; and the file the preview routers
    read the API key from (C(api_key_file)).
options:
  plan:
    type: dict
    required: true
    description:
      - The plan of the new release (C(dsv4_plan)), with its C(rollout) steps.
  serving:
    type: dict
    default: {}
    description:
      - Per host, the serving release's files as C(ansible.builtin.slurp) read them, each path relative to
        the release mapped to its base64 text - its C(spec.json) and program files. A file missing there is
        left out.
  table:
    type: dict
    description:
      - Only return RV(table), the report's table of which worker runs which release after each step
        (C(dsv4deploy.rollout.rolling.release_table)) - C(old) and C(new) (release ids), C(done) (steps that
        joined), C(failed) (the step that failed, if any) and C(restored) (the old release was put back on
        every worker).
  repair:
    type: dict
    description:
      - Only return RV(repair), what this run does about a roll whose controller died (its record
        C({install_root}/rolling.json) still on the hosts; C(dsv4deploy.rollout.rolling_record)) - C(records) (per host,
        the record as C(ansible.builtin.slurp) read it, empty where the host has none) and C(mode) (V(undo), a
        deploy - the old release put back step by step behind the production router; V(point), stop and
        rollback - every host pointed at the old release; V(refuse), verify and isolate).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.controller
attributes:
  check_mode:
    support: full
    description: Reads nothing on a host and changes nothing.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Check the roll and plan its steps
  dsv4.deploy.dsv4_rolling_plan:
    plan: "{{ dsv4_plan }}"
    serving: {gpu1: {spec.json: "{{ spec_b64 }}"}}
  run_once: true
"""

RETURN = r"""
roll:
  description: The roll's steps as the step tasks take them (C(steps)), the router's host and the preview
    router's port.
  returned: success, without O(table) or O(repair)
  type: dict
table:
  description: The report's markdown table, one line each (with O(table)).
  returned: with O(table)
  type: list
  elements: str
repair:
  description: With O(repair) - C(found) (a host has a record), and then C(old), C(new), C(at) (the step in
    progress), C(left), C(roll) (the steps as the record holds them), C(parts) (the step parts to put back,
    the furthest first), C(workers) (the worker API entries of the whole release), C(outage) (lone workers
    whose put back is an outage), C(table), C(hosts) and C(line) (one line saying what died and what is done).
  returned: with O(repair)
  type: dict
problems:
  description: Why the roll is refused, one line each (field, host, message, fix).
  returned: failure
  type: list
  elements: str
"""
