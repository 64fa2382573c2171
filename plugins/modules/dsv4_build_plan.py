#!/usr/bin/python
"""Documentation of the dsv4_build_plan action; the work is done on the controller by action/dsv4_build_plan.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_build_plan
short_description: Build the dsv4deploy rollout plan from the play's variables, on the controller
description:
  - One job per O(state), each with one fact (named by O(fact); run it with C(run_once), so every host of the
    play shares it). It changes nothing in any state, check mode included, and fails - listing every problem
    with its field, host and fix - before anything on a host changes.
  - O(state=planned) reads the deployment spec from the play's variables exactly as C(dsv4deploy validate) does
    (the variables named in the role C(dsv4_plan)'s argument specification), validates it, checks that every
    server fits its GPUs and renders each play host's release - the plan.
  - O(state=beside) and O(state=surge) plan the new release in the other slot, as blue_green runs it beside the
    serving one or as a roll starts its surge workers (see the states below).
  - O(state=secrets) gives the secret env files of every play host instead of a plan (use it with C(no_log)).
  - O(state=targets) gives the gate targets of the installed release whose C(spec.json) is O(release_spec)
    (endpoint, workers, expected overrides), to verify a rollback.
  - O(state=combined) gives the isolation plan of C(playbooks/isolate.yml) for the PD release in O(release_spec)
    - the original's gate targets and host layouts, the plan of a combined server with the same model,
    overrides, environment switches and CUDA graphs, how the combined server had to differ, and the O(suite) to
    run. An unknown suite, a combined layout that cannot work or gate settings that cannot prove the
    requirement fail.
  - O(state=roots) only reads and checks each play host's C(install_root) (nothing else of the inventory) and
    gives each host's install root, so stop, rollback and verify find the releases even after the inventory
    was edited; it warns once about old input names this run used.
  - O(state=installed) gives the view of the installed release in O(installed), read from its own records
    (C(spec.json), and each host's C(services.json)) - its gate targets and each host's services, GPUs, ports
    and service manager - not from the inventory.
  - O(state=router_change) compares the production router's own settings of O(serving_spec) and O(planned_spec)
    and returns RV(router_change); nothing else is planned.
  - O(state=secret_hosts) gives each play host whose services have secret env values, with its install root - the
    hosts whose digest salt (M(dsv4.deploy.dsv4_digest_salt), registered as C(dsv4_plan_digest_salt)) the plan
    needs. O(state=planned), O(state=beside) and O(state=surge) key each host's digests with its salt and fail,
    naming the host, where a host with secret env values has none; O(state=secrets) matches digests with them.
options:
  state:
    type: str
    required: true
    choices:
      - planned
      - beside
      - preview
      - surge
      - secrets
      - targets
      - combined
      - roots
      - installed
      - router_change
      - secret_hosts
    description:
      - What to compute (one job each; see the description). V(beside) - the plan of the new release as
        C(dsv4_rollout_strategy=blue_green) runs it beside the serving one, in the other slot - workers on GPUs
        and ports shifted by C(dsv4_rollout_blue_green_gpu_offset) and C(dsv4_rollout_blue_green_port_offset),
        its router as the preview router, install root C(INSTALL_ROOT/slot-b); fails, naming field, host and
        fix, when the two do not fit a host at once. V(preview) - the plan of the preview router of
        C(dsv4_rollout_strategy=blue_green_hosts), in the router host's C(INSTALL_ROOT/slot-b) on the production
        router's port plus C(dsv4_rollout_blue_green_port_offset), fronting the new release's workers on the
        other hosts. V(surge) - the plan of the slot a
        C(dsv4_rollout_strategy=rolling) roll starts its surge workers in (a role's lone worker, such as the
        decode of a 2P1D) - each lone worker on the spare GPUs and shifted ports
        C(dsv4deploy.rollout.strategy.surge_places) gives, the other workers where they are (never started
        there), install root C(INSTALL_ROOT/slot-b). V(secrets) - per host, absolute path to content of the
        secret env files (values of env variables named like C(*TOKEN*), C(*SECRET*), C(*KEY*), C(*PASSWORD*),
        or listed in C(secret_env)).
  release_spec:
    type: str
    description:
      - Text of an installed release's C(spec.json) (O(state=targets), O(state=combined)).
  fact:
    type: str
    default: dsv4_plan
    description:
      - Name of the fact to set; left at C(dsv4_plan), O(state=combined) sets C(dsv4_isolation), O(state=roots)
        C(dsv4_installed_roots) and O(state=secret_hosts) C(dsv4_secret_hosts).
  salts_from:
    type: str
    default: dsv4_plan_digest_salt
    description:
      - The host variable that holds each host's M(dsv4.deploy.dsv4_digest_salt) read (its C(salt) keys the
        digests of that host's secrets); the plan role registers C(dsv4_plan_digest_salt), the release install
        its own read for a plan made otherwise (the isolation's twin).
  release_id:
    type: str
    default: ""
    description:
      - Id of the release in O(release_spec) (O(state=combined)).
  gpus:
    type: list
    elements: int
    default: []
    description:
      - GPUs of the combined server (O(state=combined)); empty means the first prefill's.
  port:
    type: int
    default: 0
    description:
      - Port of the combined server (O(state=combined)); 0 means the router's when it shares the prefill's
        host (clients keep their endpoint), else the prefill's.
  env:
    type: dict
    default: {}
    description:
      - Environment switches set on purpose on the combined server (O(state=combined)); each is reported.
  suite:
    type: raw
    default: ""
    description:
      - Suites to run on each side (O(state=combined)), a list or comma-separated - C(smoke), C(needle), C(soak).
  installed:
    type: dict
    description:
      - With O(state=installed), an installed release - C(release_id), C(spec_files) and C(services_files) (host
        to the base64 content of the release's C(spec.json) and C(services.json) there, as
        M(ansible.builtin.slurp) returns it; empty where the host has none) and C(install_roots) (host to
        install root).
  planned_spec:
    type: raw
    description:
      - With O(state=secrets), the (redacted) C(spec) of the plan being installed when it is not the inventory's
        own, such as the combined twin of isolate.yml; its secret values are taken from the inventory by digest.
        With O(state=router_change), the new plan's C(spec).
  serving_spec:
    type: str
    default: ""
    description:
      - With O(state=router_change), the serving release's C(spec.json) text, whose production router's own
        settings (policy, flags, port, launcher, env, API key, drain grace, C(dsv4deploy.rollout.router_change))
        are compared with O(planned_spec)'s. An empty text (no release serves) gives no change.
      - With O(state=planned) under C(dsv4_rollout_strategy=blue_green_hosts), the serving
        release's C(spec.json) text on the router's host, which says which host set serves, so this deploy goes to
        the other one (empty - none serves - goes to the other hosts).
  going:
    type: dict
    default: {}
    description:
      - With O(state=preview), the plan's C(rollout.going) - each serving host and the host its workers go to in
        this deploy (C(dsv4_rollout_strategy=blue_green_hosts)).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.controller
  - dsv4.deploy.dsv4deploy.read_only
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Validate the spec, check memory and render every host's release
  dsv4.deploy.dsv4_build_plan:
    state: planned
  run_once: true

- name: The isolation plan of the serving PD release
  dsv4.deploy.dsv4_build_plan:
    state: combined
    release_spec: "{{ spec_json.content | b64decode }}"
    release_id: "{{ serving_release }}"
    suite: needle
    fact: dsv4_isolation
  run_once: true

- name: Gate targets of a release being restored
  dsv4.deploy.dsv4_build_plan:
    state: targets
    release_spec: "{{ spec_json.content | b64decode }}"
    fact: dsv4_target_plan
  run_once: true
"""

