"""The needle's price: time to its verdict and requests, per rule, on one combined simulated server.

    .venv/bin/python bench/needle_price.py [--repeat 2]

Starts the embedded host's simulated combined server (``index_topk: 1024``, time scale 1, as the default
inventory's requirement of 5500 tokens) on a free loopback port, stopped by PID, and runs the needle gate's own
function (:func:`dsv4deploy.gates.run_needle`) on the default grid, the runner's default settings, under three
rules in turn on the same server: one trial a cell (the design before trials), the former 9 of 12 (curtailed)
on every cell as the former gate asked them, and the default schedule with the curve's cells at one trial
(dsv4deploy.gates.recall_rule). Prints, per rule, the gate's seconds to its verdict
(median over the repetitions), the requests it sent, its verdict, and the ratio to one trial a cell.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsv4deploy.gates import run_needle
from dsv4deploy.gates.recall_rule import RecallRule
from dsv4deploy.gates.runner import GateSettings
from tests.ports import free_port
from tests.sim.simhelpers import Launcher, sim_env, wait_status

#: name: (rule, judge every cell). The former gate asked every cell by its rule, as no requirement does here.
RULES = {"one trial a cell (before trials)": (RecallRule(1, 1), False),
         "9 of 12 on every cell (the former gate)": (RecallRule(12, 9), True),
         "default schedule, curve cells 1 trial": (RecallRule(), False)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    opts = parser.parse_args()
    settings = GateSettings()
    required = settings.required_tokens(1024)
    root = Path(tempfile.mkdtemp(prefix="dsv4-needle-bench-"))
    launcher = Launcher(root)
    seen: dict[str, list[tuple[float, int, str]]] = {name: [] for name in RULES}
    try:
        port = free_port()
        launcher.sim(["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4", "--tp-size", "4",
                      "--host", "127.0.0.1", "--port", str(port), "--json-model-override-args",
                      '{"index_topk": 1024}'], sim_env(root / "state", "", DSV4_SIM_TIME_SCALE="1"), name="combined")
        url = f"http://127.0.0.1:{port}"
        wait_status(f"{url}/health", 200)
        for i in range(opts.repeat):
            for name, (rule, every) in RULES.items():  # alternated: drift on the machine falls on each alike
                result = run_needle(url, "dsv4", context_lengths=settings.needle_lengths,
                                    depths=settings.needle_depths, required_tokens=0 if every else required,
                                    deadline_s=settings.needle_deadline_s, concurrency=settings.needle_concurrency,
                                    size_tolerance=settings.needle_size_tolerance, seed=settings.needle_seed, rule=rule)
                seen[name].append((result.seconds, result.evidence["attempts"], result.status.value))
                print(f"rep {i + 1}: {name}: {result.seconds:.1f} s, {result.evidence['attempts']} requests, "
                      f"{result.status.value}", flush=True)
    finally:
        launcher.close()
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(s for s, _, _ in seen[next(iter(RULES))])
    print(f"grid {settings.needle_lengths} x {settings.needle_depths}, required {required} tokens, "
          f"concurrency {settings.needle_concurrency}")
    for name, runs in seen.items():
        secs = statistics.median(s for s, _, _ in runs)
        print(f"{name}: {secs:.1f} s to the verdict (median of {len(runs)}; {min(s for s, _, _ in runs):.1f}-"
              f"{max(s for s, _, _ in runs):.1f}), {runs[0][1]} requests, {runs[0][2]}, {secs / base:.2f}x one trial")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
