"""What serves where: per host, the active release, its services' state, its engine and the verify timer's last
result, read from the hosts themselves as `dsv4deploy releases` reads them (one ad-hoc, check-mode run of the
read-only `dsv4_host_status` module over the inventory's own connections). Nothing on a host changes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from dsv4deploy.plan.releases import format_created, run_module

MODULE = "dsv4_host_status"
# The module's arguments, templated per host: its install root (as releases passes it) and its service manager.
ARGS = ("install_root='{{ dsv4_releases_roots[inventory_hostname] }}'"
        " manager={{ dsv4_status_managers[inventory_hostname] }}"
        " supervisor_bin_dir='{{ supervisor_bin_dir | default(\"\") }}'")


@dataclass(frozen=True)
class HostStatus:
    """One host's answer, or why it gave none."""

    host: str
    install_root: str
    active: str = ""
    release_status: str = "none"
    created: float | None = None
    engine: str = ""
    services: list[dict] = field(default_factory=list)
    verify_timer: dict = field(default_factory=dict)
    error: str | None = None


def query(inventories: list[str], extra_vars: list[str], roots: dict[str, str],
          managers: dict[str, str]) -> list[HostStatus]:
    """Ask every host in `roots` (host -> install_root; `managers`: host -> systemd or supervisor) what serves."""
    extra = [*extra_vars, json.dumps({"dsv4_status_managers": managers})]
    answers = run_module(MODULE, ARGS, inventories, extra, roots, needs="release_status")
    return [HostStatus(host, root, error=a) if isinstance(a, str) else
            HostStatus(host, root, active=a.get("active") or "", release_status=a["release_status"],
                       created=a.get("created"), engine=a.get("engine") or "", services=list(a.get("services") or []),
                       verify_timer=dict(a.get("verify_timer") or {}))
            for host, root in sorted(roots.items()) for a in [answers[host]]]


def _timer_line(timer: dict) -> str:
    if not timer:
        return "verify timer: no result under this install root (not installed here, or not run yet)"
    gates = timer.get("gates") or {}
    failed = sorted(g for g, ok in gates.items() if not ok)
    verdict = f"FAILED ({', '.join(failed)})" if failed else ("passed" if gates else "no gate result")
    return (f"verify timer: last run {format_created(timer.get('at'))}, {verdict}"
            + (f", on release {timer['release']}" if timer.get("release") else ""))


def format_status(answers: list[HostStatus]) -> list[str]:
    """One block per host: its release, engine, each service's state, and the verify timer's last result."""
    lines: list[str] = []
    for a in answers:
        lines.append(f"{a.host} ({a.install_root})")
        if a.error:
            lines.append(f"  {a.error}")
            continue
        if not a.active:
            lines.append("  nothing is active (no release deployed)")
            continue
        lines.append(f"  release {a.active} ({a.release_status}, installed {format_created(a.created)})")
        lines.append(f"  engine: sglang {a.engine}" if a.engine else "  engine: not recorded")
        width = max([len("SERVICE"), *(len(s["name"]) for s in a.services)])
        lines.append(f"    {'SERVICE'.ljust(width)}  STATE    PID")
        lines += [f"    {s['name'].ljust(width)}  {s['state'].ljust(8)}  {s.get('pid') or '-'}" for s in a.services]
        lines.append(f"  {_timer_line(a.verify_timer)}")
    return lines


def as_json(answers: list[HostStatus]) -> str:
    """The answers as one JSON document, by host."""
    return json.dumps({a.host: {k: v for k, v in asdict(a).items() if k != "host"} for a in answers},
                      indent=2, sort_keys=True)