RETURN = r"""
router_change:
  description: With O(state=router_change), the router's changed fields and a line saying its restart is a short
    outage; empty when nothing of the router changes.
  returned: state=router_change
  type: dict
  sample: {"fields": ["router.policy"], "line": "the production router's own settings change (router.policy): ..."}
ansible_facts:
  description: The fact named by O(fact), one per state (none with O(state=router_change)).
  returned: success, except with state=router_change
  type: dict
  contains:
    dsv4_plan:
      description:
        - O(state=planned), O(state=beside), O(state=preview), O(state=surge) - the plan - C(release_id),
          C(topology), C(endpoint),
          C(hosts_in_use), C(spec), C(memory) and, per host under C(hosts), its C(install_root),
          C(service_manager), C(gpus), C(ports), C(services), C(files) and C(content_hash). See
          docs/interfaces.md.
        - O(state=secrets) - per host, absolute path to the content of each secret env file.
        - O(state=targets) - the release's gate targets - C(endpoint), C(router_url), C(workers), the expected
          overrides and settings, C(hosts_in_use), C(gpu_query_command).
        - O(state=installed) - the release's view - its gate targets, C(release_id), C(installed_on), C(spec)
          and C(hosts) (each host's services, GPUs, ports, service manager and install root).
      returned: success
      type: dict
    dsv4_isolation:
      description: O(state=combined) - the isolation plan - C(original), C(combined), the settings side by side,
        the differences, C(suite) and C(estimate) (C(seconds) and the plan line's phrase - the estimated time
        from the chosen sample sizes).
      returned: state=combined
      type: dict
    dsv4_installed_roots:
      description: O(state=roots) - each play host's install root.
      returned: state=roots
      type: dict
    dsv4_secret_hosts:
      description: O(state=secret_hosts) - each play host with secret env values, and its install root.
      returned: state=secret_hosts
      type: dict
problems:
  description: Every problem found in the spec, one line each (field, host, fix).
  returned: when the spec is invalid
  type: list
  elements: str
  sample: ["index_topk (host gpu1): accepts 512 or 1024 only, got 2048; fix: set index_topk to 512 or 1024"]
"""
