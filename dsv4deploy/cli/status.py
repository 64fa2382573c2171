"""`dsv4deploy status`: what serves where (release, services, engine, the verify timer's last result), read-only."""

from __future__ import annotations

import argparse

from dsv4deploy.cli.common import EXIT_HOST_FAILED, EXIT_OK, CliError, default_inventory, load_deployment


def add_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run_status(args: argparse.Namespace) -> int:
    from dsv4deploy.plan.releases import ReleasesError
    from dsv4deploy.plan.status import as_json, format_status, query

    spec, _ = load_deployment(args.inventory, args.extra_vars, check_fit=False)
    roots = {name: host.install_root for name, host in spec.hosts.items()}
    managers = {name: host.service_manager for name, host in spec.hosts.items()}
    try:
        answers = query(args.inventory or default_inventory(), args.extra_vars, roots, managers)
    except ReleasesError as exc:
        raise CliError([str(exc)]) from None
    print(as_json(answers) if args.json else "\n".join(format_status(answers)))
    # Every host must answer: a status with a host missing is not the whole picture.
    return EXIT_OK if all(a.error is None for a in answers) else EXIT_HOST_FAILED
