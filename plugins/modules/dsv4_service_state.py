#!/usr/bin/python
"""Put the services of the active release into the state asked for, under systemd or supervisord."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_service_state
short_description: Install, start, stop or remove dsv4deploy services under systemd or supervisord
description:
  - The services are those of the active release C(install_root/current) (its C(bin/serve-NAME.sh)).
  - O(state=installed) makes the service manager see the active release's units or programs (systemd
    units copied to O(unit_dir), a daemon-reload and enabled at boot; supervisord started under the install
    root with its socket there, then its programs reread and updated).
  - O(state=started) first does what O(state=installed) does, then starts O(names) all at once (the
    service manager's own ordering still applies) and returns as soon as they are started, without a
    start wait. It fails only when the service manager refuses a start (a missing or non-executable
    script; under systemd a unit that cannot be executed, with systemd's reason from the journal).
    A service that exits later is caught by the readiness wait (M(dsv4.deploy.dsv4_worker_check),
    O(dsv4.deploy.dsv4_worker_check#module:mode=watch)).
  - O(state=stopped) stops O(names) (default all of ours) in the order given, else in drain order -
    routers first (a router stops taking new requests and lets those in flight finish within its stop
    timeout, the drain deadline), then decode workers, then prefill workers and the combined server (a
    decode still reading KV from a prefill that goes away fails its request). A router's stop returns once
    it has drained (no listener, no connection it accepted still open - every request it held answered),
    without waiting out the end of its process; anything started or reloaded next waits for that end.
    Returns how long each stop took.
  - O(state=removed) stops everything and takes our units out of systemd, or shuts down our
    supervisord; the releases stay.
  - Our units are those run from O(install_root) (their C(WorkingDirectory)); another deployment's
    units on the same host are never changed or removed, and installing a unit whose name another
    deployment's unit has fails before anything changes.
  - Status and logs are M(dsv4.deploy.dsv4_service_state_info)'s.
options:
  state:
    type: str
    choices: [installed, started, stopped, removed]
    required: true
    description:
      - The state to put the services in.
  names:
    type: list
    elements: str
    description:
      - Services to act on, in order (default all of the active release's).
  only:
    type: str
    choices: [all, router, workers, decode, prefill]
    default: all
    description:
      - Narrow O(names) by kind. V(decode) is the decode workers; V(prefill) the other workers (prefill
        and the combined server).
  lock:
    type: dict
    description:
      - The deploy lock this run holds, to record its phase in (as M(dsv4.deploy.dsv4_lock) O(state=phase) does)
        with the work of this call rather than in a module run of its own - C(path), C(run_id), C(target),
        C(before) (the phase recorded before acting) and C(after) (the phase recorded once done). A lock
        this run no longer holds fails the call before anything is done. Nothing is written in check mode.
  gpus_released:
    type: dict
    description:
      - With O(state=stopped), once the services are stopped wait until their GPUs' memory is really released,
        as M(dsv4.deploy.dsv4_host) O(dsv4.deploy.dsv4_host#module:state=released) does, in the same module run -
        C(gpu_query_command), C(gpus), C(our_pids), C(threshold_mib) (default 1024), C(timeout_s) (default 120),
        C(poll_s) (default 0.25). Not in check mode (nothing was stopped). Memory still held at the deadline fails
        the call naming each GPU and its holders.
  activate:
    type: dict
    description:
      - With O(state=started), first point C(install_root/current) at C(release_id) as M(dsv4.deploy.dsv4_host_releases)
        O(dsv4.deploy.dsv4_host_releases#module:state=active) does (the release installed and intact against its
        manifest, the switch recorded, old releases pruned beyond C(keep), default 5, unless C(prune) is false), in
        the same module run, right after the lock's C(before) phase is recorded; the services started are then that
        release's. A release that is missing or was edited fails the call before anything is switched or started.
        In check mode it says it would switch (RV(would)).
  then_start:
    type: dict
    description:
      - With O(state=stopped), once the services are stopped (and their GPUs released, with O(gpus_released)),
        switch and start as O(state=started) does, in the same module run - a host's whole switch-over in one
        module run, not two. Nothing is switched or started when the stop or the GPU wait fails.
      - Returns what O(state=started) returns beside what the stop returns.
    suboptions:
      activate:
        type: dict
        description:
          - As O(activate), the pointer switched right before the start (its C(before) phase recorded first).
      only:
        type: str
        choices: [all, router, workers, decode, prefill]
        default: all
        description:
          - The services of the (newly) active release to start, narrowed by kind as O(only).
      lock_before:
        type: str
        description:
          - The phase recorded in O(lock) before the switch (O(lock)'s C(before) is the stop's).
      lock_after:
        type: str
        description:
          - The phase recorded in O(lock) once started (O(lock)'s C(after) is the stop's).
  enabled:
    type: bool
    description:
      - With O(state=stopped) and systemd, also disable (V(false)) the stopped units at boot, so a reboot
        does not start a deployment that was stopped on purpose. O(state=installed) always enables the
        active release's units.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.service_manager
attributes:
  check_mode:
    support: full
    description: Says what would be installed, started, stopped or removed (RV(would)); touches no service
      and writes no lock phase.
  diff_mode:
    support: none
    description:
      - Services have no file content to diff (the release's files are diffed by M(dsv4.deploy.dsv4_host_releases)).
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Stop the router first
  dsv4.deploy.dsv4_service_state:
    manager: systemd
    install_root: /opt/dsv4deploy
    state: stopped
    only: router

- name: Stop everything, wait for its GPUs, then switch to a release and start it (one module run)
  dsv4.deploy.dsv4_service_state:
    manager: supervisord
    install_root: /opt/dsv4deploy
    state: stopped
    gpus_released:
      gpu_query_command: [nvidia-smi]
      gpus: [0, 1, 2, 3]
    then_start:
      activate:
        release_id: 20261203T120000Z-0123456789

- name: Start the workers of the active release
  dsv4.deploy.dsv4_service_state:
    manager: systemd
    install_root: /opt/dsv4deploy
    state: started
    only: workers
  register: started
"""

