"""The `dsv4deploy` command: validate, plan and render a deployment from an Ansible inventory; run a gate by hand.

Each subcommand is two small functions, `_add_<name>` (its arguments) and `_run_<name>` (returns the
exit code), registered in SUBCOMMANDS; adding one (e.g. `gate`) is one entry there. The work itself
is done by functions that return data (`load_deployment`, `plan`, `render_files`, `write_files`);
only this module prints. Bad input exits 2 with one problem per line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dsv4deploy.inventory import InventoryError, deployment_from_inventory
from dsv4deploy.memory import WorkerMemory, check_memory, problems_from_memory
from dsv4deploy.spec import Deployment, Problem, SpecError

EXIT_OK = 0
EXIT_HOST_FAILED = 1
EXIT_BAD_INPUT = 2
# What a shell reports for a command killed by SIGPIPE (128 + 13): `dsv4deploy plan | head` ends so, quietly.
EXIT_BROKEN_PIPE = 141

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

    The gates' variables are checked as the deploy's plan checks them (unknown names, bad values, a
    needle grid that cannot reach its requirement), and so are the rollout's (`dsv4_rollout_*`: a
    blue_green that cannot fit beside the serving release). With `check_fit`, a server that does not
    fit its GPUs is a problem too (as in preflight).
    """
    spec, reports, _ = _load(inventories, extra_vars, check_fit)
    return spec, reports


def _load(inventories: list[str] | None, extra_vars: list[str] | None,
          check_fit: bool) -> tuple[Deployment, list[WorkerMemory], dict]:
    """load_deployment, and the plan's rollout part (dsv4deploy.strategy.rollout_plan)."""
    from dsv4deploy.gate_runner import GATE_VAR_PREFIXES, GateSettingsError, settings_from_vars
    from dsv4deploy.strategy import load_rollout, rollout_plan

    try:
        spec, gate_vars = deployment_from_inventory(inventories or default_inventory(), extra_vars or [],
                                                    (*GATE_VAR_PREFIXES, "dsv4_rollout_"))
        reports = check_memory(spec)
        rollout = rollout_plan(spec, load_rollout(gate_vars))
    except SpecError as exc:
        raise CliError([str(p) for p in exc.problems]) from None
    except InventoryError as exc:
        raise CliError([str(exc)]) from None
    try:
        settings_from_vars(gate_vars, lambda value: value, None, spec_index_topk(spec))
    except GateSettingsError as exc:
        raise CliError(exc.problems) from None
    if check_fit and (problems := problems_from_memory(reports)):
        raise CliError([str(p) for p in problems])
    return spec, reports, rollout


def spec_index_topk(spec: Deployment) -> int | None:
    """The smallest index_topk a server of `spec` runs with (None: the model's default), as the plan reads it."""
    from dsv4deploy.gate_runner import plan_index_topk
    from dsv4deploy.plan import gate_targets

    return plan_index_topk(gate_targets(spec))


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
    # How the release replaces the serving one: strategy and why (dsv4deploy.strategy.rollout_plan).
    rollout: dict = field(default_factory=dict)


def plan(inventories: list[str] | None, extra_vars: list[str] | None) -> Plan:
    """The plan of a deployment; files are rendered only when every server fits."""
    spec, reports, rollout = _load(inventories, extra_vars, check_fit=False)
    problems = problems_from_memory(reports)
    result = Plan(spec, reports, problems, rollout=rollout)
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
    from dsv4deploy.plan import env_switch_lines, env_switches
    from dsv4deploy.rolling import describe_steps

    lines = [f"deployment: topology {spec.topology}, model {spec.model.served_name} ({spec.model.path}), "
             f"{'; '.join(versions)}"]
    switches = env_switch_lines(env_switches(spec.model_dump(mode="json")))
    if switches:
        lines.append("env switches added on top of the inventory's (server_env_extra, server_env_extra_by_role):")
        lines += [f"  {line}" for line in switches]
    if result.rollout:
        lines.append(f"rollout: {result.rollout['why']}")
        lines += [f"  {line}" for line in describe_steps(result.rollout.get("steps") or [])]
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


# -- gate: any gate by hand against a live server ---------------------------------------------------

EXIT_GATE_FAILED = 1
SERVER_ROLES = ("prefill", "decode", "combined")
DEFAULT_MODEL = "deepseek-v4-flash"


