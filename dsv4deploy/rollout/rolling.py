"""`rolling`: xPyD over hosts, replaced a batch of workers at a time behind the production router.

Each step takes at most ``dsv4_rollout_rolling_max_unavailable`` workers of each role out of the
production router (removed through its worker API, then drained by the server's own SIGTERM), starts
their new release on the same GPUs and ports, gates them through a preview router of their own and
only then lets them join the production router. Prefill and decode move in step: the steps are as
many as the role that needs the most, and each role's workers are spread evenly over them, so the
first step replaces a prefill *and* a decode (the preview router fronts a whole new-release pair) and
both roles finish at the last step. The router keeps at least one healthy prefill and one healthy
decode at every step, so a role of several workers is rolled a batch smaller than its count at a time.
A role's lone worker (the decode of a 2P1D) is rolled by **surge** instead: its new worker starts beside
it (spare GPUs, shifted ports: `rolling_strategy.surge_places`), is gated with the step's other new workers and
joins the production router before the old one leaves; then it moves home (the spec's own GPUs and
ports) the same way, so the roll ends where recreate would. Where no surge fits it is refused by name,
with the fix.

This module only plans and describes a roll (pure data, no host touched): the steps, the refusals and
the report's table of which worker runs which release after each step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from dsv4deploy.net import is_loopback
from dsv4deploy.plan import services
from dsv4deploy.spec import Deployment, Problem, StrictModel

MAX_UNAVAILABLE_VAR = "dsv4_rollout_rolling_max_unavailable"
STRATEGY_VAR = "dsv4_rollout_strategy"
ROLES: tuple[Literal["prefill", "decode"], ...] = ("prefill", "decode")


class RollWorker(StrictModel):
    """One worker a roll replaces: its spec path, program or unit name, role, host and URL."""

    path: str
    name: str
    role: Literal["prefill", "decode"]
    host: str
    url: str


class RollStep(StrictModel):
    """One step: the workers replaced together, and what the preview router fronts while they are gated."""

    step: int
    workers: list[RollWorker]
    # The preview router's workers: this step's new ones plus, for a role this step does not replace,
    # the new-release workers an earlier step already rolled (never an old one: the gates judge the new pair).
    preview: list[str]
    # The step's workers rolled by surge (a role's lone worker): its new one starts beside it first.
    surge: list[str] = Field(default_factory=list)


def lone_paths(spec: Deployment) -> list[str]:
    """The workers alone in their role (`decode[0]` of a 2P1D): a roll replaces them by surge."""
    return [f"{role}[0]" for role in ROLES if len(getattr(spec, role)) == 1]


def roll_problems(spec: Deployment, max_unavailable: int,
                  surge_fit: Callable[[str], list[Problem]] | None = None) -> list[Problem]:
    """Why `spec` cannot be rolled without leaving the router short of a prefill or a decode (empty: it can).

    `surge_fit(path)` says why a surge worker for a role's lone worker does not fit beside it (empty: it
    fits, and that role is rolled by surge); without it a lone worker is refused."""
    fix_other = f"or set {STRATEGY_VAR}: blue_green (beside the serving release) or recreate (an outage)"
    if spec.topology != "pd" or spec.router is None:
        return [Problem(field=STRATEGY_VAR, message="rolling replaces workers behind a router one batch at a time, "
                        "and a combined deployment has one server and no router",
                        fix=f"use topology: pd with at least two prefills and two decodes, {fix_other}")]
    out: list[Problem] = []
    for role in ROLES:
        workers = list(getattr(spec, role))
        count = len(workers)
        if count < 2:
            host = workers[0].host if workers else None
            misfit = surge_fit(f"{role}[0]") if surge_fit is not None and workers else None
            if misfit == []:
                continue  # rolled by surge
            why = f"; and no surge fits beside it ({'; '.join(p.message for p in misfit)})" if misfit else ""
            out.append(Problem(field=role, host=host,
                               message=f"rolling takes {role} workers out of the router while they are replaced, and "
                                       f"this deployment has {count} {role} worker: the router would have none "
                                       f"during its step (an outage){why}",
                               fix=f"add a second {role} worker ({role}[1], on spare GPUs or another host), "
                                   f"or leave spare GPUs and ports beside it for a surge worker "
                                   f"(dsv4_rollout_blue_green_gpu_offset, dsv4_rollout_blue_green_port_offset), "
                                   f"{fix_other}"))
        elif max_unavailable >= count:
            out.append(Problem(field=MAX_UNAVAILABLE_VAR,
                               message=f"{max_unavailable} {role} workers out of the router at once leaves none of "
                                       f"the {count} {role} workers serving during a step",
                               fix=f"set {MAX_UNAVAILABLE_VAR} to at most {count - 1} (1, one worker at a time, "
                                   f"is the default), {fix_other}"))
    return out


def roll_workers(spec: Deployment) -> dict[str, list[RollWorker]]:
    """Each role's workers in spec order, with the names their programs or units have."""
    defs = {(d.host, d.ports[0]): d for d in services.build_services(spec) if d.role in ROLES}
    out: dict[str, list[RollWorker]] = {}
    for role in ROLES:
        out[role] = []
        for i, w in enumerate(getattr(spec, role)):
            d = defs[(w.host, w.port)]
            out[role].append(RollWorker(path=f"{role}[{i}]", name=d.name, role=role, host=w.host, url=d.url))
    return out


