#!/usr/bin/python
"""Documentation of the dsv4_worker_probe action (action/dsv4_worker_probe.py); it runs dsv4_worker_check."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_worker_probe
short_description: Run the host side of a gate - the readiness wait, and checks the controller cannot make
description:
  - Runs on every host (not C(run_once)), before the gate itself (M(dsv4.deploy.dsv4_run_gates), C(run_once)
    on the controller).
  - For C(readiness) with O(services), it first waits on the host (M(dsv4.deploy.dsv4_worker_check),
    O(dsv4.deploy.dsv4_worker_check#module:mode=watch)) until the host's workers answer C(/health), within
    the readiness deadline, watching every program of the host meanwhile. A program that exits or is
    restarted ends the wait at once; it is returned in RV(probe.died) and the gate fails on it
    at once, naming program, host and exit status, with the end of its log.
  - For the workers of this host bound to an address the controller cannot count
    on reaching (a loopback or other address than the one Ansible reaches the host at), it runs
    M(dsv4.deploy.dsv4_worker_check) on the host - one module run per host and gate, whatever the
    number of tries - asking each worker what the controller's readiness gate would (C(/health), and
    C(/ready) from sglang 0.5.23). Secrets in their C(/server_info) are masked on the host.
  - Hosts reached through the local connection, and workers the controller reaches, are left to the
    gate; without O(services) nothing runs on the host then.
  - Returns RV(probe) for the gate's O(dsv4.deploy.dsv4_run_gates#module:probes). Never fails for a failing
    server; a check that cannot run is reported per worker as unreachable, with the reason.
options:
  name:
    type: list
    elements: str
    required: true
    description:
      - Gates whose host side to run (only C(readiness) and C(config) have one), in this order - the
        readiness wait and its checks, then config's. With C(config) named after a readiness wait, the wait
        also returns the host's worker logs since this start (RV(probe.logs)), which the config gate reads.
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
  services:
    type: dict
    default: {}
    description:
      - "The host's services to watch during the readiness wait: C(manager) (systemd or supervisor),
        C(install_root), C(supervisor_bin_dir), C(since) and C(log_offsets) (as
        O(dsv4.deploy.dsv4_service_state#module:state=started) returned them), and C(lock), the deploy lock to
        record a phase in as the wait begins (C(path), C(run_id), C(target), C(before)), and C(start_router)
        (true when the start left the router for this wait to start: on the router's host it is started as soon
        as every worker of the plan answers C(/health) at the URL the router uses when they all run on that
        host, else at once). Without C(install_root) there is no wait."
  api_key_file:
    type: str
    default: ""
    description:
      - A file on this host holding the deployment's API key, for the gates the controller runs next. The
        readiness wait reads it (no module run of its own) and returns it in RV(api_key), and this task's
        result is then hidden (no_log) whatever the task says; unreadable, RV(api_key_problem) says why.
        Without a wait on this host it is not read (neither is returned).
  verdict:
    type: bool
    default: false
    description:
      - Also judge C(readiness) here, on the controller, the moment this host's wait ends, as
        M(dsv4.deploy.dsv4_run_gates) would with this host's probe (the same gate, settings and evidence), and
        return that task's result in RV(verdict). The gates role sets it where this host is the only one the
        gates wait on and readiness is the first gate alone, so that no task runs between the servers being
        ready and the verdict; the gate task for readiness is then left out.
      - Only with C(readiness) in O(name) and a wait (an C(install_root) in O(services)). When the gate task itself
        cannot run (invalid gate settings, an unreadable key file), no verdict is returned, and the gate task
        runs and fails saying why.
  api_key:
    type: str
    default: ""
    description:
      - The deployment's API key for the O(verdict), when this wait does not read it (O(api_key_file)). Never
        logged.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.action
  - dsv4.deploy.dsv4deploy.read_only
attributes:
  action:
    support: full
    description: An action plugin; it runs M(dsv4.deploy.dsv4_worker_check) on the host when needed (the wait,
      then the checks).
  check_mode:
    support: full
    description: Only reads from the servers; the one change it can make (starting the router, with
      C(services.start_router)) is not made in check mode.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Wait on each host for its servers, and check the workers the controller cannot reach
  dsv4.deploy.dsv4_worker_probe:
    name: readiness
    plan: "{{ dsv4_plan }}"
    services:
      manager: supervisor
      install_root: /opt/dsv4deploy
      since: "{{ started.programs }}"
  register: probe
"""

RETURN = r"""
api_key:
  description: The content of O(api_key_file), stripped; the result holding it is hidden (no_log).
  returned: with O(api_key_file) read by the wait
  type: str
api_key_problem:
  description: Why O(api_key_file) could not be read (its path and the error, never its content).
  returned: with O(api_key_file) unreadable
  type: str
verdict:
  description: The readiness gate's task result, as M(dsv4.deploy.dsv4_run_gates) returns it for C(readiness)
    (C(gates), C(gate), C(passed)).
  returned: with O(verdict) and a wait, when the gate could run
  type: dict
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
    healthy_on_host:
      description: Seconds into the wait at which each of the host's workers answered C(/health) 200.
      type: dict
      returned: when the readiness wait ran
    logs:
      description: Worker service name to what it logged since this start, API keys redacted (the config gate's
        O(dsv4.deploy.dsv4_run_gates#module:logs)); read on the host as the readiness wait ended.
      type: dict
      returned: when O(name) has C(readiness) and C(config) and the wait ran
    died:
      description: The program that exited or was restarted during the wait - C(name), C(host), C(why), C(seconds),
        C(log), C(was_healthy).
      type: dict
      returned: when one did
"""