RETURN = r"""
would:
  description: In check mode, each step a real run would take, in words (empty when nothing would change).
  returned: check mode
  type: list
  elements: str
started:
  description: Services started, in order (in check mode, those that would be).
  returned: O(state=started), and O(state=stopped) with O(then_start)
  type: list
  elements: str
stopped:
  description: Services stopped, in order (in check mode, those that would be).
  returned: O(state=stopped) and O(state=removed)
  type: list
  elements: str
gpus_released:
  description: With O(gpus_released), C(seconds) the GPUs took to be released and C(gpus), each listed GPU's
    memory then.
  returned: O(state=stopped) with O(gpus_released), not in check mode
  type: dict
stop_seconds:
  description: How long each service took to stop.
  returned: O(state=stopped) and O(state=removed)
  type: dict
log_offsets:
  description: Byte offset of each started service's log at its start (supervisord), for
    M(dsv4.deploy.dsv4_service_state_info) O(dsv4.deploy.dsv4_service_state_info#module:log_offsets).
  returned: O(state=started), and O(state=stopped) with O(then_start)
  type: dict
invocations:
  description: systemd invocation id of each started service, for M(dsv4.deploy.dsv4_service_state_info).
  returned: O(state=started), and O(state=stopped) with O(then_start)
  type: dict
programs:
  description: Each service's life right after the start (state, pid, start time or invocation, restarts),
    for the readiness wait's O(dsv4.deploy.dsv4_worker_check#module:services) C(since).
  returned: O(state=started), and O(state=stopped) with O(then_start)
  type: dict
"""


import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import drain, gpus, release_store
from ansible_collections.dsv4.deploy.plugins.module_utils import lock as deploy_lock
from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_from
from ansible_collections.dsv4.deploy.plugins.module_utils.layout import (
    chosen,
    kind_of,
    recorded_kinds,
    release_services,
    root_problem,
)
from ansible_collections.dsv4.deploy.plugins.module_utils.managers import MANAGER_OPTIONS, Manager, open_manager
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError, children, started
from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import STOP_RPC_TIMEOUT_S, Supervisor
from ansible_collections.dsv4.deploy.plugins.module_utils.systemd import start_failure_reason
from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact, tail


