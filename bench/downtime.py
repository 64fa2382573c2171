"""What clients see during a rollout, for `python -m bench` (owned by the speed lane: this is a separate
function it can call; it is runnable alone).

    .venv/bin/python -m bench.downtime [--load-s 2]

`recreate_downtime`: a simulated host promotes release A off the clock, then the continuous client
(dsv4deploy/downtime.py) asks the production endpoint while the deploy replaces A with B by recreate;
its figures (sent, failed, longest gap between answers) are the outage today's default costs - the
figure blue_green (0 failed, tests/sim/test_router_workers.py for the switch itself) is measured against.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.world import bench_host, run_playbook
from dsv4deploy.downtime import DowntimeClient

MODEL = "deepseek-v4-flash"  # inventory/local's served name


def recreate_downtime(load_s: float = 2.0) -> dict[str, Any]:
    """Downtime figures of one recreate rollout A -> B on a private simulated host."""
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-downtime-"))
    host = bench_host(root, load_s)
    try:
        first = run_playbook(host, "deploy.yml", "-e", "sim_faults=warmup_s=0.001")
        if first.rc != 0:
            raise RuntimeError(f"deploy A failed:\n{first.stdout[-3000:]}")
        with DowntimeClient(host.endpoint, MODEL, api_key=host.api_key, timeout_s=10) as client:
            second = run_playbook(host, "deploy.yml", "-e", "sim_faults=warmup_s=0.002")
        if second.rc != 0:
            raise RuntimeError(f"deploy B failed:\n{second.stdout[-3000:]}")
        return {"strategy": "recreate", "load_s": load_s, "rollout_s": round(second.wall_s, 2),
                **client.figures.as_dict()}
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Print the figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.downtime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--load-s", type=float, default=2.0, help="simulated load time of each server")
    args = parser.parse_args(argv)
    print(json.dumps(recreate_downtime(args.load_s), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
