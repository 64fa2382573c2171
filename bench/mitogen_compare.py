"""Mitogen against Ansible's own linear strategy: the same gated recreate deploy, alternating.

    .venv/bin/python -m bench.mitogen_compare [--repeat 2] [--load 5]

Needs the `mitogen` package (0.3.51+ for ansible-core 2.19-2.21). Each repetition deploys a new
release with the linear strategy and another with `mitogen_linear` on one private simulated host
(release A primed off the clock), and prints per run the wall time, the overhead over the limit
(bench/metrics.py) and the controller's CPU seconds; then the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench import metrics
from bench.world import bench_host, run_playbook


def mitogen_env() -> dict[str, str]:
    """Ansible settings that select mitogen_linear from the installed mitogen package."""
    import ansible_mitogen  # only this comparison needs it

    plugins = Path(ansible_mitogen.__file__).resolve().parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mitogen_compare", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--load", type=float, default=5.0)
    args = parser.parse_args(argv)
    strategies = {"linear": {}, "mitogen_linear": mitogen_env()}
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-mitogen-"))
    host = bench_host(root, args.load)
    rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in strategies}
    try:
        prime = run_playbook(host, "deploy.yml", "-e", "sim_faults=warmup_s=0.001")
        if prime.rc != 0:
            raise RuntimeError(prime.stdout[-3000:])
        n = 2
        for i in range(args.repeat):
            for name, env in strategies.items():
                n += 1
                run = run_playbook(host, "deploy.yml", "-e", f"sim_faults=warmup_s={0.001 * n:.3f}", env=env)
                if run.rc != 0:
                    print(f"{name} rep {i + 1}: FAILED rc {run.rc}\n{run.stdout[-3000:]}", flush=True)
                    return 1
                spent, ratio = metrics.overhead(run, args.load)
                rows[name].append((run.wall_s, ratio, run.cpu_main_s or 0.0))
                print(f"{name:15s} rep {i + 1}: wall {run.wall_s:6.2f} s, overhead {spent:5.2f} s "
                      f"({ratio:.3f} of the limit), controller main CPU {run.cpu_main_s or 0:.2f} s, "
                      f"tree CPU {run.cpu_tree_s:.2f} s, module runs {metrics.module_runs(run)}", flush=True)
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
    for name, vals in rows.items():
        wall, ratio, cpu = (statistics.median(v[k] for v in vals) for k in range(3))
        print(f"median {name:15s}: wall {wall:.2f} s, overhead/limit {ratio:.3f}, controller CPU {cpu:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