class Refused(Exception):
    """The call cannot do what it was asked; `extra` goes into the failed result."""

    def __init__(self, msg: str, **extra: object) -> None:
        super().__init__(msg)
        self.extra = extra


def pending_install(mgr: Manager) -> list[str]:
    """What state=installed would do now, in words."""
    return mgr.pending()


def install(mgr: Manager, keep: frozenset[str] = frozenset()) -> bool:
    """The service manager sees the active release's units or programs; True when anything changed.

    `keep`: running programs a start leaves as they are even when their file changed (systemd does so
    by itself: a running unit keeps its process until it is restarted)."""
    if isinstance(mgr, Supervisor):
        changed = mgr.ensure()
        return mgr.reload(keep) or changed
    return mgr.install()


def stop(mgr: Manager, names: list[str], state: str, enabled: bool | None, check: bool) -> dict:
    """Stop `names` in order (then disable, or remove everything, as `state` and `enabled` say)."""
    active = [n for n in names if mgr.status(n)["active"]] if not _no_supervisord(mgr) else []
    is_sup = isinstance(mgr, Supervisor)
    if check:
        would = [f"stop {n}" for n in active]
        if state == "stopped" and enabled is False and not is_sup:
            would += [f"disable {u}" for u in mgr.to_enable(names, False)]
        if state == "removed":
            if is_sup and mgr.running():
                would.append("shut down supervisord")
            elif not is_sup:
                would += [f"disable and remove {mgr.unit_dir}/{u}" for u in mgr.removable()]
        return {"changed": bool(would), "would": would, "stopped": active, "stop_seconds": {}}
    stopped, seconds = [], {}
    kinds = recorded_kinds(mgr.root)
    for name in active:
        # A worker's stop blocks until its process has exited; a router's until it has drained.
        t0 = time.monotonic()
        ok, text = drain_router(mgr, name) if (kinds.get(name) or kind_of(name)) == "router" else mgr.stop(name)
        seconds[name] = round(time.monotonic() - t0, 2)
        if not ok:
            raise Refused(f"could not stop {name}: {text}", stopped=stopped)
        stopped.append(name)
    changed = False
    if state == "stopped" and enabled is False and not is_sup:
        changed = mgr.set_enabled(names, False)
    if state == "removed":
        changed = (mgr.running() and mgr.shutdown()) if is_sup else mgr.remove()
    return {"changed": bool(stopped) or changed, "stopped": stopped, "stop_seconds": seconds}


def drain_router(mgr: Manager, name: str) -> tuple[bool, str]:
    """Stop a router and return once it has drained: its listener closed and every request it held answered
    (module_utils.drain), without waiting out the end of its process (0.2-1 s more of sglang-router's own).
    The service manager ends it (its TERM, and the KILL at the drain deadline); whatever starts or reloads a
    program next waits for that end first (finish_stops). Where its sockets cannot be seen, the stop waits
    for its process to end, as a worker's does."""
    pid = mgr.status(name)["pid"]
    pids = [pid, *children(pid)] if pid else []
    ports = drain.listening(pids) if pids else frozenset()
    if not ports:
        return mgr.stop(name)
    ok, text = mgr.stop(name, wait=False)
    if ok and not drain.wait_drained(pids, ports, time.monotonic() + STOP_RPC_TIMEOUT_S):
        return mgr.stop(name)
    return ok, text


def _no_supervisord(mgr: Manager) -> bool:
    """No supervisord of ours runs here (never set up, or shut down): none of its programs can run."""
    return isinstance(mgr, Supervisor) and (not os.path.exists(mgr.conf) or not mgr.running())


