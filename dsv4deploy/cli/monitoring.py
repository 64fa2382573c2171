"""`dsv4deploy monitoring`: write a deployment's Prometheus scrape configuration, alert rules, Grafana dashboard."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsv4deploy.cli.common import EXIT_OK, CliError, default_inventory, load_deployment
from dsv4deploy.cli.plan import refuse_out_inside_inventory


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1]; give a share such as 0.9")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def add_monitoring(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="folder to write prometheus.yml, targets/, rules/ and grafana/ into")
    parser.add_argument("--scrape-interval", default="15s", help="Prometheus' scrape and evaluation interval")
    parser.add_argument("--node-exporter-port", type=int, default=9100,
                        help="where each host's node_exporter (the verify timer's textfile metrics) listens")
    parser.add_argument("--verify-interval-s", type=_positive, default=300,
                        help="the verify timer's dsv4_verify_timer_interval_s: stale after three of them")
    parser.add_argument("--no-verify-timer", action="store_true",
                        help="the verify timer is not installed: leave out its alerts, panels and node_exporter")
    parser.add_argument("--kv-usage", type=_fraction, default=0.9, help="KV cache usage that alerts (share)")
    parser.add_argument("--error-ratio", type=_fraction, default=0.05,
                        help="aborted requests per finished request that alerts")


def run_monitoring(args: argparse.Namespace) -> int:
    from dsv4deploy.monitoring import MonitoringSettings, monitoring_files, write_monitoring_files
    from dsv4deploy.monitoring.rules import Thresholds

    inventories = args.inventory or default_inventory()
    refuse_out_inside_inventory(args.out, inventories, "Ansible would read prometheus.yml and the targets as "
                                "inventory on the next -i there", "monitoring")
    spec, _ = load_deployment(inventories, args.extra_vars, check_fit=False)
    thresholds = Thresholds(verify_interval_s=args.verify_interval_s, kv_usage=args.kv_usage,
                            error_ratio=args.error_ratio, verify_timer=not args.no_verify_timer)
    settings = MonitoringSettings(scrape_interval=args.scrape_interval, node_exporter_port=args.node_exporter_port,
                                  thresholds=thresholds)
    files, notes = monitoring_files(spec, settings)
    try:
        written = write_monitoring_files(files, args.out)
    except OSError as exc:
        raise CliError([f"cannot write to {args.out}: {exc.strerror or exc}"]) from None
    for path in written:
        print(path)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    return EXIT_OK
