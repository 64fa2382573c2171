"""The `dsv4deploy` command: validate, plan and render a deployment from an Ansible inventory.

Each subcommand is two small functions, `_add_<name>` (its arguments) and `_run_<name>` (returns the
exit code), registered in SUBCOMMANDS; adding one (e.g. `gate`) is one entry there. The work itself
is done by functions that return data (`load_deployment`, `plan`, `render_files`, `write_files`);
only this module prints. Bad input exits 2 with one problem per line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dsv4deploy.inventory import InventoryError, spec_from_inventory
from dsv4deploy.memory import WorkerMemory, check_memory, problems_from_memory
from dsv4deploy.spec import Deployment, Problem, SpecError

EXIT_OK = 0
EXIT_BAD_INPUT = 2

RenderedFiles = dict[str, dict[str, str]]  # host -> path relative to the release -> content


class CliError(Exception):
    """Bad input: `lines` are printed one per line and the command exits 2."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        super().__init__("\n".join(lines))


# -- work (returns data) ---------------------------------------------------------------------------

def default_inventory() -> list[str]:
    """The inventory `ansible-playbook` would read here: ansible.cfg's (cwd or ANSIBLE_CONFIG), else the
    repository's inventory/local beside this package."""
    from ansible import constants as C

    if C.CONFIG_FILE and C.DEFAULT_HOST_LIST and all(Path(p).exists() for p in C.DEFAULT_HOST_LIST):
        return [str(p) for p in C.DEFAULT_HOST_LIST]
    repo_local = Path(__file__).resolve().parent.parent / "inventory" / "local"
    if repo_local.is_dir():
        return [str(repo_local)]
    raise CliError(["no inventory given and no ansible.cfg naming one here; fix: pass -i INVENTORY"])


def load_deployment(inventories: list[str] | None, extra_vars: list[str] | None,
                    check_fit: bool = True) -> tuple[Deployment, list[WorkerMemory]]:
    """The validated spec and its memory report; CliError listing every problem otherwise.

    With `check_fit`, a server that does not fit its GPUs is a problem too (as in preflight).
    """
    try:
        spec = spec_from_inventory(inventories or default_inventory(), extra_vars or [])
        reports = check_memory(spec)
    except SpecError as exc:
        raise CliError([str(p) for p in exc.problems]) from None
    except InventoryError as exc:
        raise CliError([str(exc)]) from None
    if check_fit and (problems := problems_from_memory(reports)):
        raise CliError([str(p) for p in problems])
    return spec, reports


def render_files(spec: Deployment) -> RenderedFiles:
    """Every file of the release per host, from dsv4deploy.render."""
    try:
        from dsv4deploy.render import RenderError, render_all
    except ImportError as exc:
        raise CliError([f"rendering is not available: dsv4deploy.render.render_all cannot be imported ({exc})"]) \
            from None
    try:
        return render_all(spec)
    except RenderError as exc:
        raise CliError([f"cannot render: {exc}"]) from None


def _file_mode(rel: str) -> int:
    try:
        from dsv4deploy.render import file_mode
    except ImportError:
        return 0o755 if rel.startswith("bin/") else 0o644
    return file_mode(rel)


def write_files(files: RenderedFiles, out: Path) -> list[Path]:
    """Write `files` as OUT/<host>/<relpath> with the modes a release gets. Returns the paths written."""
    written = []
    for host, by_path in sorted(files.items()):
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


def plan(inventories: list[str] | None, extra_vars: list[str] | None) -> Plan:
    """The plan of a deployment; files are rendered only when every server fits."""
    spec, reports = load_deployment(inventories, extra_vars, check_fit=False)
    problems = problems_from_memory(reports)
    result = Plan(spec, reports, problems)
    if not problems:
        try:
            result.files = render_files(spec)
        except CliError as exc:
            result.problems = [Problem(field="render", message=line, fix="correct the spec or the templates")
                               for line in exc.lines]
    return result