def start(mgr: Manager, names: list[str], check: bool) -> dict:
    """Install, then start every one of `names` not running yet, at once and with no start wait; a start
    the service manager refuses fails, with its log (a program exiting later is the readiness wait's)."""
    is_sup = isinstance(mgr, Supervisor)
    if check:
        would = pending_install(mgr)
        todo = names if (is_sup and not mgr.running()) else [n for n in names if not started(mgr.status(n))]
        would += [f"start {n}" for n in todo]
        return {"changed": bool(would), "would": would, "started": todo}
    # A start of some programs (only: workers) leaves the others running as they are: blue_green starts
    # the new workers while the production router, whose own settings may change, goes on serving.
    others = [n for n in release_services(mgr.root) if n not in names] if is_sup and mgr.running() else []
    installed = install(mgr, frozenset(n for n in others if started(mgr.status(n))))
    todo = [n for n in names if not started(mgr.status(n))]
    offsets: dict[str, int] = {}
    for name in todo if is_sup else []:
        path = mgr.log_path(name)
        offsets[name] = os.path.getsize(path) if os.path.exists(path) else 0
    cursor, since = "" if is_sup else mgr.cursor(), time.time()
    errors = mgr.start_all(todo)
    if errors:
        msg, journal = _start_failures(mgr, errors, offsets, cursor, since)
        raise Refused(msg, started=[n for n in todo if n not in errors], log_offsets=offsets, journal=journal)
    lives = mgr.lives(names)
    invocations = {} if is_sup else {n: lives[n]["invocation"] for n in todo}
    return {"changed": bool(todo) or installed, "started": todo, "log_offsets": offsets, "invocations": invocations,
            "programs": lives, "started_at": time.time()}


def _start_failures(mgr: Manager, errors: dict[str, str], offsets: dict[str, int], cursor: str,
                    since: float) -> tuple[str, list[str]]:
    """One paragraph per refused start (the manager's reason first, then the end of its log) and systemd's
    journal lines; each refused program is stopped (its manager must not keep retrying a server that
    cannot start)."""
    is_sup = isinstance(mgr, Supervisor)
    lines, journal = [], []
    for name in errors:
        after = mgr.status(name)
        if is_sup:
            log, reason = redact(read_from(mgr.log_path(name), offsets.get(name, 0))), ""
        else:
            entries = [redact(line) for line in mgr.journal_since(name, cursor, since)]
            log, reason = "\n".join(entries), start_failure_reason(entries)
            journal += entries[-40:]
        # systemd's reason first (the one-line summary of a failed deploy keeps the head).
        lines.append(f"{name} did not start ({after['state']}): "
                     f"{reason or errors.get(name) or after.get('detail', '')}\n"
                     f"--- {'last log lines' if is_sup else 'journal since this start'} ---\n"
                     f"{tail(log, lines=20)}")
    for name in errors:
        mgr.stop(name)
    return "\n".join(lines), journal[-40:]


def wait_gpus(spec: dict) -> dict:
    """The GPU wait of O(gpus_released) (module_utils.gpus), its defaults those of dsv4_host state=released."""
    if not spec.get("gpu_query_command"):
        raise ServiceError("gpus_released.gpu_query_command is required (e.g. [nvidia-smi])")
    return gpus.wait_released(list(spec["gpu_query_command"]), [int(g) for g in spec.get("gpus") or []],
                              [int(x) for x in spec.get("our_pids") or []], int(spec.get("threshold_mib", 1024)),
                              float(spec.get("timeout_s", 120)), float(spec.get("poll_s", 0.25)))


def _switch(module: AnsibleModule, root: str, want: dict | None, check: bool) -> dict:
    """O(activate) (or then_start's): the active pointer switched before the start ({} when not asked); fails
    when it cannot be."""
    if not want:
        return {}
    try:
        return release_store.activate(root, str(want.get("release_id") or ""), int(want.get("keep", 5)),
                                      bool(want.get("prune", True)), check)
    except release_store.Refused as exc:
        module.fail_json(msg=str(exc), **exc.extra)
    return {}


