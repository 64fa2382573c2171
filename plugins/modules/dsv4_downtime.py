#!/usr/bin/python
"""Documentation of the dsv4_downtime action; the controller does the work (action/dsv4_downtime.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_downtime
short_description: Start or stop the continuous client that measures what clients see during a rollout
description:
  - O(state=started) starts C(python -m dsv4deploy.rollout.downtime) on the controller, a process of its own that
    sends small chat completions to O(endpoint) (the production router) one after another until stopped,
    and returns RV(client). It stops by itself when the C(ansible-playbook) run that started it is gone,
    or after O(max_s).
  - O(state=stopped) stops the client in O(client) and returns its figures (RV(downtime)) - requests
    sent and failed, the longest gap between two successful answers.
  - Run it with C(run_once). The client is a measurement on the controller, not a change to a host.
options:
  state:
    type: str
    required: true
    choices: [started, stopped]
    description:
      - Start a client, or stop one.
  endpoint:
    type: str
    default: ""
    description:
      - With O(state=started), the URL asked (C(/v1/chat/completions) under it).
  model:
    type: str
    default: ""
    description:
      - With O(state=started), the served model name.
  api_key:
    type: str
    default: ""
    description:
      - The endpoint's API key (handed to the client in its environment, never on its command line).
  concurrency:
    type: int
    default: 1
    description:
      - Requests in flight at once.
  max_s:
    type: int
    default: 7200
    description:
      - The client stops after this many seconds in any case.
  client:
    type: dict
    default: {}
    description:
      - With O(state=stopped), RV(client) of the start.
attributes:
  check_mode:
    support: none
    description: In check mode no client is started or stopped.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.controller
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Ask the production router throughout the rollout
  dsv4.deploy.dsv4_downtime:
    state: started
    endpoint: "{{ dsv4_plan.router_url }}"
    model: "{{ dsv4_plan.served_model_name }}"
  run_once: true
  register: client

- name: Stop it and take its figures
  dsv4.deploy.dsv4_downtime:
    state: stopped
    client: "{{ client.client }}"
  run_once: true
"""

RETURN = r"""
client:
  description: With O(state=started), what O(state=stopped) needs (process id, figures file, work directory).
  returned: success
  type: dict
  sample: {"pid": 4242, "out": "/tmp/dsv4-downtime-x1/figures.json", "dir": "/tmp/dsv4-downtime-x1"}
downtime:
  description: With O(state=stopped), the client's figures; empty when it left none.
  returned: success
  type: dict
  sample: {"sent": 120, "failed": 0, "longest_gap_s": 0.21, "seconds": 42.0, "failures": []}
"""
