"""Cross-field checks of `engine:`: what the engine's interpreter replaces must be an interpreter, and the
version the flags are rendered for must be the version installed."""

from __future__ import annotations

from dsv4deploy.spec.models import Deployment, Problem


def engine_problems(spec: Deployment) -> list[Problem]:
    """Each reason the spec's engine cannot run its launchers (none without `engine:`)."""
    if spec.engine is None:
        return []
    out = []
    launchers = [("server_launcher", list(spec.server_launcher))]
    if spec.engine.router is not None and spec.topology == "pd":
        launchers.append(("router_launcher", spec.router_command()))
    for field, argv in launchers:
        if len(argv) < 3 or argv[1] != "-m":
            out.append(Problem(field=field, message=f"{' '.join(argv)} is not `PYTHON -m MODULE`, so the engine's "
                                                    "interpreter cannot run it",
                               fix=f"write {field} as [python3, -m, MODULE] (the engine's venv replaces python3), "
                                   "or unset engine"))
    for name in spec.hosts_in_use():
        version = spec.host(name).sglang_version
        if version != spec.engine.sglang:
            out.append(Problem(field="sglang_version", host=name,
                               message=f"is {version}, but engine.sglang installs {spec.engine.sglang}: the flags "
                                       "would be rendered for another version than the one that runs",
                               fix=f"set sglang_version: {spec.engine.sglang!r} (or the engine's version to "
                                   f"{version!r})"))
    return out
