"""What of ours runs on a host: each service's status and every pid of ours (the services, their children and
our supervisord), shared by the modules that report it (dsv4_service_state_info) and that judge a host by it
(dsv4_host's preflight, which finds our pids in the same module run)."""

from __future__ import annotations

import os

from ansible_collections.dsv4.deploy.plugins.module_utils.managers import Manager, log_since
from ansible_collections.dsv4.deploy.plugins.module_utils.service import children, started
from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import Supervisor


def report(mgr: Manager, names: list[str], logs: bool = False, offsets: dict | None = None,
           invocations: dict | None = None) -> dict:
    """Each service's status, every pid of ours, and (`logs`) their logs since `offsets`; may raise ServiceError."""
    offsets, invocations = offsets or {}, invocations or {}
    if isinstance(mgr, Supervisor) and (not os.path.exists(mgr.conf) or not mgr.running()):
        # No supervisord of ours runs here: nothing of ours does.
        idle = {n: {"name": n, "running": False, "serving": False, "active": False, "pid": None} for n in names}
        return {"changed": False, "services": idle, "pids": [], **({"logs": dict.fromkeys(names, "")} if logs else {})}
    # `serving`: running, or STARTING (supervisord's startsecs not yet over): whether a release serves here. A
    # deploy made seconds after the last start finds its programs STARTING; not serving, blue_green and rolling
    # would have nothing to keep serving and run as recreate (an outage).
    services = {}
    for name in names:
        status = mgr.status(name)
        services[name] = {**status, "serving": started(status)}
    pids = []
    for svc in services.values():
        if svc["pid"]:
            pids += [svc["pid"], *children(svc["pid"])]
    if isinstance(mgr, Supervisor):
        pids.append(int(mgr.rpc().supervisor.getPID()))
    result = {"changed": False, "services": services, "pids": sorted(set(pids))}
    if logs:
        result["logs"] = {n: log_since(mgr, n, int(offsets.get(n, 0)),
                                       invocations.get(n) or services[n].get("invocation")) for n in names}
    return result
