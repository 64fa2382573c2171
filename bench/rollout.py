"""Wall time of a gated PD rollout vs an unchanged re-deploy vs a gate-failure rollback, on a private
copy of the embedded simulated host (real sglang-router, real supervisord).

    .venv/bin/python bench/rollout.py [--repeat 1]

The baseline is the promoted deploy of the same run; the other figures are ratios to it. An
unchanged re-deploy should cost a small fraction (no restart, one readiness probe); a rollback
costs about two switchovers.
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


def timed(host, *args: str) -> tuple[float, int]:
    start = time.monotonic()
    proc = host.playbook("deploy.yml", *args)
    return time.monotonic() - start, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    opts = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-"))
    host = make_sim_host(root)
    rows = []
    try:
        for i in range(opts.repeat):
            # A different, harmless setting per repeat makes each first deploy a new release.
            release_args = ("-e", "index_topk=1024", "-e", f"sim_faults=warmup_s=0.{i}")
            full, rc1 = timed(host, *release_args)
            same, rc2 = timed(host, *release_args)
            back, rc3 = timed(host, "-e", "sim_faults=never_ready", "-e", "readiness_deadline_s=5")
            rows.append((full, same, back, (rc1, rc2, rc3)))
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
    for full, same, back, rcs in rows:
        print(f"promoted deploy   {full:6.1f} s  (baseline, rc {rcs[0]})")
        print(f"unchanged deploy  {same:6.1f} s  ratio {same / full:.2f} (rc {rcs[1]})")
        print(f"rolled back       {back:6.1f} s  ratio {back / full:.2f} (rc {rcs[2]}, 5 s readiness deadline)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
