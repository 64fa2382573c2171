#!/usr/bin/python
"""A gate's host side: the readiness wait over a host's services, and worker checks run on the worker's own
host (for servers bound to addresses only that host reaches)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_worker_check
short_description: Wait for a host's servers while watching them, or check workers from the host they listen on
description:
  - Run by the action M(dsv4.deploy.dsv4_worker_probe), which decides which workers need it. Standard
    library only. Never fails for a failing server; returns, per worker, the same evidence the
    controller-side gates record (tries, time to ready, last status, body and error).
  - Before asking anything, each address is checked to be one of this host's own; one that is not is
    reported at once, without waiting for a deadline.
  - O(mode=readiness) asks each worker every path of its C(paths) (what the controller's readiness gate
    asks of it, C(dsv4deploy.gates.readiness.worker_paths) - C(/health), and C(/ready) from sglang 0.5.23)
    until each answers 200 or O(deadline_s) passes.
  - O(mode=config) reads C(/server_info) once (C(/get_server_info) when that is 404); its secrets (the
    C(api_key) among the server's arguments) are masked on this host, so they never reach the controller.
  - O(mode=watch) is the readiness wait on a host that runs the services - until every worker of O(checks)
    answers C(/health) 200 (asked from this host, at 127.0.0.1 when the address is not this host's own) or
    O(deadline_s) passes - watching the active release's services meanwhile. The first that exits, or is
    restarted by its service manager, ends the wait at once; it is returned in RV(died) with its exit
    status and the end of its log, and left as it is (a deploy's rollback stops it, a verify run changes
    nothing). Programs of O(services) C(start_when_healthy) are started during the wait, once their
    workers are healthy.
options:
  checks:
    type: list
    elements: dict
    required: true
    description:
      - "Workers to check, each with C(name), C(url) and (O(mode=readiness)) C(paths), the paths that must
        answer 200 (default C([/health]))."
  mode:
    type: str
    choices: [readiness, config, watch]
    required: true
    description:
      - What to do - ask each worker's C(paths) until ready, read C(/server_info) once, or wait for the
        host's services while watching them.
  deadline_s:
    type: float
    default: 600
    description:
      - Readiness deadline (O(mode=watch) - how long to wait at most).
  poll_interval_s:
    type: float
    default: 0.25
    description:
      - Seconds between readiness tries.
  request_timeout_s:
    type: float
    default: 5
    description:
      - Seconds one request may take.
  api_key_file:
    type: str
    description:
      - File on this host holding the API key, sent as a Bearer token (O(mode=config)).
  key_for_controller:
    type: str
    description:
      - O(mode=watch) - a file on this host holding the deployment's API key, read as the wait begins and
        returned in RV(api_key) for the gates the controller runs (what a task of its own would otherwise read),
        or, unreadable, why in RV(api_key_problem), the wait going on. The task that runs this must hide its
        result (no_log; M(dsv4.deploy.dsv4_worker_probe) does).
  services:
    type: dict
    default: {}
    description:
      - O(mode=watch) - the services to watch - C(manager) (systemd or supervisor), C(install_root),
        C(supervisor_bin_dir), C(unit_dir); C(since), each service's life at its start as
        M(dsv4.deploy.dsv4_service_state) O(dsv4.deploy.dsv4_service_state#module:state=started) returned it (a service
        under another pid or invocation since has been restarted; without it the first look counts);
        C(log_offsets) for the log of one that died; C(start_when_healthy), programs to start during the wait,
        each once every worker URL it maps to (name to URL, asked as given) answers C(/health) 200 (until
        then not watched; a router started so registers its workers at its first probe, instead of on its
        own back-off); C(register_workers), a router's workers to submit to its worker API each as soon as it
        answers C(/health) (C(program), C(router) and C(router_version) - which API, see
        M(dsv4.deploy.dsv4_router_workers) -, C(router_url), C(api_key_file) on this host, C(workers) each
        with C(name), C(url), C(worker_type), C(bootstrap_port), C(model_id)) - a router that takes workers at
        run time (sglang-router 0.2.2 and later, smg) is then started at the wait's start, even when it is in
        C(start_when_healthy), and routes to each worker at once instead of on its own back-off; an older one
        keeps its C(start_when_healthy); C(lock), the deploy lock to record C(before), its phase as the wait begins, in
        (C(path), C(run_id), C(target)); C(logs), true to also return what each worker of the active release logged
        since its start (RV(logs)), as the wait ends - what the config gate reads, without a module run of its own;
        C(fatal_log_patterns), regular expressions (the model profile's) that, matching a line a watched program
        logged since its start (read every 5 s), end the wait at once as if it had died, with that line.
  slice_s:
    type: float
    default: 0
    description:
      - O(mode=watch) - return after this many seconds when the wait is not over, with RV(unfinished), the end of
        each program's log (RV(progress)) and RV(resume), so the caller can say what each worker does and go on
        (0 - one call to the end).
  resume:
    type: dict
    default: {}
    description:
      - O(mode=watch) - RV(resume) of the previous slice; the wait goes on from there (its deadline counts from the
        first slice; the lock phase is recorded and the key read by the first slice only).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.read_only
attributes:
  check_mode:
    support: full
    description: Only reads from the servers; O(mode=watch) starts nothing and records no lock phase in check mode.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Wait on this host until its loopback-bound prefill answers /health
  dsv4.deploy.dsv4_worker_check:
    checks:
      - {name: prefill, url: "http://127.0.0.1:30001", paths: [/health, /ready]}
    mode: readiness
    deadline_s: 300

- name: Wait for this host's servers, watching them, and start the router once its workers answer
  dsv4.deploy.dsv4_worker_check:
    checks:
      - {name: sglang-dsv4-prefill-0, url: "http://127.0.0.1:30001"}
      - {name: sglang-dsv4-decode-0, url: "http://127.0.0.1:30002"}
    mode: watch
    deadline_s: 600
    services:
      manager: systemd
      install_root: /opt/dsv4deploy
      start_when_healthy:
        sglang-dsv4-router:
          sglang-dsv4-prefill-0: "http://127.0.0.1:30001"
          sglang-dsv4-decode-0: "http://127.0.0.1:30002"
"""

