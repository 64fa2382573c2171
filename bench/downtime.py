"""What clients see during a rollout, for `python -m bench` (owned by the speed lane: this is a separate
function it can call; it is runnable alone).

    .venv/bin/python -m bench.downtime [--load-s 2]

`recreate_downtime`: a simulated host promotes release A off the clock, then the continuous client
(dsv4deploy/downtime.py) asks the production endpoint while the deploy replaces A with B by recreate;
its figures (sent, failed, longest gap between answers) are the outage today's default costs.
`switch_downtime`: the blue/green switch itself - two simulated PD pairs behind the real router, the
client asking it while the worker API (plugins/module_utils/router_workers.py) moves it from one pair
to the other, the old pair drained (judged from its /metrics) and stopped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ansible_collections.dsv4.deploy.plugins.module_utils.drain import wait_idle
from ansible_collections.dsv4.deploy.plugins.module_utils.router_workers import RouterWorkers, api_for
from bench.world import bench_host, run_playbook
from dsv4deploy.downtime import DowntimeClient
from tests.sim.simhelpers import PYTHON, REPO, Launcher, free_port, pd_pair, wait_status

ROUTERS = {"sglang-router": ([PYTHON, "-m", "sglang_router.launch_router"], "0.3.2"),
           "smg": ([str(REPO / ".smg-venv" / "bin" / "python"), "-m", "smg.launch_router"], "1.13.0")}

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


def switch_downtime(router: str = "sglang-router") -> dict[str, Any]:
    """Downtime figures of one blue -> green worker switch through `router`'s worker API, old pair stopped."""
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-switch-"))
    launcher = Launcher(root)
    try:
        blue, blue_procs = pd_pair(launcher, root / "gpus", 0, MODEL, timeout=60)
        green, _ = pd_pair(launcher, root / "gpus", 4, MODEL, timeout=60)
        argv, version = ROUTERS[router]
        port = free_port()
        launcher.start([*argv, "--pd-disaggregation", "--prefill", blue[0]["url"], str(blue[0]["bootstrap_port"]),
                        "--decode", blue[1]["url"], "--host", "127.0.0.1", "--port", str(port),
                        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())],
                       port=port, name=router, timeout=60)
        url = f"http://127.0.0.1:{port}"
        wait_status(f"{url}/readiness", 200, timeout=60)
        api = RouterWorkers(url, api_for(router, version))
        with DowntimeClient(url, MODEL, concurrency=2) as client:
            time.sleep(1)
            started = time.monotonic()
            for worker in green:
                api.add(worker["url"], worker["worker_type"], worker.get("bootstrap_port"))
            api.remove_many([w["url"] for w in blue])
            drained = [wait_idle(w["url"], None, 30) for w in blue]
            for proc in blue_procs:
                proc.stop()
            switch_s = time.monotonic() - started
            time.sleep(1)
        return {"strategy": "blue_green switch", "router": router, "switch_s": round(switch_s, 2),
                "drained": [d["idle"] for d in drained], **client.figures.as_dict()}
    finally:
        launcher.close()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Print the figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.downtime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--load-s", type=float, default=2.0, help="simulated load time of each server")
    parser.add_argument("--only", choices=["recreate", "switch"], help="one of the two measurements")
    args = parser.parse_args(argv)
    out = []
    if args.only != "switch":
        out.append(recreate_downtime(args.load_s))
    if args.only != "recreate":
        # smg runs from its own venv (scripts/setup.sh); without it only sglang-router is measured.
        out += [switch_downtime(router) for router in ROUTERS if router != "smg" or Path(ROUTERS["smg"][0][0]).exists()]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
