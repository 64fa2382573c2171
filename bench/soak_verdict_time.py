"""Time to a soak verdict, before and after the sequential test, on a private copy of
the embedded simulated host in PD: a clean release, and a faulty one (the decode with
SGLANG_DSV4_BF16_INDEX_K=1 and the simulator's corruption at the seeds' PD rate, 0.15).

    flock /tmp/dsv4-heavy.lock .venv/bin/python bench/soak_verdict_time.py [--repeat 1]

"before" is the former rule: all 50 sessions of 4 turns, 16 at a time, judged at once (more than 2 %
corrupted fails). "after" is the soak's default now: Wald's sequential test (0.5 % against 5 %, risks
0.01 and 0.05, budget 300), which stops as soon as it decides. Each run is a deploy with the gates
readiness, smoke and soak; printed: the soak's verdict, counts and seconds (from the report), then medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.simhost import SimHost, make_sim_host

GATES = ["-e", json.dumps({"dsv4_gates_names": ["readiness", "smoke", "soak"]}), "-e", "readiness_deadline_s=60",
         "-e", "topology=pd", "-e", "index_topk=1024"]
RULES = {
    "before": ["-e", json.dumps({"soak_sequential": False, "soak_sessions": 50, "soak_max_corruption_rate": 0.02})],
    "after": [],
}


def decode_env(host: SimHost, **env: str) -> list[str]:
    """`-e` replacing the decode entry of inventory/local with extra environment."""
    base = {"SGLANG_SM120_MMA_FLASHMLA": "1", "SGLANG_SM120_TRITON_INDEXER": "1", **env}
    decode = {"host": "local", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": host.base_port + 2,
              "mem_fraction_static": 0.80, "env": base}
    return ["-e", json.dumps({"decode": [decode]})]


def verdict_times(repeat: int = 1) -> dict[str, list[float]]:
    """Per repetition, the soak's seconds to its verdict, ``{clean,faulty}_{before,after}``, and ``wrong``:
    1.0 for each run whose verdict was not the expected one (a clean release not passed, a faulty one not
    failed), else 0.0 (``python -m bench`` reports it beside the times)."""
    root = Path(tempfile.mkdtemp(prefix="dsv4-verdict-"))
    host = make_sim_host(root)
    out: dict[str, list[float]] = {"wrong": []}
    try:
        for n in range(repeat):
            for faulty in (False, True):
                fault = decode_env(host, SGLANG_DSV4_BF16_INDEX_K="1",
                                   DSV4_SIM_FAULTS="tool_call_corruption=0.15") if faulty else []
                for rule, extra in RULES.items():
                    # a new release each time (a harmless environment variable differs), so every run runs its gates
                    run = f"{n}-{int(faulty)}-{rule}"
                    host.playbook("deploy.yml", *GATES, *fault, *extra,
                                  "-e", json.dumps({"server_env_extra": {"DSV4_BENCH_RUN": run}}))
                    soak = next(g for g in host.report()["gates"] if g["name"] == "soak")
                    ev = soak["evidence"]
                    name = f"{'faulty' if faulty else 'clean'}_{rule}"
                    out.setdefault(name, []).append(soak["seconds"])
                    out["wrong"].append(float(soak["status"] != ("failed" if faulty else "passed")))
                    print(f"{'faulty' if faulty else 'clean':6} {rule:6}: {soak['status']:12} "
                          f"{ev.get('corrupted_sessions')} of {ev.get('finished')} corrupted, {soak['seconds']:6.1f} s",
                          file=sys.stderr, flush=True)
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    opts = parser.parse_args()
    times = verdict_times(opts.repeat)
    for kind in ("clean", "faulty"):
        print(f"{kind}: median {statistics.median(times[kind + '_before']):.1f} s before, "
              f"{statistics.median(times[kind + '_after']):.1f} s after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