def _record(lock: dict | None, phase: str | None) -> None:
    """Record `phase` in the deploy lock this run holds, when the task gave both."""
    if lock and phase:
        deploy_lock.record_phase(lock["path"], lock["run_id"], phase, lock.get("target", ""))


def switch_and_start(module: AnsibleModule, lock: dict | None, phases: tuple[str | None, str | None],
                     activate: dict | None, names: list[str] | None, only: str, check: bool) -> dict:
    """O(state=started), and O(then_start) after a stop: record `phases[0]`, switch the pointer (`activate`), start
    `names` (default the switched release's) narrowed by `only`, record `phases[1]`; the switch's change and
    steps are the result's too."""
    root = module.params["install_root"]
    _record(lock, phases[0])
    switched = _switch(module, root, activate, check)
    # Opened after the switch: it is the switched release's units or programs that start.
    mgr = open_manager(module.params["manager"], root, module.params["supervisor_bin_dir"], module.params["unit_dir"])
    result = start(mgr, chosen(root, names, only), check)
    _record(lock, phases[1])
    if switched.get("changed"):
        result["changed"] = True
        if check:
            result["would"] = switched.get("would", []) + result.get("would", [])
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **MANAGER_OPTIONS,
            "state": {"type": "str", "choices": ["installed", "started", "stopped", "removed"], "required": True},
            "names": {"type": "list", "elements": "str"},
            "only": {"type": "str", "choices": ["all", "router", "workers", "decode", "prefill"], "default": "all"},
            "enabled": {"type": "bool"},
            "lock": {"type": "dict"},
            "gpus_released": {"type": "dict"},
            "activate": {"type": "dict"},
            "then_start": {"type": "dict", "options": {
                "activate": {"type": "dict"},
                "only": {"type": "str", "choices": ["all", "router", "workers", "decode", "prefill"], "default": "all"},
                "lock_before": {"type": "str"},
                "lock_after": {"type": "str"},
            }},
        },
        supports_check_mode=True,
    )
    p = module.params
    root, state, check = p["install_root"], p["state"], module.check_mode
    if root_problem(root):
        module.fail_json(msg=root_problem(root))
    lock = p["lock"] if p["lock"] and not check else None
    try:
        # A run that no longer holds the lock stops here; then the pointer, so that the service manager sees
        # the release to start (its units or programs) and the names are that release's.
        if p["activate"] and state != "started":
            module.fail_json(msg="activate goes with state=started (the pointer switches right before the start)")
        if p["then_start"] and state != "stopped":
            module.fail_json(msg="then_start goes with state=stopped (the start follows the stop)")
        phases = (p["lock"] or {}).get("before"), (p["lock"] or {}).get("after")
        if state == "started":
            result = switch_and_start(module, lock, phases, p["activate"], p["names"], p["only"], check)
        else:
            _record(lock, phases[0])
            mgr = open_manager(p["manager"], root, p["supervisor_bin_dir"], p["unit_dir"])
            names = chosen(root, p["names"], p["only"])
            if state == "installed":
                would = pending_install(mgr) if check else []
                result = {"changed": bool(would), "would": would} if check else {"changed": install(mgr)}
            else:
                result = stop(mgr, names, state, p["enabled"], check)
            _record(lock, phases[1])
        if state == "stopped" and p["gpus_released"] and not check:
            result["gpus_released"] = wait_gpus(p["gpus_released"])
        if p["then_start"]:
            then = p["then_start"]
            started = switch_and_start(module, lock, (then["lock_before"], then["lock_after"]), then["activate"], None,
                                       then["only"], check)
            merged = {**result, **started, "changed": bool(result["changed"] or started["changed"])}
            if check:
                merged["would"] = result.get("would", []) + started.get("would", [])
            result = merged
    except gpus.GpuError as exc:
        module.fail_json(msg=str(exc), **({"gpus": exc.table} if exc.table is not None else {}))
    except Refused as exc:
        module.fail_json(msg=str(exc), **exc.extra)
    except (ServiceError, deploy_lock.LockLost) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
