#!/usr/bin/python
"""Documentation of the dsv4_isolate_look action; the controller does the work (action/dsv4_isolate_look.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_isolate_look
short_description: The isolation soak's interim look after a round (PD block, then combined block)
description:
  - Pools each side's soak blocks so far and judges them at the level this look may spend (the
    alternating group-sequential design of docs/evidence.md, "Isolation"); says whether the experiment
    has decided (a verdict other than C(inconclusive), the last round, or a side that measured nothing).
  - Changes nothing; runs on the controller.
options:
  gates:
    type: list
    elements: dict
    required: true
    description:
      - Every gate result of the run so far, each with its C(phase) (C(pd), C(combined)).
  rounds:
    type: int
    required: true
    description:
      - Rounds of the design (blocks a side).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.controller
  - dsv4.deploy.dsv4deploy.read_only
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Look at the soak counts after this round
  dsv4.deploy.dsv4_isolate_look:
    gates: "{{ dsv4_gates_outcome.results }}"
    rounds: 2
  run_once: true
  register: look
"""

RETURN = r"""
decided:
  description: The experiment stops here (decided, the budget spent, or a side measured nothing).
  returned: always
  type: bool
verdict:
  description: The soak verdict at this look (C(inconclusive) while undecided).
  returned: always
  type: str
look:
  description: The look's number (blocks a side so far).
  returned: always
  type: int
significance:
  description: The level this look spends.
  returned: always
  type: float
"""
