"""`dsv4deploy firewall`: write each host's nftables ruleset, its ports taken from the inventory."""

from __future__ import annotations

import argparse
from pathlib import Path

from dsv4deploy.cli.common import EXIT_OK, CliError, default_inventory, load_deployment
from dsv4deploy.cli.plan import refuse_out_inside_inventory


def _port_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        pair = int(low), int(high)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not LOW-HIGH, e.g. 32768-60999") from None
    if not 1 <= pair[0] <= pair[1] <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port range within 1-65535, low first")
    return pair


def add_firewall(parser: argparse.ArgumentParser) -> None:
    """The options of `dsv4deploy firewall`."""
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to write <host>.nft into")
    parser.add_argument("--client", action="append", default=[], metavar="CIDR",
                        help="who may reach the API (router, or the combined server); repeatable. Without it the "
                             "API port is left open to everyone")
    parser.add_argument("--peer", action="append", default=[], metavar="CIDR",
                        help="reaches every port like the deployment's own hosts (the controller, whose gates "
                             "reach the rolling preview router on a free port); repeatable")
    parser.add_argument("--ephemeral-ports", type=_port_range, default=None, metavar="LOW-HIGH",
                        help="the PD hosts' net.ipv4.ip_local_port_range, where mooncake and ZMQ listen "
                             "(default 32768-60999)")


def run_firewall(args: argparse.Namespace) -> int:
    """Write OUT/<host>.nft for every host of the active topology; print the paths."""
    from dsv4deploy.plan.firewall import DEFAULT_EPHEMERAL, FirewallError, firewall_files, parse_networks

    inventories = args.inventory or default_inventory()
    refuse_out_inside_inventory(args.out, inventories, "Ansible would read the rulesets as inventory on the next "
                                "-i there", "firewall")
    spec, _ = load_deployment(inventories, args.extra_vars, check_fit=False)
    try:
        files = firewall_files(spec, parse_networks(args.client, "--client"), parse_networks(args.peer, "--peer"),
                               args.ephemeral_ports or DEFAULT_EPHEMERAL)
    except FirewallError as exc:
        raise CliError([str(p) for p in exc.problems]) from None
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for host, text in files.items():
            path = args.out / f"{host}.nft"
            path.write_text(text, encoding="utf-8")
            print(path)
    except OSError as exc:
        raise CliError([f"cannot write to {args.out}: {exc.strerror or exc}"]) from None
    return EXIT_OK
