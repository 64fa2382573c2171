#!/usr/bin/python
"""Documentation of the dsv4_run_gates action; the work is done on the controller by action/dsv4_run_gates.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_run_gates
short_description: Run dsv4deploy's verification gates (readiness to perf, and the bake) from the controller
description:
  - Runs the gate O(name) against the servers the plan names, from the controller. The task does not fail for
    a failing server - it returns RV(gates), RV(gate) and RV(passed), so the play decides on every host at once.
  - Several gates named together run at the same time (threads), e.g. C([needle, soak]).
  - "O(then) chains further groups in the same task, each started once every gate before it passed, e.g.
    O(name=[config, smoke]) then C([[needle, soak]]) - the needle and the soak start the moment smoke passes,
    with no task between them. The first group with a failed gate ends the chain (unless O(keep_going))."
  - Deadlines and the needle grid come from the play's variables named in C(GateSettings)
    (C(readiness_deadline_s), C(smoke_deadline_s), C(needle_deadline_s), C(needle_required_tokens),
    C(needle_lengths), C(needle_depths), C(needle_concurrency)); O(settings) overrides them for one task.
  - Once the needle gate is done (while the gates beside it, e.g. the soak, still run), its heatmap is drawn for
    the report into this run's local temp folder, where M(dsv4.deploy.dsv4_write_report) takes it.
  - Run it with C(run_once).
options:
  name:
    type: list
    elements: str
    required: true
    choices: [readiness, config, smoke, needle, soak, perf, bake, accuracy, parity]
    description:
      - Gate to run, or several to run at the same time; none of them may need another (readiness
        before all, smoke before needle, soak, perf, bake, accuracy and parity), else the task fails saying so.
  then:
    type: list
    elements: raw
    default: []
    description:
      - Gates to run after O(name), in order - each entry a gate, or a list of gates run at the same time (as
        O(name) takes them); an entry starts only once every gate before it passed.
  keep_going:
    type: bool
    default: false
    description:
      - Run every entry of O(then) even after a gate failed (an experiment's suite, where a failure is data).
  inconclusive:
    type: str
    default: fail
    choices: [fail, pass]
    description:
      - What an C(inconclusive) gate counts as - a gate that ran but whose evidence did not decide within its
        budget or deadline (the soak's sequential test says how many more sessions would decide). V(fail)
        refuses the release; V(pass) lets it through, still marked inconclusive in the report. The bake keeps
        its own rule (an inconclusive bake leaves the release serving, reported as not baked).
  plan:
    type: dict
    required: true
    description:
      - The plan (the C(dsv4_plan) fact, or a restored release's targets from M(dsv4.deploy.dsv4_build_plan)).
  logs:
    type: dict
    default: {}
    description:
      - Service name to the text its server logged since this start (the config gate reads them), besides
        the logs the readiness wait returned in O(probes) (each probe's C(logs)).
  api_key:
    type: str
    default: ""
    description:
      - API key the servers require, sent as a Bearer token. Never logged.
  api_key_problem:
    type: str
    default: ""
    description:
      - Why the API key could not be read (the C(api_key_problem) that M(dsv4.deploy.dsv4_worker_check) returns); when
        set, the task fails with it and runs no gate.
  settings:
    type: dict
    default: {}
    description:
      - "Overrides of the gate settings for this task, e.g. C({readiness_deadline_s: 15})."
  probes:
    type: dict
    default: {}
    description:
      - "What M(dsv4.deploy.dsv4_worker_probe) found on each host (C({host: probe})), for workers only their
        own host reaches."
  baseline:
    type: dict
    default: {}
    description:
      - "The perf gate's figures of the last good release (its C(evidence.figures)), which the perf gate
        judges against; empty means none, and the perf gate then records its figures without judging."
  parity_baseline:
    type: dict
    default: {}
    description:
      - "The parity gate's record of the last good release (its C(evidence.record)), which the parity gate
        compares with when every model-affecting setting and the topology are equal; empty means none, and the
        parity gate then records the outputs without comparing."
  bake:
    type: dict
    default: {}
    description:
      - "The bake's settings (C(dsv4deploy.gates.bake.BakeSettings): C(seconds), C(interval_s),
        C(failure_limit), C(inconclusive_limit), C(error_limit), C(min_requests), C(max_error_rate), C(max_abort_rate),
        C(max_transfer_failures), C(canary_tokens), C(probe_sessions), C(probe_deadline_s)), which the
        C(bake) gate runs with; empty or C(seconds) 0 skips the bake."
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.controller
attributes:
  check_mode:
    support: none
    description: Gates talk to running servers - in check mode none runs; each is returned as skipped
      ("check mode - not run") and the task says it was skipped.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Readiness of what the plan deployed
  dsv4.deploy.dsv4_run_gates:
    name: readiness
    plan: "{{ dsv4_plan }}"
    api_key: "{{ dsv4_gates_api_key }}"
    settings: {readiness_deadline_s: 60}
  run_once: true
  register: readiness

- name: Stop when it failed
  ansible.builtin.fail:
    msg: "{{ readiness.gate.summary }}"
  when: not readiness.passed
"""

RETURN = r"""
passed:
  description: Whether every gate named passed.
  returned: always
  type: bool
gates:
  description: Each gate's result and evidence, as in the report, in the order named (O(name), then O(then)),
    up to the group in which one failed.
  returned: always
  type: list
  elements: dict
gate:
  description: The first gate that failed, else the first of the last group run (of O(name) without O(then)); its
    result and evidence, as in the report.
  returned: always
  type: dict
  contains:
    name:
      description: Gate name.
      type: str
      returned: always
    status:
      description: C(passed), C(failed), C(skipped), or C(inconclusive) (the bake could not judge).
      type: str
      returned: always
    seconds:
      description: How long the gate took.
      type: float
      returned: always
    summary:
      description: One line saying what was found.
      type: str
      returned: always
      sample: "answer 'OK' after 1 try"
    evidence:
      description: What the gate saw (status codes, bodies, needle cells).
      type: dict
      returned: always
    hosts:
      description: The hosts the gate's evidence names (a worker by name or URL, the router's host); a gate
        asked through the router that names none names every host of its targets, the router's first.
      type: list
      elements: str
      returned: when the gate refused the release
"""
