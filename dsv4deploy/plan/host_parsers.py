"""Which command lines preflight hands to the host's own parsers (module_utils/host_parser.py), per host.

A server or router whose launcher is `PYTHON -m MODULE` for a module we know the parser of gets its
rendered flags checked by that Python's own sglang (or router) on the host, before anything stops; each
server line is then resolved by that sglang as it would be at start-up (`resolve`), with the service's own
SGLANG_* switches and GPUs (`resolve_env`). Any other launcher (a wrapper script, a container) has no parser
we can load: dsv4deploy's tables are the rule.
"""

from __future__ import annotations

from typing import Any

from dsv4deploy.plan.services import ServiceDefinition
from dsv4deploy.sglang import versions
from dsv4deploy.spec import Deployment

# `python -m MODULE` -> which parser checks its flags.
PARSER_OF_MODULE = {
    "sglang.launch_server": "server",
    "sglang_router.launch_router": "sglang-router",
    "smg.launch_router": "smg",
}
# What the child may see of the service's environment (module_utils/host_parser.py PASSED_ENV).
PASSED_ENV = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "HOME")
# What sglang's resolution reads of a server's environment: its switches and its GPUs (no secret is an SGLANG_
# switch: secret_env never reaches svc.env).
RESOLVE_ENV_PREFIX = "SGLANG_"
RESOLVE_ENV = ("CUDA_VISIBLE_DEVICES",)


def parser_kind(launcher: list[str]) -> str | None:
    """The parser that checks a launcher's flags, when it is `PYTHON -m MODULE` for a known MODULE."""
    if len(launcher) >= 3 and launcher[1] == "-m":
        return PARSER_OF_MODULE.get(launcher[2])
    return None


def host_checks(spec: Deployment, services: list[ServiceDefinition]) -> list[dict[str, Any]]:
    """The command lines of one host's services for its own parsers (none for an unknown launcher)."""
    out = []
    for svc in services:
        launcher = spec.router_command(svc.host) if svc.role == "router" else spec.server_command(svc.host)
        kind = parser_kind(launcher)
        if kind is None:
            continue
        version = spec.host(svc.host).sglang_version
        server = kind == "server"
        out.append({
            "service": svc.name, "kind": kind, "python": launcher[0], "argv": svc.argv[len(launcher):],
            "env": {k: v for k, v in svc.env.items() if k in PASSED_ENV},
            "resolve": server,
            "resolve_env": {k: v for k, v in svc.env.items()
                            if server and (k.startswith(RESOLVE_ENV_PREFIX) or k in RESOLVE_ENV)},
            "expected_version": version if kind == "server" else None,
            "table_version": versions.table_version(version) if kind == "server" else None,
        })
    return out


def resolution_lines(spec: Deployment, services: list[ServiceDefinition]) -> list[str]:
    """Per host, whether preflight has the host's own sglang resolve its server lines, or why not."""
    by_host: dict[str, list[str]] = {}
    for svc in services:
        if svc.role != "router":
            by_host.setdefault(svc.host, []).append(svc.name)
    out = []
    for host, names in sorted(by_host.items()):
        launcher = spec.server_command(host)
        if parser_kind(launcher) == "server":
            out.append(f"{host}: {', '.join(names)} resolved by {launcher[0]}'s sglang in preflight (parser, "
                       "post-init checks, the model's hooks with its config.json), before anything stops")
        else:
            out.append(f"{host}: {', '.join(names)} not resolved: no sglang on the host to ask (the launcher "
                       f"{' '.join(launcher)} is not `python -m sglang.launch_server`); dsv4deploy's tables are "
                       "the rule")
    return out
