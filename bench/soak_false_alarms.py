"""Clean PD deploys in a row on a private copy of the embedded simulated host: does the soak gate
ever raise a false alarm, and how much time does it add to a deploy?

    .venv/bin/python bench/soak_false_alarms.py [--deploys 10]

Each deploy is a new release (a harmless warm-up setting differs) with a different soak seed, so
every one runs all gates. Prints per deploy the verdict, the soak gate's result and seconds, and
the whole deploy's seconds; then the count of soak failures and the soak share of deploy time.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.simhost import make_sim_host


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploys", type=int, default=10)
    opts = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dsv4-soak-bench-"))
    host = make_sim_host(root)
    rows = []
    try:
        for i in range(opts.deploys):
            start = time.monotonic()
            proc = host.playbook("deploy.yml", "-e", "topology=pd", "-e", "index_topk=1024",
                                 "-e", f"sim_faults=warmup_s=0.{i % 10}{i // 10}", "-e", f"soak_seed={i}")
            seconds = time.monotonic() - start
            report = host.report()
            soak = next((g for g in report["gates"] if g["name"] == "soak"), None)
            rows.append((proc.returncode, report["verdict"], soak, seconds))
            status = soak["status"] if soak else "absent"
            soak_s = soak["seconds"] if soak else 0.0
            print(f"deploy {i + 1:2d}: rc {proc.returncode} {report['verdict']:<11} soak {status} in "
                  f"{soak_s:5.1f} s of {seconds:6.1f} s: {soak['summary'] if soak else ''}", flush=True)
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
    false_alarms = sum(1 for _, _, soak, _ in rows if not soak or soak["status"] != "passed")
    soak_total = sum(soak["seconds"] for _, _, soak, _ in rows if soak)
    deploy_total = sum(seconds for *_, seconds in rows)
    print(f"{len(rows)} deploys, {false_alarms} soak failures; soak {soak_total / len(rows):.1f} s per deploy "
          f"on average, {soak_total / deploy_total:.0%} of deploy time")
    return 1 if false_alarms else 0


if __name__ == "__main__":
    raise SystemExit(main())