RETURN = r"""
workers:
  description: Worker name to its evidence - C(checks), one entry per path asked (C(check), C(url), C(ready),
    C(attempts), C(seconds_to_ready), C(last_status), C(last_body), C(last_error)) for O(mode=readiness);
    C(server_info) answers (secrets masked) for O(mode=config); C(unreachable) when the address is not this host's.
  returned: O(mode=readiness) and O(mode=config)
  type: dict
seconds:
  description: How long the checks took.
  returned: always
  type: float
died:
  description: The service that exited, was restarted or logged a fatal line during the wait - C(name), C(why)
    (exit status, and whether its manager started it again, or the fatal line), C(seconds) after the wait began,
    C(log) (the end of its log).
  returned: O(mode=watch), when one did
  type: dict
healthy:
  description: Seconds from the start of the wait until each worker answered C(/health) 200.
  returned: O(mode=watch)
  type: dict
started_later:
  description: Seconds from the start of the wait until each program of C(start_when_healthy) was started.
  returned: O(mode=watch)
  type: dict
registered:
  description: Per worker of C(register_workers) - C(seconds) after the wait began that it was submitted and
    C(job), the router's job id; or C(error), why the router refused it (its own probe then registers it).
  returned: O(mode=watch), with C(register_workers)
  type: dict
not_registered:
  description: Workers of C(register_workers) not submitted when the wait ended (never answered C(/health)).
  returned: O(mode=watch), with C(register_workers)
  type: list
  elements: str
logs:
  description: Worker service name to what it logged since its start (from C(log_offsets), or its running
    invocation's journal), API keys redacted, read as the wait ended.
  returned: O(mode=watch), with C(services.logs)
  type: dict
api_key:
  description: The content of O(key_for_controller), stripped (empty for an empty file).
  returned: O(mode=watch), with O(key_for_controller) readable
  type: str
api_key_problem:
  description: Why O(key_for_controller) could not be read (the path and the error, not its content).
  returned: O(mode=watch), with O(key_for_controller) unreadable
  type: str
unfinished:
  description: The slice (O(slice_s)) ended before the wait did; call again with RV(resume).
  returned: O(mode=watch), with O(slice_s)
  type: bool
progress:
  description: Program name to the last lines it logged since its start (API keys redacted), as the slice ended.
  returned: O(mode=watch), with RV(unfinished)
  type: dict
resume:
  description: What the wait holds (elapsed seconds, each program's life, programs still to start, workers
    healthy and registered) for O(resume).
  returned: O(mode=watch), with RV(unfinished)
  type: dict
not_started:
  description: Programs of C(start_when_healthy) still not started when the wait timed out.
  returned: O(mode=watch), when it timed out
  type: list
  elements: str
"""


