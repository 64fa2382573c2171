#!/usr/bin/python
"""Documentation of the dsv4_isolate_report action; the controller does the work (action/dsv4_isolate_report.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_isolate_report
short_description: Write the isolation report (PD versus combined) on the controller and point C(latest) at it
description:
  - Writes C(REPORTS_DIR/TIMESTAMP/report.json) and C(report.md) (and C(needle-heatmaps.png), the two
    needle heatmaps side by side, with the C(plot) extra) and points C(REPORTS_DIR/latest) at them.
  - The verdict comes from the gate results of each side - C(pd_specific) (fails in PD, passes combined),
    C(shared_path) (fails in both), C(clean) (passes both) or C(inconclusive), always with why.
options:
  suite:
    type: list
    elements: str
    required: true
    description:
      - Suites run on each side.
  original:
    type: dict
    required: true
    description:
      - Gate targets of the release that served (C(release_id), C(endpoint)).
  combined:
    type: dict
    default: {}
    description:
      - Plan of the temporary combined release (empty when the run was refused early).
  gates:
    type: list
    elements: dict
    default: []
    description:
      - Every gate result of the run, each with its C(phase) - C(original), C(pd), C(combined), C(restore).
  settings:
    type: list
    elements: dict
    default: []
    description:
      - What each side runs, side by side (rows C(setting), C(pd), C(combined), C(same)).
  notes:
    type: list
    elements: str
    default: []
    description:
      - How the combined server had to differ, on purpose or by necessity.
  pd_error:
    type: str
    default: ""
    description:
      - Why the PD side stopped early.
  combined_error:
    type: str
    default: ""
    description:
      - Why the combined side stopped early (a combined server that never started).
  restored:
    type: bool
    required: true
    description:
      - The original release is back and verified (readiness, smoke).
  restore_error:
    type: str
    default: ""
    description:
      - Why the restore failed.
  manual_steps:
    type: str
    default: ""
    description:
      - What an operator must do by hand after a failed restore.
  refused:
    type: str
    default: ""
    description:
      - Why the run stopped before changing anything.
  soak_rounds:
    type: int
    default: 1
    description:
      - Rounds of the alternating soak design; each side's soak blocks are pooled and judged at the level of
        the look they reached (see docs/evidence.md, "Isolation").
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.report
  - dsv4.deploy.dsv4deploy.controller
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Report the experiment
  dsv4.deploy.dsv4_isolate_report:
    reports_dir: reports/isolate
    suite: "{{ dsv4_isolation.suite }}"
    original: "{{ dsv4_isolation.original }}"
    combined: "{{ dsv4_isolation.combined }}"
    gates: "{{ dsv4_gates_outcome.results }}"
    settings: "{{ dsv4_isolation.settings }}"
    notes: "{{ dsv4_isolation.notes }}"
    restored: true
  run_once: true
"""

RETURN = r"""
report:
  description:
    - The report - C(verdict), C(why), C(status) (C(ok), C(failed) when the restore failed, C(refused)),
      C(restored), C(serving_release), C(sides) (C(pd) and C(combined), each with its gates, C(recall_curve)
      and C(recall_breaks_at)), C(settings), C(notes). See docs/interfaces.md.
  returned: always
  type: dict
headline:
  description: One line - the verdict and why, and what serves now.
  returned: always
  type: str
  sample: "**PD_SPECIFIC**: fails in PD (...) and passes on the combined server with the same settings"
paths:
  description: Files written.
  returned: always
  type: list
  elements: str
"""
