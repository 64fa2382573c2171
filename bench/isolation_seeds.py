"""The isolation experiment on the seeds' two scenarios, on a private copy of the embedded simulated host
(issue 38 item 6): prints each experiment's verdict and why, with its p-values and intervals.

    flock /tmp/dsv4-heavy.lock .venv/bin/python bench/isolation_seeds.py [--only seed000|seed002]

- seed000 (recall): PD at index_topk 512, needle grid to 8K at three depths; both sides collapse beyond
  about 4K, so the comparison of the two curves should read shared_path (the model's own limit).
- seed002 (tool calls): the decode runs with SGLANG_DSV4_BF16_INDEX_K=1 and the simulator's corruption at
  the seeds' PD rate; the combined twin inherits the decode's environment, so it corrupts at 2/18 of that
  rate per tool call (dsv4deploy.sim.serving.NON_PD_SHARE, same CUDA-graph and batch conditions), and both
  sides run dsv4_isolate_soak_sessions soak sessions of 2 turns, compared as docs/evidence.md says.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.simhost import READINESS, SimHost, make_sim_host

FAST = ["-e", "readiness_deadline_s=60", "-e", "smoke_deadline_s=60", "-e", "needle_deadline_s=600",
        "-e", "soak_deadline_s=900"]


def decode_env(host: SimHost, **env: str) -> list[str]:
    """`-e` replacing the decode entry of inventory/local with extra environment."""
    base = {"SGLANG_SM120_MMA_FLASHMLA": "1", "SGLANG_SM120_TRITON_INDEXER": "1", **env}
    decode = {"host": "local", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": host.base_port + 2,
              "mem_fraction_static": 0.80, "env": base}
    return ["-e", json.dumps({"decode": [decode]})]


def experiment(host: SimHost, deploy: list[str], isolate: list[str]) -> dict:
    proc = host.playbook("deploy.yml", "-e", "topology=pd", *READINESS, *FAST, *deploy)
    if proc.returncode != 0:
        raise SystemExit(f"the PD deploy failed:\n{proc.stdout[-3000:]}")
    start = time.monotonic()
    proc = host.playbook("isolate.yml", *FAST, *deploy, *isolate, timeout=1800)
    seconds = time.monotonic() - start
    report = json.loads((host.reports / "isolate" / "latest" / "report.json").read_text())
    report["seconds"] = round(seconds, 1)
    if proc.returncode != 0:
        print(proc.stdout[-3000:])
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["seed000", "seed002"])
    opts = parser.parse_args()
    cases = {
        "seed000": (["-e", "index_topk=512"],
                    ["-e", "suite=needle", "-e", "needle_required_tokens=2000",
                     "-e", '{"needle_lengths": [1000, 2000, 4000, 5500, 8000], "needle_depths": [0.1, 0.5, 0.9]}']),
        "seed002": (None, ["-e", "suite=soak", "-e", "soak_turns=2"]),
    }
    for name, (deploy, isolate) in cases.items():
        if opts.only and name != opts.only:
            continue
        root = Path(tempfile.mkdtemp(prefix=f"dsv4-{name}-"))
        host = make_sim_host(root)
        try:
            if deploy is None:
                deploy = ["-e", "index_topk=1024", *decode_env(host, SGLANG_DSV4_BF16_INDEX_K="1",
                                                               DSV4_SIM_FAULTS="tool_call_corruption=0.15")]
            report = experiment(host, deploy, isolate)
            print(f"{name}: {report['verdict'].upper()} in {report['seconds']} s: {report['why']}", flush=True)
            for side in ("pd", "combined"):
                for gate in report["sides"][side]["gates"]:
                    if gate["name"] in ("soak", "needle"):
                        print(f"  {side} {gate['name']}: {gate['status']}: {gate['summary'][:300]}")
        finally:
            host.teardown()
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
