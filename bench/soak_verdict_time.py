"""Time to a soak verdict, before and after the sequential test (issue 38 item 9), on one simulated
combined server: a clean release and a faulty one (the seeds' bf16 index-K corruption switched on).

    flock /tmp/dsv4-heavy.lock .venv/bin/python bench/soak_verdict_time.py [--repeat 2]

"before" is the former rule: all 50 sessions of 4 turns at 16 at a time, judged at once (more than 2 %
corrupted fails). "after" is the soak's default now: Wald's sequential test (0.5 % against 5 %, risks
0.01 and 0.05, budget 300), which stops as soon as it decides. Prints each run's verdict, sessions and
seconds, then the medians.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsv4deploy.gates import run_soak
from tests.ports import free_port_block

REPO = Path(__file__).resolve().parents[1]
MODEL = "deepseek-v4-flash"


def start_server(tmp: Path, faulty: bool) -> tuple[subprocess.Popen, str]:
    """A simulated combined server (tp 4, CUDA graphs on); faulty: the seeds' corruption switched on."""
    port = free_port_block(1)
    env = {**os.environ, "DSV4_SIM_STATE_DIR": str(tmp / "gpus"), "DSV4_SIM_STARTUP_S": "0.2",
           "CUDA_VISIBLE_DEVICES": "0,1,2,3",
           "DSV4_SIM_FAULTS": "tool_call_corruption=1.0" if faulty else "",
           **({"SGLANG_DSV4_BF16_INDEX_K": "1"} if faulty else {})}
    argv = [sys.executable, "-m", "dsv4deploy.sim.server", "--model-path", "/m", "--served-model-name", MODEL,
            "--tp-size", "4", "--host", "127.0.0.1", "--port", str(port), "--mem-fraction-static", "0.8",
            "--json-model-override-args", '{"index_topk":1024}', "--tool-call-parser", "deepseekv4"]
    log = (tmp / f"server-{port}.log").open("wb")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    raise SystemExit(f"the simulated server did not start; see {log.name}")


def measure(url: str, rule: str) -> tuple[str, int, int, float]:
    """(verdict, corrupted, finished, seconds) of one soak by `rule` (before or after)."""
    if rule == "before":
        result = run_soak(url, MODEL, sessions=50, turns=4, concurrency=16, max_corruption_rate=0.02,
                          sequential=False, deadline_s=900)
    else:
        result = run_soak(url, MODEL, sessions=300, turns=4, concurrency=16, max_corruption_rate=0.05,
                          deadline_s=900)
    ev = result.evidence
    return str(result.status), ev["corrupted_sessions"], ev["finished"], result.seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    opts = parser.parse_args()
    medians = {}
    with tempfile.TemporaryDirectory(prefix="dsv4-verdict-") as tmp:
        for faulty in (False, True):
            proc, url = start_server(Path(tmp), faulty)
            try:
                for rule in ("before", "after"):
                    seconds = []
                    for n in range(opts.repeat):
                        verdict, bad, done, secs = measure(url, rule)
                        seconds.append(secs)
                        print(f"{'faulty' if faulty else 'clean':6} {rule:6} run {n + 1}: {verdict:12} "
                              f"{bad:3d} of {done:3d} corrupted, {secs:6.1f} s", flush=True)
                    medians[(faulty, rule)] = statistics.median(seconds)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    for faulty in (False, True):
        print(f"{'faulty' if faulty else 'clean'}: median {medians[(faulty, 'before')]:.1f} s before, "
              f"{medians[(faulty, 'after')]:.1f} s after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