import re
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import lock as deploy_lock
from ansible_collections.dsv4.deploy.plugins.module_utils import trust
from ansible_collections.dsv4.deploy.plugins.module_utils.early_router import Registration, takes_workers_at_run_time
from ansible_collections.dsv4.deploy.plugins.module_utils.layout import chosen, release_services, root_problem
from ansible_collections.dsv4.deploy.plugins.module_utils.managers import Manager, log_since, open_manager
from ansible_collections.dsv4.deploy.plugins.module_utils.net import get, healthy, local_url, not_here
from ansible_collections.dsv4.deploy.plugins.module_utils.router_workers import api_for
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError
from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import Supervisor
from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact_body, tail

INFO_LIMIT = 1_000_000  # a server_info body is parsed on the controller: keep it whole
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
WATCH_POLL_S = 0.1
# How often the wait reads the watched programs' logs for a fatal line (each read is a journalctl run).
FATAL_SCAN_S = 5.0
# Log lines returned per program with each slice of the wait (the phase is read from the last marker).
PROGRESS_LINES = 40
# A server's access log (the wait's probes, the router's): left out of what the phase is read from.
PROBE_LINE = re.compile(r'INFO:\s+\S+:\d+ - "')


def poll_health(check: dict, key: str | None, deadline: float, started: float, p: dict, path: str = "/health") -> dict:
    """Ask `path` until 200 or the deadline; evidence as the controller's readiness gate keeps it."""
    url = f"{check['url']}{path}"
    ev = {"check": f"{check['name']} {path}", "url": url, "ready": False, "seconds_to_ready": None,
          "attempts": 0, "last_status": None, "last_body": ""}
    while True:
        ev["attempts"] += 1
        left = deadline - time.monotonic()
        answer = get(url, key, min(p["request_timeout_s"], max(left, 0.2)))
        ev["last_status"], ev["last_body"] = answer["status"], answer["body"]
        if answer["error"]:
            ev["last_error"] = answer["error"]
        else:
            ev.pop("last_error", None)
        if answer["status"] == 200:
            ev["ready"] = True
            ev["seconds_to_ready"] = round(time.monotonic() - started, 3)
            return ev
        if time.monotonic() >= deadline:
            return ev
        time.sleep(min(p["poll_interval_s"], max(deadline - time.monotonic(), 0)))


def server_info(check: dict, key: str | None, timeout: float) -> list[dict]:
    """The answers of /server_info (then /get_server_info when the first is 404), secrets masked."""
    answers = []
    for path in SERVER_INFO_PATHS:
        answer = get(f"{check['url']}{path}", key, timeout, INFO_LIMIT)
        answers.append({"path": path, **answer, "body": redact_body(answer["body"])})
        if answer["status"] != 404:
            break
    return answers