def roll_steps(spec: Deployment, max_unavailable: int = 1) -> list[dict[str, Any]]:
    """The roll's steps in order (as JSON-able data), for a spec `roll_problems` accepts."""
    by_role = roll_workers(spec)
    lone = set(lone_paths(spec))
    count = max(math.ceil(len(ws) / max_unavailable) for ws in by_role.values())
    batches: list[list[RollWorker]] = [[] for _ in range(count)]
    for role in ROLES:
        workers = by_role[role]
        # Worker j of n goes to step floor(j * count / n): an even spread, the first in step 0, and never
        # more than ceil(n / count) <= max_unavailable of a role in one step.
        for j, w in enumerate(workers):
            batches[j * count // len(workers)].append(w)
    steps: list[dict[str, Any]] = []
    rolled: dict[str, list[str]] = {role: [] for role in ROLES}
    for i, batch in enumerate(batches):
        preview = [w.path for w in batch]
        for role in ROLES:
            if not any(w.role == role for w in batch):
                preview += rolled[role][-1:]
        for w in batch:
            rolled[w.role].append(w.path)
        steps.append(RollStep(step=i + 1, workers=batch, preview=preview,
                              surge=[w.path for w in batch if w.path in lone]).model_dump(mode="json"))
    return steps


def describe_steps(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per step: `step 1: prefill[0] (gpu1 sglang-dsv4-prefill-0), decode[0] (...); preview: ...`."""
    return [f"step {s['step']}: " + ", ".join(f"{w['path']} ({w['host']} {w['name']}"
                                              + (", by surge)" if w["path"] in s.get("surge", []) else ")")
                                              for w in s["workers"])
            + f"; gated behind a preview router with {', '.join(s['preview'])}" for s in steps]


def release_table(steps: Sequence[Mapping[str, Any]], old: str, new: str, done: int,
                  failed_step: int | None = None) -> list[str]:
    """The report's markdown table: which worker runs which release after each step of the roll.

    `done` steps passed their gates and joined the production router; `failed_step` (if any) is the one
    that failed: its new workers were stopped and its old ones are named as not serving (the roll stopped
    there, every other worker serving as it was).
    """
    workers = [w for s in steps for w in s["workers"]]
    step_of = {w["path"]: s["step"] for s in steps for w in s["workers"]}
    head = ["| after step | " + " | ".join(f"{w['path']} ({w['host']})" for w in workers) + " |",
            "|---|" + "---|" * len(workers)]
    rows = [_row("start", workers, lambda _w: old)]
    for s in steps[:done]:
        rows.append(_row(str(s["step"]), workers, lambda w, n=s["step"]: new if step_of[w["path"]] <= n else old))
    if failed_step is not None:
        rows.append(_row(f"{failed_step} (failed)", workers,
                         lambda w: new if step_of[w["path"]] <= done else
                         ("stopped" if step_of[w["path"]] == failed_step else old)))
    return head + rows


def _row(label: str, workers: Sequence[Mapping[str, Any]], release_of: Any) -> str:
    return f"| {label} | " + " | ".join(release_of(w) for w in workers) + " |"


# Settings of the router's unit the preview router's transient unit does not take: how it is started and
# restarted (once, by systemd-run; a preview that dies fails its step) and what names it in the journal.
NOT_CARRIED = frozenset({"Type", "ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecStopPost",
                         "ExecReload", "Restart", "RestartSec", "SyslogIdentifier"})


def unit_properties(unit_text: str) -> list[str]:
    """The `[Service]` settings of the router's rendered unit (`Key=value`, unit escaping undone) that the
    step's preview router runs with as a transient unit (`systemd-run -p`): its user, env file and hardening.
    Empty for a host without the unit (supervisord)."""
    out: list[str] = []
    section = ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and "=" in line and line.split("=", 1)[0] not in NOT_CARRIED:
            out.append(line.replace("%%", "%"))
    return out


def preview_listen(spec: Deployment) -> str:
    """Where a step's preview router listens: never every interface (it fronts workers no gate passed yet).

    Loopback when the controller, where the gates run, reaches the router's host at a loopback address or the
    production router itself listens on loopback; otherwise the one address the gates reach the host at (the
    production router's own, or the host's inventory address where that is a wildcard)."""
    assert spec.router is not None  # roll_problems refuses a deployment without one
    host, listen = spec.host(spec.router.host), spec.router.listen
    if is_loopback(host.address) or is_loopback(listen):
        return "127.0.0.1"
    return services.reach_address(host, listen)


def preview_router_argv(spec: Deployment, step: Mapping[str, Any], port: int, prometheus_port: int) -> list[str]:
    """The preview router of one step: the production router's command and settings, fronting only the
    step's `preview` workers, on `port` at `preview_listen` (metrics on `prometheus_port`, apart from the
    production router's, on loopback or that same address)."""
    assert spec.router is not None  # roll_problems refuses a deployment without one
    wanted = set(step["preview"])
    defs = {(d.host, d.ports[0]): d for d in services.build_services(spec) if d.role in ROLES}
    chosen: dict[str, list[Any]] = {role: [] for role in ROLES}
    for role in ROLES:
        for i, w in enumerate(getattr(spec, role)):
            if f"{role}[{i}]" in wanted:
                chosen[role].append((w, defs[(w.host, w.port)]))
    listen = preview_listen(spec)
    metrics = spec.router.prometheus_listen if is_loopback(spec.router.prometheus_listen) else listen
    router = spec.router.model_copy(update={"port": port, "prometheus_port": prometheus_port, "listen": listen,
                                            "prometheus_listen": metrics})
    sub = spec.model_copy(update={"prefill": [w for w, _ in chosen["prefill"]],
                                  "decode": [w for w, _ in chosen["decode"]], "router": router})
    return services.router_argv(sub, [d for _, d in chosen["prefill"]], [d for _, d in chosen["decode"]])


def compatibility_problems(serving: Deployment, new: Deployment) -> list[Problem]:
    """Why the serving release cannot be rolled into `new` (empty: it can).

    Rolling replaces each worker in place and, until the last step, routes one release's prefills with the
    other's decodes: the workers must stay where they are (host, GPUs, port, bootstrap port), the router
    must keep its own settings (it is not replaced), and every model-affecting setting must be equal in
    both releases, else a new prefill would hand KV to an old decode computed another way.
    """
    fix = f"roll out this change with {STRATEGY_VAR}: blue_green or recreate"
    out: list[Problem] = []
    for role in ROLES:
        old_ws, new_ws = list(getattr(serving, role)), list(getattr(new, role))
        if len(old_ws) != len(new_ws):
            out.append(Problem(field=role, message=f"the serving release has {len(old_ws)} {role} workers and the "
                               f"new one {len(new_ws)}: rolling replaces workers in place, it adds or removes none",
                               fix=fix))
            continue
        for i, (a, b) in enumerate(zip(old_ws, new_ws, strict=True)):
            # A server over several nodes is replaced rank by rank where each runs: its nodes stay too.
            keys = ("host", "nodes", "gpus", "port") + (("bootstrap_port",) if role == "prefill" else ())
            moved = [k for k in keys if getattr(a, k) != getattr(b, k)]
            if moved:
                how = ", ".join(f"{k} {getattr(a, k)} -> {getattr(b, k)}" for k in moved)
                out.append(Problem(field=f"{role}[{i}].{moved[0]}", host=b.host,
                                   message=f"{role}[{i}] moves ({how}): rolling replaces a worker where it runs",
                                   fix=fix))
            for key in ("index_topk", "page_size", "kv_cache_dtype", "context_length", "chat_template"):
                was, now = serving.effective(a, key), new.effective(b, key)
                if was != now:
                    out.append(Problem(field=f"{role}[{i}].{key}", host=b.host,
                                       message=f"{key} changes ({was!r} -> {now!r}): during the roll the router pairs "
                                               "new prefills with old decodes, which must compute the same model",
                                       fix=fix))
            # index_topk is in the overrides too: judged above, on its own.
            if _overrides(serving, a) != _overrides(new, b):
                out.append(Problem(field=f"{role}[{i}].model_overrides", host=b.host,
                                   message="the model overrides change: during the roll the router pairs new prefills "
                                           "with old decodes, which must compute the same model", fix=fix))
    if serving.model.path != new.model.path:
        out.append(Problem(field="model.path", message=f"the weights change ({serving.model.path} -> "
                           f"{new.model.path}): both releases would serve behind one router during the roll", fix=fix))
    if serving.router != new.router or serving.router_implementation != new.router_implementation:
        out.append(Problem(field="router", host=new.router.host if new.router else None,
                           message="the router's own settings change, and rolling keeps the serving router",
                           fix=fix))
    return out


def _overrides(spec: Deployment, worker: Any) -> dict[str, Any]:
    return {k: v for k, v in spec.model_override_args(worker).items() if k != "index_topk"}