# -- presentation ----------------------------------------------------------------------------------

def format_memory(report: WorkerMemory, spec: Deployment) -> list[str]:
    """A report as indented lines: headline, then its explanation."""
    worker = dict(spec.workers())[report.field]
    verdict = "fits" if report.feasible else "DOES NOT FIT"
    head = (f"{report.field} on {report.host} (GPUs {','.join(map(str, worker.gpus))}, tp {report.tp_size}, "
            f"{report.gpu_memory_gib:g} GiB each): {verdict}")
    return [head, *(f"    {line}" for line in report.explanation)]


def format_plan(result: Plan) -> list[str]:
    """The human-readable plan."""
    spec = result.spec
    versions = sorted({f"{h}: sglang {spec.host(h).sglang_version}" for h in spec.hosts_in_use()})
    lines = [f"deployment: topology {spec.topology}, model {spec.model.served_name} ({spec.model.path}), "
             f"{'; '.join(versions)}", "memory per GPU:"]
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
    return json.dumps({
        "memory": [r.model_dump() for r in result.memory],
        "problems": [p.model_dump() for p in result.problems],
        "files": {host: sorted(by_path) for host, by_path in sorted(result.files.items())},
    }, indent=2)


# -- subcommands -----------------------------------------------------------------------------------

def _add_validate(parser: argparse.ArgumentParser) -> None:
    parser.description = "Check the spec and that every server fits its GPUs; exit 2 with the problems if not."


def _run_validate(args: argparse.Namespace) -> int:
    spec, reports = load_deployment(args.inventory, args.extra_vars)
    servers = ", ".join(f"{r.field} on {r.host}" for r in reports)
    print(f"ok: topology {spec.topology}, {servers}")
    return EXIT_OK


def _add_plan(parser: argparse.ArgumentParser) -> None:
    parser.description = "Show the memory budget of every server (explained) and the files that would be rendered."
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _run_plan(args: argparse.Namespace) -> int:
    result = plan(args.inventory, args.extra_vars)
    print(plan_as_json(result) if args.json else "\n".join(format_plan(result)))
    return EXIT_BAD_INPUT if result.problems else EXIT_OK


def _add_render(parser: argparse.ArgumentParser) -> None:
    parser.description = "Render every host's release files into OUT/<host>/."
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory to write into")


def _run_render(args: argparse.Namespace) -> int:
    spec, _ = load_deployment(args.inventory, args.extra_vars)
    try:
        written = write_files(render_files(spec), args.out)
    except OSError as exc:
        raise CliError([f"cannot write to {args.out}: {exc.strerror or exc}"]) from None
    for path in written:
        print(path)
    return EXIT_OK


@dataclass(frozen=True)
class Subcommand:
    """One `dsv4deploy <name>`: help line, argument setup, runner returning the exit code."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    reads_inventory: bool = True


SUBCOMMANDS: dict[str, Subcommand] = {
    "validate": Subcommand("check a deployment spec", _add_validate, _run_validate),
    "plan": Subcommand("memory report and the files that would be rendered", _add_plan, _run_plan),
    "render": Subcommand("write the rendered files of every host", _add_render, _run_render),
}


def build_parser(subcommands: Mapping[str, Subcommand] = SUBCOMMANDS) -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="dsv4deploy", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in subcommands.items():
        p = sub.add_parser(name, help=command.help)
        if command.reads_inventory:
            p.add_argument("-i", "--inventory", action="append", metavar="PATH",
                           help="Ansible inventory (repeatable); default: ansible.cfg's, else inventory/local")
            p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                           help="extra variables as for ansible-playbook: key=value, JSON/YAML or @file (repeatable)")
        command.add_arguments(p)
        p.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `dsv4deploy` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args._run(args)
    except CliError as exc:
        print(f"dsv4deploy {args.command}: invalid input", file=sys.stderr)
        for line in exc.lines:
            print(line, file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
