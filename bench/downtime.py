"""What clients see during a rollout: part of `python -m bench` (full runs), and runnable alone.

    .venv/bin/python -m bench.downtime [--load-s 2]

`rollout_downtime`: a simulated host promotes release A off the clock, then the continuous client
(dsv4deploy/rollout/downtime.py) asks the production endpoint while the deploy playbook replaces A with B by
`recreate`, `blue_green` or `rolling` (each on a layout where it runs: tp 2 per role, 1P1D or 2P2D), with
every default gate; its figures (sent, failed, longest gap between answers) are what clients see. The
full `python -m bench` runs all three.
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

import yaml

from ansible_collections.dsv4.deploy.plugins.module_utils.drain import wait_idle
from ansible_collections.dsv4.deploy.plugins.module_utils.router_workers import RouterWorkers, api_for
from bench.world import bench_host, run_playbook
from dsv4deploy.rollout.downtime import DowntimeClient
from tests.integration.simhost import SimHost, assign_ports
from tests.ports import free_port_block
from tests.sim.simhelpers import PYTHON, REPO, Launcher, free_port, pd_pair, wait_status

ROUTERS = {"sglang-router": ([PYTHON, "-m", "sglang_router.launch_router"], "0.3.2"),
           "smg": ([str(REPO / ".smg-venv" / "bin" / "python"), "-m", "smg.launch_router"], "1.13.0")}

MODEL = "deepseek-v4-flash"  # inventory/local's served name


# The port block a layout takes: its own 5 ports plus the other slot's (blue_green) or the preview router's
# (rolling), shifted by this offset.
PORT_OFFSET = 10
STRATEGIES = ("recreate", "blue_green", "rolling")


def _layout(host: SimHost, strategy: str) -> None:
    """Give `host` a layout where `strategy` runs: tp 2 per role on H200s, so two releases fit on the 8 simulated GPUs
    (blue_green: 1P1D on GPUs 0-3, the other slot on 4-7) or a role has two workers to roll (rolling: 2P2D)."""
    base = host.base_port = free_port_block(2 * PORT_OFFSET)
    assign_ports(host.inventory, base, install_root=host.install_root)
    dep_path = host.inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())

    def worker(gpus: list[int], port: int, **extra: Any) -> dict[str, Any]:
        return {"host": "local", "gpus": gpus, "tp_size": 2, "port": port, "mem_fraction_static": 0.8, **extra}

    dep["prefill"] = [worker([0, 1], base + 1, bootstrap_port=base + 3)]
    dep["decode"] = [worker([2, 3], base + 2)]
    if strategy == "rolling":
        dep["prefill"].append(worker([4, 5], base + 5, bootstrap_port=base + 6))
        dep["decode"].append(worker([6, 7], base + 7))
    # H200s (141 GiB): tp 2 holds the FP4 weights with room for a KV pool, where 96 GiB cards do not.
    dep.update(dsv4_rollout_strategy=strategy, dsv4_rollout_blue_green_port_offset=PORT_OFFSET,
               dsv4_rollout_measure_downtime=True, gpu_memory_gib=141)
    if strategy == "blue_green":
        dep["dsv4_rollout_blue_green_gpu_offset"] = 4
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))


def rollout_downtime(strategy: str, load_s: float) -> dict[str, Any]:
    """One gated rollout A -> B by `strategy` through the deploy playbook on a private simulated host, with
    the continuous client asking the production endpoint throughout (the report's own downtime figures
    beside it). Release A is promoted off the clock."""
    root = Path(tempfile.mkdtemp(prefix=f"dsv4-bench-{strategy}-"))
    host = bench_host(root, load_s)
    _layout(host, strategy)
    try:
        first = run_playbook(host, "deploy.yml", "-e", "sim_faults=warmup_s=0.001",
                             "-e", '{"dsv4_gates_names": ["readiness"]}')
        if first.rc != 0:
            raise RuntimeError(f"{strategy}: deploy A failed:\n{first.stdout[-3000:]}")
        with DowntimeClient(host.endpoint, MODEL, api_key=host.api_key, timeout_s=10, concurrency=2) as client:
            second = run_playbook(host, "deploy.yml", "-e", "sim_faults=warmup_s=0.002")
        if second.rc != 0:
            raise RuntimeError(f"{strategy}: deploy B failed:\n{second.stdout[-3000:]}")
        return {"strategy": strategy, "load_s": load_s, "rollout_s": round(second.wall_s, 2),
                "verdict": second.report.get("verdict"), "report_downtime": second.report.get("downtime"),
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
    parser.add_argument("--only", choices=["recreate", "switch", *STRATEGIES[1:]],
                        help="one measurement: recreate, the bare switch, or a blue_green or rolling rollout")
    args = parser.parse_args(argv)
    out = [rollout_downtime(s, args.load_s) for s in STRATEGIES if args.only in (None, s)]
    if args.only in (None, "switch"):
        # smg runs from its own venv (scripts/setup.sh); without it only sglang-router is measured.
        out += [switch_downtime(router) for router in ROUTERS if router != "smg" or Path(ROUTERS["smg"][0][0]).exists()]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
