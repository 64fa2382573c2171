"""The `dsv4deploy` command: validate, plan and render a deployment from an Ansible inventory; run a gate by hand.

Each subcommand is two small functions, `add_<name>` (its arguments) and `run_<name>` (returns the
exit code), in a module of its own (`cli_plan`: validate, plan, render; `cli_gate`, `cli_releases`,
`cli_status`, `cli_init`), registered in SUBCOMMANDS here; adding one is one entry there. What they share (exit
codes, `CliError`, `load_deployment`) is `cli_common`. The work itself is done by functions that
return data (`load_deployment`, `plan`, `render_files`, `write_files`); only the `run_` functions and
`main` print. Bad input exits 2 with one problem per line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dsv4deploy.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_HOST_FAILED,
    EXIT_OK,
    CliError,
    default_inventory,
    load_deployment,
    spec_index_topk,
)
from dsv4deploy.cli.firewall import add_firewall, run_firewall
from dsv4deploy.cli.gate import add_gate, run_gate
from dsv4deploy.cli.init import add_init, run_init
from dsv4deploy.cli.monitoring import add_monitoring, run_monitoring
from dsv4deploy.cli.plan import (
    Plan,
    RenderedFiles,
    add_plan,
    add_render,
    add_validate,
    format_memory,
    format_plan,
    plan,
    plan_as_json,
    render_files,
    run_plan,
    run_render,
    run_validate,
    write_files,
)
from dsv4deploy.cli.releases import add_releases, run_releases
from dsv4deploy.cli.status import add_status, run_status

# Re-exported: callers and tests use them as dsv4deploy.cli.<name>.
__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_HOST_FAILED",
    "EXIT_OK",
    "SUBCOMMANDS",
    "CliError",
    "Plan",
    "RenderedFiles",
    "Subcommand",
    "build_parser",
    "default_inventory",
    "format_memory",
    "format_plan",
    "load_deployment",
    "main",
    "package_version",
    "plan",
    "plan_as_json",
    "render_files",
    "spec_index_topk",
    "write_files",
]


@dataclass(frozen=True)
class Subcommand:
    """One `dsv4deploy <name>`: help line, argument setup, runner returning the exit code."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    reads_inventory: bool = True


SUBCOMMANDS: dict[str, Subcommand] = {
    "validate": Subcommand("check a deployment spec", add_validate, run_validate),
    "plan": Subcommand("memory report and the files that would be rendered", add_plan, run_plan),
    "render": Subcommand("write the rendered files of every host", add_render, run_render),
    "gate": Subcommand("run one gate (readiness, config, smoke, needle, soak, accuracy) by hand", add_gate, run_gate,
                       reads_inventory=False),
    "releases": Subcommand("each host's releases: created, verified or failed, which is active (read-only)",
                           add_releases, run_releases),
    "status": Subcommand("what serves where: each host's release, services, engine, verify timer (read-only)",
                         add_status, run_status),
    "monitoring": Subcommand("write Prometheus scrape targets, alert rules and a Grafana dashboard", add_monitoring,
                             run_monitoring),
    "firewall": Subcommand("write each host's nftables ruleset: the API to the clients, the rest to the deployment's "
                           "hosts", add_firewall, run_firewall),
    "init": Subcommand("write a starter inventory (local simulated host or an example layout)", add_init,
                       run_init, reads_inventory=False),
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
                           help="Ansible inventory (repeatable); required unless an ansible.cfg here names one "
                                "(a clone of this repository falls back to its inventory/local)")
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


