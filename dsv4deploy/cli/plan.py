"""`dsv4deploy validate`, `plan` and `render`: a deployment checked, its memory budget and files shown,
its release files written. The work returns data (`plan`, `render_files`, `write_files`); the formatters
turn it into lines."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from dsv4deploy.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    CliError,
    default_inventory,
    load_deployment,
    load_with_rollout,
)
from dsv4deploy.plan.memory import WorkerMemory, problems_from_memory
from dsv4deploy.spec import Deployment, Problem

RenderedFiles = dict[str, dict[str, str]]  # host -> path relative to the release -> content


def render_files(spec: Deployment) -> RenderedFiles:
    """Every file of the release per host, from dsv4deploy.plan.render."""
    try:
        from dsv4deploy.plan.render import RenderError, render_all
    except ImportError as exc:
        raise CliError([f"rendering is not available: dsv4deploy.plan.render.render_all cannot be imported ({exc})"]) \
            from None
    try:
        return render_all(spec)
    except RenderError as exc:
        raise CliError([f"cannot render: {exc}"]) from None


def _file_mode(rel: str) -> int:
    try:
        from dsv4deploy.plan.render import file_mode
    except ImportError:
        return 0o755 if rel.startswith("bin/") else 0o644
    return file_mode(rel)


def write_files(files: RenderedFiles, out: Path) -> list[Path]:
    """Write `files` as OUT/<host>/<relpath> with the modes a release gets. Returns the paths written."""
    written = []
    for host, by_path in sorted(files.items()):
        # Validation refuses such host names; this keeps a bad one from writing outside OUT anyway.
        if not host or Path(host).is_absolute() or len(Path(host).parts) != 1 or host in (".", ".."):
            raise CliError([f"host name {host!r} cannot name a folder under {out}"])
        for rel, content in sorted(by_path.items()):
            target = out / host / rel
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise CliError([f"render produced an unsafe path {rel!r} for host {host}"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            target.chmod(_file_mode(rel))
            written.append(target)
    return written


@dataclass
class Plan:
    """What `plan` shows: the memory budget per server, the problems, the files per host."""

    spec: Deployment
    memory: list[WorkerMemory]
    problems: list[Problem]
    files: RenderedFiles = field(default_factory=dict)
    # How the release replaces the serving one: strategy and why (dsv4deploy.rollout.strategy.rollout_plan).
    rollout: dict = field(default_factory=dict)


def plan(inventories: list[str] | None, extra_vars: list[str] | None) -> Plan:
    """The plan of a deployment; files are rendered only when every server fits."""
    spec, reports, rollout = load_with_rollout(inventories, extra_vars, check_fit=False)
    problems = problems_from_memory(reports)
    result = Plan(spec, reports, problems, rollout=rollout)
    if not problems:
        try:
            result.files = render_files(spec)
        except CliError as exc:
            result.problems = [Problem(field="render", message=line, fix="correct the spec or the templates")
                               for line in exc.lines]
    return result


def format_memory(report: WorkerMemory, spec: Deployment) -> list[str]:
    """A report as indented lines: headline, then its explanation."""
    worker = dict(spec.workers())[report.field]
    verdict = "fits" if report.feasible else "DOES NOT FIT"
    head = (f"{report.field} on {report.host} (GPUs {','.join(map(str, worker.gpus))}, tp {report.tp_size}, "
            f"{report.gpu_memory_gib:g} GiB each): {verdict}")
    return [head, *(f"    {line}" for line in report.explanation)]


def version_note(version: str) -> str:
    """`0.5.24 (flags and rules of 0.5.23, the nearest known table; ...)` for a release without a table of its own."""
    from dsv4deploy.sglang import versions

    table = versions.table_version(version)
    if table is None or table == version:
        return version
    return (f"{version} (flags and rules of {table}, the nearest known table; preflight checks every command line "
            "with the host's own sglang, and refuses the host if it has none)")


def format_plan(result: Plan) -> list[str]:
    """The human-readable plan."""
    spec = result.spec
    versions = sorted({f"{h}: sglang {version_note(spec.host(h).sglang_version)}" for h in spec.hosts_in_use()})
    from dsv4deploy.plan import env_switch_lines, env_switches
    from dsv4deploy.rollout.rolling import describe_steps

    lines = [f"deployment: topology {spec.topology}, model {spec.model.served_name} ({spec.model.path}), "
             f"{'; '.join(versions)}"]
    switches = env_switch_lines(env_switches(spec.model_dump(mode="json")))
    if switches:
        lines.append("env switches added on top of the inventory's (server_env_extra, server_env_extra_by_role):")
        lines += [f"  {line}" for line in switches]
    if result.rollout:
        lines.append(f"rollout: {result.rollout['why']}")
        lines += [f"  {line}" for line in describe_steps(result.rollout.get("steps") or [])]
    from dsv4deploy.plan.host_parsers import resolution_lines
    from dsv4deploy.plan.services import build_services

    lines.append("start-up resolution by each host's sglang:")
    lines += [f"  {line}" for line in resolution_lines(spec, build_services(spec))]
    lines.append("memory per GPU:")
    for report in result.memory:
        lines += [f"  {line}" for line in format_memory(report, spec)]
    if result.problems:
        lines.append("problems:")
        lines += [f"  {p}" for p in result.problems]
        return lines
    lines.append("files that would be rendered:")
    for host, by_path in sorted(result.files.items()):
        lines.append(f"  {host}:")
        lines += [f"    {rel}" for rel in sorted(by_path)]
    return lines


def plan_as_json(result: Plan) -> str:
    """The plan as JSON (memory reports, problems, file names per host)."""
    from dsv4deploy.plan import env_switches

    return json.dumps({
        "env_switches": env_switches(result.spec.model_dump(mode="json")),
        "rollout": result.rollout,
        "memory": [r.model_dump() for r in result.memory],
        "problems": [p.model_dump() for p in result.problems],
        "files": {host: sorted(by_path) for host, by_path in sorted(result.files.items())},
    }, indent=2)


def add_validate(parser: argparse.ArgumentParser) -> None:
    parser.description = "Check the spec and that every server fits its GPUs; exit 2 with the problems if not."


def run_validate(args: argparse.Namespace) -> int:
    spec, reports = load_deployment(args.inventory, args.extra_vars)
    servers = ", ".join(f"{r.field} on {r.host}" for r in reports)
    print(f"ok: topology {spec.topology}, {servers}")
    return EXIT_OK


def add_plan(parser: argparse.ArgumentParser) -> None:
    parser.description = "Show the memory budget of every server (explained) and the files that would be rendered."
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run_plan(args: argparse.Namespace) -> int:
    result = plan(args.inventory, args.extra_vars)
    print(plan_as_json(result) if args.json else "\n".join(format_plan(result)))
    return EXIT_BAD_INPUT if result.problems else EXIT_OK


def add_render(parser: argparse.ArgumentParser) -> None:
    parser.description = "Render every host's release files into OUT/<host>/."
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory to write into")


def out_inside_inventory(out: Path, inventories: list[str]) -> str | None:
    """The inventory folder `out` lies in, if any: Ansible would read the rendered scripts there as inventory."""
    target = out.resolve()
    for source in inventories:
        if "," in source:  # a host list, not a path
            continue
        folder = Path(source).resolve()
        folder = folder if folder.is_dir() else folder.parent
        if target == folder or folder in target.parents:
            return str(source)
    return None


def refuse_out_inside_inventory(out: Path, inventories: list[str], why: str, suggested: str) -> None:
    """CliError when `out` lies in an inventory folder: `why` it must not, and a folder beside it instead."""
    inside = out_inside_inventory(out, inventories)
    if inside:
        raise CliError([f"--out {out} is inside the inventory folder {inside}: {why}; fix: write them outside it, "
                        f"e.g. --out {Path(inside).resolve().parent / suggested}"])


def run_render(args: argparse.Namespace) -> int:
    inventories = args.inventory or default_inventory()
    refuse_out_inside_inventory(args.out, inventories, "Ansible would run the rendered scripts as dynamic "
                                "inventory on the next -i there", "rendered")
    spec, _ = load_deployment(inventories, args.extra_vars)
    try:
        written = write_files(render_files(spec), args.out)
    except OSError as exc:
        raise CliError([f"cannot write to {args.out}: {exc.strerror or exc}"]) from None
    for path in written:
        print(path)
    return EXIT_OK