def readiness(checks: list[dict], key: str | None, p: dict) -> dict:
    """Every path of every worker polled at once until ready or the deadline; worker name -> evidence."""
    started = time.monotonic()
    results: dict[str, dict] = {}
    threads = []
    for check in checks:
        results[check["name"]] = {"checks": []}
        for path in check.get("paths") or ["/health"]:
            def run(check: dict = check, path: str = path) -> None:
                found = poll_health(check, key, started + p["deadline_s"], started, p, path)
                results[check["name"]]["checks"].append(found)

            threads.append(threading.Thread(target=run, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for found in results.values():
        found["checks"].sort(key=lambda ev: ev["check"])
    return results


def fatal_line(log: str, patterns: list[re.Pattern]) -> str:
    """The first line of `log` a fatal pattern matches ('' when none does)."""
    for line in log.splitlines():
        if any(p.search(line) for p in patterns):
            return line.strip()
    return ""


def watch(mgr: Manager, names: list[str], urls: dict[str, str], since: dict[str, dict],
          timeout_s: float, offsets: dict[str, int], later: dict[str, dict[str, str]] | None = None,
          register: Registration | None = None, fatal: list[str] | None = None, slice_s: float = 0.0,
          resume: dict | None = None) -> dict:
    """Wait until every worker of `urls` is healthy, or `timeout_s`, or the first of `names` exits or is
    restarted (then returned as `died` with its log); the module's result. Each program of `later` that is
    not running yet is started as soon as every worker URL it names answers /health 200, and watched from
    then on (a router started once its workers are healthy registers them at its first probe). With
    `register`, each of its workers is also submitted to its router's worker API as soon as it answers
    /health (a router started early routes to it within one job), and the wait lasts until all are. A line of
    a watched program's log that a `fatal` pattern matches (the model profile's, e.g. CUDA error) ends the wait
    at once too, as a death with that line: the server would only hang until the deadline.

    With `slice_s`, the wait returns after that long with RV(unfinished) and what it holds (RV(resume)), and
    `resume` continues it where it stopped: the controller says what each worker does between slices."""
    resume = resume or {}
    called = time.monotonic()
    t0 = called - float(resume.get("elapsed_s") or 0.0)
    patterns = [re.compile(p) for p in fatal or []]
    scanned = called
    urls = {n: local_url(u) for n, u in urls.items()}
    first = mgr.lives(names)
    base = {n: (resume.get("base") or {}).get(n) or since.get(n) or first[n] for n in names}
    if resume:  # only what no earlier slice started: one started then and gone now has died
        later = {n: u for n, u in (later or {}).items() if n in (resume.get("pending") or [])}
    # A program of `later` already running (started with the others) is simply watched.
    pending = {n: u for n, u in (later or {}).items() if n in names and mgr.gone(first[n], first[n])}
    healthy_at: dict[str, float] = dict(resume.get("healthy") or {})
    up: dict[str, bool] = {}  # URL -> answered /health 200 (each URL asked once per round)
    started_later: dict[str, float] = dict(resume.get("started_later") or {})
    lives = first
    while True:
        scan = bool(patterns) and time.monotonic() - scanned >= FATAL_SCAN_S
        for name in names:
            why = "" if name in pending else mgr.gone(lives[name], base[name])
            if not why and scan and name not in pending:
                line = fatal_line(log_since(mgr, name, int(offsets.get(name, 0)), base[name].get("invocation")),
                                  patterns)
                why = f"fatal log line: {line}" if line else ""
            if why:
                return {"changed": bool(started_later), "died": _died(mgr, name, why, base[name], offsets, t0),
                        "healthy": healthy_at, "started_later": started_later,
                        "seconds": round(time.monotonic() - t0, 3)}
        for url in {*urls.values(), *(u for w in pending.values() for u in w.values()),
                    *(register.urls if register else ())}:
            if not up.get(url):
                up[url] = healthy(url)
        if register:
            register.step(up, t0)
        for name, url in urls.items():
            if name not in healthy_at and up[url]:
                healthy_at[name] = round(time.monotonic() - t0, 3)
        for name in [n for n, workers in pending.items() if all(up[u] for u in workers.values())]:
            refused = mgr.start_all([name])
            del pending[name]
            if refused:
                return {"changed": bool(started_later), "healthy": healthy_at, "started_later": started_later,
                        "seconds": round(time.monotonic() - t0, 3),
                        "died": _died(mgr, name, f"did not start: {refused[name]}", {}, offsets, t0)}
            started_later[name] = round(time.monotonic() - t0, 3)
            base[name] = mgr.lives([name])[name]
        elapsed = time.monotonic() - t0
        if (len(healthy_at) == len(urls) and not pending and (not register or register.done)) \
                or elapsed >= timeout_s:
            out = {"changed": bool(started_later), "healthy": healthy_at, "seconds": round(elapsed, 3),
                   "started_later": started_later,
                   "waiting": sorted(set(urls) - set(healthy_at)), "not_started": sorted(pending)}
            if register:
                out.update(registered=register.evidence, not_registered=sorted(register.pending))
            return out
        if slice_s and time.monotonic() - called >= slice_s:
            return {"changed": bool(started_later), "unfinished": True, "healthy": healthy_at,
                    "seconds": round(elapsed, 3), "started_later": started_later,
                    "registered": register.evidence if register else {},
                    "progress": startup_tails(mgr, names, offsets, base),
                    "resume": {"elapsed_s": round(elapsed, 3), "base": base, "pending": sorted(pending),
                               "healthy": healthy_at, "started_later": started_later,
                               "registered": register.evidence if register else {}}}
        scanned = time.monotonic() if scan else scanned
        time.sleep(min(WATCH_POLL_S, max(timeout_s - elapsed, 0)))
        lives = mgr.lives(names)


def startup_tails(mgr: Manager, names: list[str], offsets: dict[str, int], base: dict[str, dict]) -> dict:
    """The end of what each program logged since its start (redacted): the controller reads its phase there."""
    tails = {}
    for n in names:
        log = log_since(mgr, n, int(offsets.get(n, 0)), base[n].get("invocation"))
        tails[n] = tail("\n".join(line for line in log.splitlines() if not PROBE_LINE.search(line)),
                        lines=PROGRESS_LINES)
    return tails


def _died(mgr: Manager, name: str, why: str, base: dict, offsets: dict[str, int], t0: float) -> dict:
    """What the wait returns for a service that exited: why, when, the end of its log. It is left to the
    caller (a deploy's rollback stops it; a verify run changes nothing)."""
    seconds = round(time.monotonic() - t0, 2)
    log = log_since(mgr, name, int(offsets.get(name, 0)), base.get("invocation"))
    return {"name": name, "why": why, "seconds": seconds, "log": tail(log, lines=20),
            "log_source": "last log lines" if isinstance(mgr, Supervisor) else "its journal"}


def watch_services(module: AnsibleModule) -> dict:
    """mode=watch: the readiness wait over the active release's services (nothing started in check mode)."""
    p, svc = module.params, module.params["services"]
    root = svc.get("install_root") or ""
    if root_problem(root):
        module.fail_json(msg=root_problem(root))
    if svc.get("manager") not in ("systemd", "supervisor"):
        module.fail_json(msg=f"services.manager must be systemd or supervisor, not {svc.get('manager')!r}")
    mgr = open_manager(svc["manager"], root, svc.get("supervisor_bin_dir") or None,
                       svc.get("unit_dir") or "/etc/systemd/system")
    lock = svc.get("lock") or {}
    resume = p["resume"] or {}
    if lock.get("before") and not module.check_mode and not resume:
        deploy_lock.record_phase(lock["path"], lock["run_id"], lock["before"], lock.get("target", ""))
    later = {} if module.check_mode else dict(svc.get("start_when_healthy") or {})
    register = None if module.check_mode else registration(module, svc.get("register_workers") or {})
    if register and register.program in later:
        later[register.program] = {}  # started at once, told of each worker as it answers
    if register and resume.get("registered"):  # submitted by an earlier slice: not again
        register.evidence.update(resume["registered"])
        for name in resume["registered"]:
            register.pending.pop(name, None)
    offsets = svc.get("log_offsets") or {}
    # Read first: the key is for the gates after the wait, and a file that cannot be read is said at once.
    handed = controller_key(p.get("key_for_controller"))
    out = watch(mgr, release_services(root), {c["name"]: c["url"] for c in p["checks"]}, svc.get("since") or {},
                p["deadline_s"], offsets, later, register, svc.get("fatal_log_patterns") or [], p["slice_s"], resume)
    if svc.get("logs") and not out.get("unfinished"):
        # The config gate's logs, read here as the wait ends (the running invocation's journal under systemd).
        workers = chosen(root, None, "workers")
        lives = mgr.lives(workers)
        out["logs"] = {n: log_since(mgr, n, int(offsets.get(n, 0)), lives[n].get("invocation")) for n in workers}
    return {**out, **handed}


def controller_key(path: str | None) -> dict:
    """`key_for_controller`'s content as RV(api_key), or why it cannot be read as RV(api_key_problem)."""
    if not path:
        return {}
    try:
        return {"api_key": trust.read_key(path)}
    except trust.Untrusted as exc:
        return {"api_key_problem": f"will not read the API key file on this host: {exc}"}
    except (OSError, UnicodeDecodeError) as exc:
        return {"api_key_problem": f"cannot read the API key file {path} on this host: {_why(exc)}"}


def registration(module: AnsibleModule, spec: dict) -> Registration | None:
    """The worker registration `services.register_workers` asks for: None without one, or for a router
    that cannot take PD workers at run time (it keeps being started once its workers are healthy). The
    router's key is read from its file on this host."""
    if not spec.get("workers"):
        return None
    for field in ("program", "router", "router_version", "router_url"):
        if not spec.get(field):
            module.fail_json(msg=f"services.register_workers.{field} is required with its workers")
    if not takes_workers_at_run_time(spec["router"], spec["router_version"]):
        return None
    key = read_key(module, spec.get("api_key_file"), "the router's API key file", "register its workers")
    return Registration(spec["program"], spec["router_url"], api_for(spec["router"], spec["router_version"]),
                        spec["workers"], key)


def read_key(module: AnsibleModule, path: str | None, what: str, why: str) -> str | None:
    """The API key in `path` on this host (None without a path or for an empty file); fails naming it."""
    if not path:
        return None
    try:
        return trust.read_key(path) or None
    except trust.Untrusted as exc:
        module.fail_json(msg=f"will not read {what} on this host to {why}: {exc}")
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg=f"cannot read {what} {path} on this host to {why}: {_why(exc)}")
    return None


def _why(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or "not UTF-8 text"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "checks": {"type": "list", "elements": "dict", "required": True},
            "mode": {"type": "str", "choices": ["readiness", "config", "watch"], "required": True},
            "deadline_s": {"type": "float", "default": 600},
            "poll_interval_s": {"type": "float", "default": 0.25},
            "request_timeout_s": {"type": "float", "default": 5},
            "api_key_file": {"type": "str"},
            "key_for_controller": {"type": "str", "no_log": False},  # a path, not the key
            "services": {"type": "dict", "default": {}},
            "slice_s": {"type": "float", "default": 0},
            "resume": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["mode"] == "watch":
        try:
            module.exit_json(**watch_services(module))
        except (ServiceError, deploy_lock.LockLost) as exc:
            module.fail_json(msg=str(exc))
    # /health is open; only server_info needs the key
    key = read_key(module, p["api_key_file"], "the API key file", "ask the workers' server_info") \
        if p["mode"] == "config" else None
    started = time.monotonic()
    results: dict[str, dict] = {}
    here = []
    for check in p["checks"]:
        why = not_here(check["url"])
        if why:
            results[check["name"]] = {"unreachable": why, "url": check["url"]}
        elif p["mode"] == "config":
            results[check["name"]] = {"server_info": server_info(check, key, p["request_timeout_s"] * 2)}
        else:
            here.append(check)
    results.update(readiness(here, key, p) if here else {})
    module.exit_json(changed=False, workers=results, seconds=round(time.monotonic() - started, 3))


if __name__ == "__main__":
    main()
