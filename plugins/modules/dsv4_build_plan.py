#!/usr/bin/python
"""Documentation of the dsv4_build_plan action; the work is done on the controller by action/dsv4_build_plan.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_build_plan
short_description: Build the dsv4deploy rollout plan from the play's variables, on the controller
description:
  - Reads the deployment spec from the play's variables exactly as C(dsv4deploy validate) does (the
    variables named in the role C(dsv4_plan)'s argument specification), validates it, checks that
    every server fits its GPUs and renders each play host's release. It fails, listing every problem
    with its field, host and fix, before anything on a host changes.
  - Sets the fact named by O(fact) (default C(dsv4_plan)) for every host of the play; run it with
    C(run_once).
  - With O(release_spec) (the C(spec.json) of an installed release) it sets O(fact) to that release's
    gate targets instead (endpoint, workers, expected overrides), to verify a rollback.
  - With O(locate) it only reads and checks each play host's C(install_root) (nothing else of the
    inventory) and sets O(fact) (C(dsv4_plan) means C(dsv4_installed_roots)) to each host's install
    root, so stop, rollback and verify find the releases even after the inventory was edited.
  - It changes nothing in any mode; the plan is computed in check mode too.
  - With O(installed) it sets O(fact) to the view of an installed release, read from its own records
    (C(spec.json), and each host's C(services.json)) - its gate targets and each host's services, GPUs,
    ports and service manager - not from the inventory.
  - With O(derive=combined) and the O(release_spec) of a PD release it sets O(fact) to the isolation plan
    of C(playbooks/isolate.yml) - the original's gate targets and host layouts, the plan of a combined
    server with the same model, overrides, environment switches and CUDA graphs, the settings side by
    side, how the combined server had to differ, and the O(suite) to run. An unknown suite, a combined
    layout that cannot work or gate settings that cannot prove the requirement fail before any change.
options:
  release_spec:
    type: str
    description:
      - Text of an installed release's C(spec.json). When given, only its gate targets are computed.
  fact:
    type: str
    default: dsv4_plan
    description:
      - Name of the fact to set (with O(derive), C(dsv4_plan) means C(dsv4_isolation)).
  derive:
    type: str
    choices: [combined]
    description:
      - Plan the combined twin of the PD release in O(release_spec).
  release_id:
    type: str
    default: ""
    description:
      - Id of the release in O(release_spec) (with O(derive)).
  gpus:
    type: list
    elements: int
    default: []
    description:
      - GPUs of the combined server (with O(derive)); empty means the first prefill's.
  port:
    type: int
    default: 0
    description:
      - Port of the combined server (with O(derive)); 0 means the router's when it shares the prefill's
        host (clients keep their endpoint), else the prefill's.
  env:
    type: dict
    default: {}
    description:
      - Environment switches set on purpose on the combined server (with O(derive)); each is reported.
  suite:
    type: raw
    default: ""
    description:
      - Suites to run on each side (with O(derive)), a list or comma-separated - C(smoke), C(needle), C(soak).
  locate:
    type: bool
    default: false
    description:
      - Only read and check each play host's install root.
  installed:
    type: dict
    description:
      - An installed release - C(release_id), C(spec_files) and C(services_files) (host to the base64
        content of the release's C(spec.json) and C(services.json) there, as M(ansible.builtin.slurp)
        returns it; empty where the host has none) and C(install_roots) (host to install root).
  secrets:
    type: bool
    default: false
    description:
      - Set O(fact) to the secret env files of every play host instead of the plan - per host, absolute path
        to content (values of env variables named like C(*TOKEN*), C(*SECRET*), C(*KEY*), C(*PASSWORD*), or
        listed in C(secret_env)). Use it only in a task with C(no_log) (the dsv4_release role does).
  planned_spec:
    type: raw
    description:
      - With O(secrets), the (redacted) C(spec) of the plan being installed when it is not the inventory's own,
        such as the combined twin of isolate.yml; its secret values are taken from the inventory by digest.
  beside:
    type: bool
    default: false
    description:
      - The plan of the new release as C(dsv4_rollout_strategy=blue_green) runs it beside the serving one, in
        the other slot - workers on GPUs and ports shifted by C(dsv4_rollout_blue_green_gpu_offset) and
        C(dsv4_rollout_blue_green_port_offset), its router as the preview router, install root
        C(INSTALL_ROOT/slot-b) - instead of the inventory's own plan. Fails, naming field, host and fix, when
        the two do not fit a host at once.
  surge:
    type: bool
    default: false
    description:
      - The plan of the slot a C(dsv4_rollout_strategy=rolling) roll starts its surge workers in (a role's lone
        worker, such as the decode of a 2P1D) - each lone worker on the spare GPUs and shifted ports
        C(dsv4deploy.rollout.strategy.surge_places) gives, the other workers where they are (never started there),
        install root C(INSTALL_ROOT/slot-b).
  serving_spec:
    type: str
    description:
      - The serving release's C(spec.json) text; with O(planned_spec) (the new plan's C(spec)), only compares the
        production router's own settings of the two (policy, flags, port, launcher, env, API key, drain grace,
        C(dsv4deploy.rollout.router_change)) and returns RV(router_change); nothing else is planned. An empty text (no
        release serves) gives no change.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.controller
  - dsv4.deploy.dsv4deploy.read_only
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Validate the spec, check memory and render every host's release
  dsv4.deploy.dsv4_build_plan:
  run_once: true

- name: The isolation plan of the serving PD release
  dsv4.deploy.dsv4_build_plan:
    release_spec: "{{ spec_json.content | b64decode }}"
    derive: combined
    release_id: "{{ serving_release }}"
    suite: needle
    fact: dsv4_isolation
  run_once: true

- name: Gate targets of a release being restored
  dsv4.deploy.dsv4_build_plan:
    release_spec: "{{ spec_json.content | b64decode }}"
    fact: dsv4_target_plan
  run_once: true
"""

RETURN = r"""
router_change:
  description: With O(serving_spec), the router's changed fields and a line saying its restart is a short outage; empty
    when nothing of the router changes.
  returned: with serving_spec
  type: dict
  sample: {"fields": ["router.policy"], "line": "the production router's own settings change (router.policy): ..."}
ansible_facts:
  description: The fact named by O(fact).
  returned: success
  type: dict
  contains:
    dsv4_plan:
      description:
        - The plan - C(release_id), C(topology), C(endpoint), C(hosts_in_use), C(spec), C(memory) and, per
          host under C(hosts), its C(install_root), C(service_manager), C(gpus), C(ports), C(services),
          C(files) and C(content_hash). See docs/interfaces.md.
      returned: success
      type: dict
problems:
  description: Every problem found in the spec, one line each (field, host, fix).
  returned: when the spec is invalid
  type: list
  elements: str
  sample: ["index_topk (host gpu1): accepts 512 or 1024 only, got 2048; fix: set index_topk to 512 or 1024"]
"""
