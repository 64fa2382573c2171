#!/usr/bin/python
"""Documentation of the dsv4_write_report action; the work is done on the controller by action/dsv4_write_report.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_write_report
short_description: Write a dsv4deploy deploy report on the controller and point C(latest) at it
description:
  - Writes C(REPORTS_DIR/RELEASE/report.json) and C(report.md) (and C(heatmap.png) with the C(plot) extra)
    and points C(REPORTS_DIR/latest) at them. A release that already has a report gets C(RELEASE-2), ...
  - Shows C(report.md) in the play's output as it writes it.
  - The needle heatmap drawn ahead by M(dsv4.deploy.dsv4_run_gates) (once the needle gate is done, while the gates
    beside it still run) into this run's local temp folder is copied from there; one for other cells is not
    used, and the heatmap is drawn here then.
options:
  verdict:
    type: str
    required: true
    choices: [promoted, unchanged, rolled_back, failed]
    description:
      - Outcome of the run.
  plan:
    type: dict
    required: true
    description:
      - The plan or the gate targets the report describes.
  release:
    type: str
    default: ""
    description:
      - Release deployed (default the plan's).
  previous_release:
    type: str
    default: ""
    description:
      - Release that was active before.
  serving_release:
    type: str
    default: ""
    description:
      - Release serving after the run.
  failed_gate:
    type: str
    default: ""
    description:
      - Gate or stage that failed.
  failure:
    type: str
    default: ""
    description:
      - One line saying what failed.
  gates:
    type: list
    elements: dict
    default: []
    description:
      - Gate results in order (RV(dsv4.deploy.dsv4_run_gates#module:gate) of each gate, with its C(phase)).
  failure_logs:
    type: dict
    default: {}
    description:
      - "Per host, the log lines of a service that did not start, or the last log lines on the hosts a failed gate
        names (C({host: [lines]}))."
  cause:
    type: dict
    default: {}
    description:
      - Why a failed run failed, as the rollout names it (C(stage), C(message), C(task), C(gate), C(hosts), C(logs),
        C(fix)); written as report.json's C(cause).
  rolling_table:
    type: list
    elements: str
    default: []
    description:
      - A rolling rollout's markdown table of which worker runs which release after each step.
  downtime:
    type: dict
    default: {}
    description:
      - The continuous client's figures during the rollout (RV(dsv4.deploy.dsv4_downtime#module:downtime)),
        shown in the report's C(Rollout) section; empty when none were measured.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.report
  - dsv4.deploy.dsv4deploy.controller
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Write the report of a promoted release
  dsv4.deploy.dsv4_write_report:
    reports_dir: reports
    verdict: promoted
    plan: "{{ dsv4_plan }}"
    serving_release: "{{ dsv4_plan.release_id }}"
    gates: "{{ dsv4_gates_outcome.results }}"
  run_once: true
"""

RETURN = r"""
paths:
  description: Files written.
  returned: always
  type: list
  elements: str
  sample: ["/home/ops/site/reports/20261129T101500Z-0123456789/report.json"]
report:
  description: The report as written to C(report.json).
  returned: always
  type: dict
"""
