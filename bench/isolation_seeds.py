"""The isolation experiment on the seeds' scenarios, on a private copy of the embedded simulated host:
prints each run's verdict, why and seconds, and each scenario's verdict counts over the repetitions.

    flock /tmp/dsv4-heavy.lock .venv/bin/python bench/isolation_seeds.py [--only NAME] [--repeat 3] [--sessions 600]

- seed000 (recall): PD at index_topk 512, the needle grid to 8K at three depths, required 5500: both sides
  collapse beyond about 4K, so the experiment should read shared_path (docs/evidence.md: P >= 0.95).
  seed000-2000: the same with the requirement at 2000: both pass it, clean, the limit at 4000 named.
- seed002 (tool calls): the decode runs with SGLANG_DSV4_BF16_INDEX_K=1 and tool_call_corruption 0.095 a
  call (two turns a session: 18 % of sessions at full batch, the seeds' PD rate); the combined twin
  inherits the decode's environment, so it corrupts at 2/18 of that rate per call (about 2 % of sessions;
  dsv4deploy.sim.serving.NON_PD_SHARE, same CUDA-graph and batch conditions). Expected pd_amplified.
- truncation: the PD transfer keeps only the window (pd_transfer_truncate), index_topk 1024, the default
  grid: pd_specific, with the model's limit at 12000 named.
- clean: index_topk 1024, the default grid, no fault: clean (a false alarm otherwise), the limit at 12000 named.
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


def cases(sessions: int) -> dict[str, tuple[list[str] | None, list[str]]]:
    """Each scenario: (deploy -e, isolate -e); None: the seed002 decode environment (needs the host's ports)."""
    seed000 = ["-e", '{"needle_lengths": [1000, 2000, 4000, 5500, 8000], "needle_depths": [0.1, 0.5, 0.9]}']
    return {
        "seed000": (["-e", "index_topk=512"], ["-e", "suite=needle", "-e", "needle_required_tokens=5500", *seed000]),
        "seed000-2000": (["-e", "index_topk=512"], ["-e", "suite=needle", "-e", "needle_required_tokens=2000",
                                                     *seed000]),
        "seed002": (None, ["-e", "suite=soak", "-e", "soak_turns=2", "-e", f"dsv4_isolate_soak_sessions={sessions}"]),
        "truncation": (["-e", "index_topk=1024", "-e", "sim_faults=pd_transfer_truncate"], ["-e", "suite=needle"]),
        "clean": (["-e", "index_topk=1024"], ["-e", "suite=needle"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["seed000", "seed000-2000", "seed002", "truncation", "clean"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=600, help="soak sessions a side (seed002)")
    opts = parser.parse_args()
    for name, (deploy, isolate) in cases(opts.sessions).items():
        if opts.only and name != opts.only:
            continue
        verdicts: list[str] = []
        for _ in range(opts.repeat):
            root = Path(tempfile.mkdtemp(prefix=f"dsv4-{name}-"))
            host = make_sim_host(root)
            try:
                setup = deploy if deploy is not None else [
                    "-e", "index_topk=1024", *decode_env(host, SGLANG_DSV4_BF16_INDEX_K="1",
                                                         DSV4_SIM_FAULTS="tool_call_corruption=0.095")]
                report = experiment(host, setup, isolate)
                verdicts.append(report["verdict"])
                print(f"{name}: {report['verdict'].upper()} in {report['seconds']} s: {report['why']}", flush=True)
            finally:
                host.teardown()
                shutil.rmtree(root, ignore_errors=True)
        print(f"{name}: {', '.join(f'{v} {verdicts.count(v)}' for v in sorted(set(verdicts)))} of {len(verdicts)}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