def _gate_defaults() -> Any:
    from dsv4deploy.gate_runner import GateSettings

    return GateSettings()


def parse_pairs(values: list[str] | None, option: str) -> list[tuple[str, str]]:
    """`role=VALUE` options as (role, value), roles checked; CliError otherwise."""
    pairs = []
    for raw in values or []:
        role, sep, value = raw.partition("=")
        if not sep or role not in SERVER_ROLES or not value:
            raise CliError([f"{option} {raw!r}: expected ROLE=VALUE with ROLE one of {', '.join(SERVER_ROLES)}"])
        pairs.append((role, value))
    return pairs


def named(pairs: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(name, role, value): names as the services are called, `prefill`, `prefill-2`, ..."""
    seen: dict[str, int] = {}
    out = []
    for role, value in pairs:
        seen[role] = seen.get(role, 0) + 1
        out.append((role if seen[role] == 1 else f"{role}-{seen[role]}", role, value))
    return out


def parse_numbers(text: str, option: str, kind: type[int] | type[float]) -> list[Any]:
    """A comma-separated list such as `1000,2000` for `option`; CliError otherwise."""
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError([f"{option} {text!r}: expected comma-separated {kind.__name__}s such as "
                        f"{'1000,2000,4000' if kind is int else '0.1,0.5,0.9'}"]) from None
    if not values:
        raise CliError([f"{option}: give at least one value"])
    return values


def read_api_key(path: Path | None) -> str | None:
    """The key in `path` (stripped), None without a path; CliError when unreadable or empty."""
    if path is None:
        return None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CliError([f"--api-key-file {path}: cannot read it ({exc.strerror or exc})"]) from None
    if not key:
        raise CliError([f"--api-key-file {path}: the file is empty"])
    return key


def checked_url(url: str | None, option: str) -> str:
    """`url` as the gates accept it; CliError naming the option otherwise."""
    from dsv4deploy.gates.http import check_url

    if url is None:
        raise CliError([f"{option} is required"])
    try:
        return check_url(url, option)
    except ValueError as exc:
        raise CliError([str(exc)]) from None


def stderr_progress(gate: str) -> Callable[[int, int, str], None]:
    """A progress callback printing `gate: [done/total] note` to stderr."""
    def progress(done: int, total: int, note: str) -> None:
        where = f"{done}/{total}" if total else str(done)
        print(f"{gate}: [{where}] {note}", file=sys.stderr, flush=True)
    return progress


def _gate_readiness(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import WorkerEndpoint, check_readiness

    url = checked_url(args.url, "--url")
    workers = [WorkerEndpoint(name=name, role=role, url=checked_url(value, "--worker"))
               for name, role, value in named(parse_pairs(args.worker, "--worker"))]
    router = url if workers else None
    if not workers:  # --url alone is a combined server
        workers = [WorkerEndpoint(name="combined", role="combined", url=url)]
    deadline = args.deadline or _gate_defaults().readiness_deadline_s
    return check_readiness(workers, router, args.model, deadline, api_key=api_key,
                           progress=stderr_progress("readiness"))


def _read_log(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CliError([f"--log-file {path}: cannot read it ({exc.strerror or exc})"]) from None


def _gate_config(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import ServerConfigInput, check_config

    servers = named(parse_pairs(args.server, "--server"))
    if not servers:
        raise CliError(["config needs at least one --server ROLE=URL"])
    logs = {name: path for name, _, path in named(parse_pairs(args.log_file, "--log-file"))}
    missing = [name for name, _, _ in servers if name not in logs]
    if missing:
        raise CliError([f"no --log-file for server {name} (give one per --server, in the same order)"
                        for name in missing])
    expected = parse_expected(args.expected)
    inputs = [ServerConfigInput(name=name, role=role, url=checked_url(url, "--server"), log_text=_read_log(logs[name]))
              for name, role, url in servers]
    return check_config(expected, inputs, api_key=api_key, timeout_s=args.deadline or 10.0,
                        deadline_s=args.deadline or _gate_defaults().config_deadline_s)


def parse_expected(text: str | None) -> dict[str, Any]:
    """--expected as a JSON object; CliError otherwise."""
    if text is None:
        raise CliError(["config needs --expected JSON, the override every server must run with, "
                        "e.g. '{\"index_topk\": 1024}' ('{}' for none)"])
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CliError([f"--expected {text!r} is not JSON: {exc}"]) from None
    if not isinstance(value, dict):
        raise CliError([f"--expected {text!r} must be a JSON object"])
    return value


def _gate_smoke(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import run_smoke

    deadline = args.deadline or _gate_defaults().smoke_deadline_s
    return run_smoke(checked_url(args.url, "--url"), args.model, deadline, api_key=api_key,
                     progress=stderr_progress("smoke"))


def _gate_needle(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import run_needle

    defaults = _gate_defaults()
    lengths = parse_numbers(args.lengths, "--lengths", int) if args.lengths else defaults.needle_lengths
    depths = parse_numbers(args.depths, "--depths", float) if args.depths else defaults.needle_depths
    required = defaults.required_tokens(args.index_topk) if args.required_tokens is None else args.required_tokens
    if required > max(lengths):
        raise CliError([f"--lengths {lengths} cannot reach the required {required} tokens: add a length of at least "
                        f"{required} (or lower --required-tokens)"])
    return run_needle(checked_url(args.url, "--url"), args.model, context_lengths=lengths, depths=depths,
                      required_tokens=required, deadline_s=args.deadline or defaults.needle_deadline_s,
                      concurrency=args.concurrency or defaults.needle_concurrency, api_key=api_key,
                      progress=stderr_progress("needle"))


def _gate_soak(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import run_soak

    d = _gate_defaults()

    def given(value: Any, default: Any) -> Any:
        return default if value is None else value

    return run_soak(checked_url(args.url, "--url"), args.model, sessions=given(args.sessions, d.soak_sessions),
                    turns=given(args.turns, d.soak_turns), concurrency=given(args.concurrency, d.soak_concurrency),
                    max_corruption_rate=given(args.max_corruption_rate, d.soak_max_corruption_rate),
                    deadline_s=args.deadline or d.soak_deadline_s, api_key=api_key, progress=stderr_progress("soak"))


GATE_RUNNERS: dict[str, Callable[[argparse.Namespace, str | None], Any]] = {
    "readiness": _gate_readiness,
    "config": _gate_config,
    "smoke": _gate_smoke,
    "needle": _gate_needle,
    "soak": _gate_soak,
}


def format_gate(result: Any) -> list[str]:
    """A result as lines: `name: status in N s: summary`, then the raw body of every failure."""
    lines = [f"{result.name}: {result.status} in {result.seconds:.1f} s: {result.summary}"]
    for failure in result.evidence.get("failures", []) if not result.passed else []:
        what = failure.get("what", "?")
        lines.append(f"  {what}: status {failure.get('status')} {failure.get('error') or ''}".rstrip())
        lines += [f"    {line}" for line in str(failure.get("body") or "").splitlines()]
    return lines


def _add_gate(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Run one gate by hand against a live server or router; exit 0 passed, 1 failed, "
                          "2 bad input. Progress goes to stderr.")
    parser.add_argument("gate", choices=sorted(GATE_RUNNERS), help="which gate")
    parser.add_argument("--url", help="the router (PD) or the combined server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"served model name (default {DEFAULT_MODEL})")
    parser.add_argument("--api-key-file", type=Path, metavar="PATH", help="file holding the API key")
    parser.add_argument("--deadline", type=float, metavar="SECONDS",
                        help="give up after this long (default: the deploy's; for config the request timeout)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON (summary to stderr)")
    parser.add_argument("--worker", action="append", metavar="ROLE=URL",
                        help="readiness: a worker behind the router at --url (repeatable); none: --url is combined")
    parser.add_argument("--server", action="append", metavar="ROLE=URL", help="config: a server (repeatable)")
    parser.add_argument("--log-file", action="append", metavar="ROLE=PATH",
                        help="config: a server's log since its start, one per --server in the same order")
    parser.add_argument("--expected", metavar="JSON",
                        help="config: the expected override, e.g. '{\"index_topk\":1024}'")
    parser.add_argument("--lengths", metavar="N,N,...", help="needle: context lengths in tokens")
    parser.add_argument("--depths", metavar="F,F,...", help="needle: needle depths between 0 and 1")
    parser.add_argument("--required-tokens", type=int, metavar="N",
                        help="needle: every cell up to N must recall, and one of at least N at every depth "
                             "(default: 5500 with --index-topk 1024, 2000 with 512)")
    parser.add_argument("--index-topk", type=int, metavar="N", help="needle: the server's index_topk, for the "
                        "default requirement (default 512, DeepSeek-V4's own)")
    parser.add_argument("--concurrency", type=int, metavar="N", help="needle cells / soak sessions at a time")
    parser.add_argument("--sessions", type=int, metavar="N", help="soak: conversations to run")
    parser.add_argument("--turns", type=int, metavar="N", help="soak: tool-call turns per conversation")
    parser.add_argument("--max-corruption-rate", type=float, metavar="RATE",
                        help="soak: highest corrupted-session rate that passes (0 to 1)")


def _run_gate(args: argparse.Namespace) -> int:
    if args.deadline is not None and args.deadline <= 0:
        raise CliError([f"--deadline {args.deadline:g}: must be positive"])
    api_key = read_api_key(args.api_key_file)
    try:
        result = GATE_RUNNERS[args.gate](args, api_key)
    except ValidationError as exc:
        raise CliError([err["msg"].removeprefix("Value error, ") for err in exc.errors()]) from None
    except ValueError as exc:
        raise CliError([str(exc)]) from None
    summary = "\n".join(format_gate(result))
    if args.json:
        print(result.model_dump_json(indent=2))
        print(summary, file=sys.stderr)
    else:
        print(summary)
    return EXIT_OK if result.passed else EXIT_GATE_FAILED


# -- init: a starter inventory ---------------------------------------------------------------------

def _add_init(parser: argparse.ArgumentParser) -> None:
    from dsv4deploy.starter import EXAMPLES

    parser.description = ("Write a starter inventory into DIR (new or empty), to use as -i DIR. `local` is the "
                          "embedded simulated GPU host (this machine, no GPU needed); the others are real "
                          "layouts to adapt.")
    parser.add_argument("dir", type=Path, metavar="DIR", help="folder to create")
    parser.add_argument("--example", choices=EXAMPLES, default="local", help="which layout (default: local)")


def _run_init(args: argparse.Namespace) -> int:
    from dsv4deploy.starter import StarterError, write_starter

    try:
        written = write_starter(args.dir, args.example)
    except StarterError as exc:
        raise CliError([str(exc)]) from None
    except OSError as exc:
        raise CliError([f"cannot write {args.dir}: {exc.strerror or exc}"]) from None
    for path in written:
        print(path)
    print(f"next: dsv4deploy validate -i {args.dir}, then "
          f"ansible-playbook dsv4.deploy.deploy -i {args.dir} -e topology=pd -e index_topk=1024", file=sys.stderr)
    return EXIT_OK


def _add_releases(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _run_releases(args: argparse.Namespace) -> int:
    from dsv4deploy.releases import ReleasesError, as_json, format_releases, query

    spec, _ = load_deployment(args.inventory, args.extra_vars, check_fit=False)
    roots = {name: host.install_root for name, host in spec.hosts.items()}
    try:
        answers = query(args.inventory or default_inventory(), args.extra_vars, roots)
    except ReleasesError as exc:
        raise CliError([str(exc)]) from None
    print(as_json(answers) if args.json else "\n".join(format_releases(answers)))
    # Every host must answer: a listing with a host missing is not the whole picture.
    return EXIT_OK if all(a.error is None for a in answers) else EXIT_HOST_FAILED


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
    "gate": Subcommand("run one gate (readiness, config, smoke, needle, soak) by hand", _add_gate, _run_gate,
                       reads_inventory=False),
    "releases": Subcommand("each host's releases: created, verified or failed, which is active (read-only)",
                           _add_releases, _run_releases),
    "init": Subcommand("write a starter inventory (local simulated host or an example layout)", _add_init,
                       _run_init, reads_inventory=False),
}


def build_parser(subcommands: Mapping[str, Subcommand] = SUBCOMMANDS) -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="dsv4deploy", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
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


def package_version() -> str:
    """The installed dsv4deploy's version (from its package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsv4deploy")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `dsv4deploy` console script."""
    args = build_parser().parse_args(argv)
    try:
        code = args._run(args)
        sys.stdout.flush()  # a reader gone (`| head`) shows here, not in the interpreter's exit
        return code
    except CliError as exc:
        print(f"dsv4deploy {args.command}: invalid input", file=sys.stderr)
        for line in exc.lines:
            print(line, file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader stopped reading: what it wanted was printed. Point stdout at /dev/null so the
        # interpreter's own final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
