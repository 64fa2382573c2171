"""The perf gate's risks measured on this machine: how often it refuses a clean release (false alarms),
and how often it refuses one whose decode is 1.5 times slower (its power), on the embedded host's
servers.

    flock /tmp/dsv4-heavy.lock nice -n 5 .venv/bin/python bench/perf_false_alarms.py [--runs 25]

Two PD stacks as the embedded host runs them (the simulated prefill and decode at its time scale, 1,
with --enable-metrics, behind the real sglang-router), started here on free loopback ports and stopped
by PID: one clean, one with DSV4_SIM_FAULTS=slow_decode=1.5 (the simulator's fault, as
``-e sim_faults=slow_decode=1.5`` sets it on the embedded host). Each run calls the gate's own function
(:func:`dsv4deploy.gates.perf.run_perf`, the runner's default settings) three times: the clean stack
recorded as the last good release, the clean stack judged against it (a failure is a false alarm), and
the slow stack judged against it (a failure is a detection). Prints each run and then both rates with
their exact 95 % intervals.
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

from dsv4deploy.gates.evidence import exact_interval
from dsv4deploy.gates.perf import PerfLoad, run_perf
from dsv4deploy.gates.result import GateStatus
from dsv4deploy.gates.runner import GateSettings
from tests.ports import free_port
from tests.sim.simhelpers import PYTHON, Launcher, sim_env, wait_status

SLOW = "slow_decode=1.5"


def start_stack(launcher: Launcher, state_dir: Path, faults: str) -> tuple[str, list[dict[str, str]]]:
    """Prefill (GPUs 0-3) and decode (4-7) with metrics behind sglang-router; its URL and the workers."""
    pp, pb, dp, rp = free_port(), free_port(), free_port(), free_port()
    common = ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4", "--tp-size", "4",
              "--host", "127.0.0.1", "--enable-metrics"]
    env = sim_env(state_dir, faults, DSV4_SIM_TIME_SCALE="1")
    launcher.sim([*common, "--port", str(pp), "--disaggregation-mode", "prefill",
                  "--disaggregation-bootstrap-port", str(pb)], env, name="prefill", wait=False)
    launcher.sim([*common, "--port", str(dp), "--disaggregation-mode", "decode", "--base-gpu-id", "4"], env,
                 name="decode", wait=False)
    for port in (pp, dp):
        wait_status(f"http://127.0.0.1:{port}/health", 200, timeout=60)
    launcher.start([PYTHON, "-m", "sglang_router.launch_router", "--pd-disaggregation",
                    "--prefill", f"http://127.0.0.1:{pp}", str(pb), "--decode", f"http://127.0.0.1:{dp}",
                    "--host", "127.0.0.1", "--port", str(rp), "--worker-startup-check-interval", "1",
                    "--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"],
                   port=rp, name="router", timeout=60)
    workers = [{"name": "prefill", "url": f"http://127.0.0.1:{pp}"}, {"name": "decode", "url": f"http://127.0.0.1:{dp}"}]
    return f"http://127.0.0.1:{rp}", workers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--json", type=Path, help="also write every run's judgements here (p-values, factors)")
    opts = parser.parse_args()
    settings = GateSettings()
    load = PerfLoad(settings.perf_requests, settings.perf_concurrency, settings.perf_prompt_tokens,
                    settings.perf_output_tokens)

    def gate(url: str, workers: list[dict[str, str]], baseline: dict | None):
        # One key for both stacks: the slow one stands for the next release on the same hosts.
        return run_perf(url, "dsv4", workers=[{"name": w["name"], "url": w["url"]} for w in workers], key="bench",
                        load=load, tolerance=settings.perf_tolerance, noise_floor_s=settings.perf_noise_floor_s,
                        baseline=baseline, deadline_s=settings.perf_deadline_s,
                        ttft_tolerance=settings.perf_ttft_tolerance, rounds=settings.perf_rounds,
                        alpha=settings.perf_alpha)

    root = Path(tempfile.mkdtemp(prefix="dsv4-perf-bench-"))
    launcher = Launcher(root)
    false_alarms = detections = 0
    seconds: list[float] = []
    kept: list[dict] = []
    try:
        clean_url, clean_workers = start_stack(launcher, root / "clean", "")
        slow_url, slow_workers = start_stack(launcher, root / "slow", SLOW)
        print(f"perf settings: {settings.perf_rounds} rounds of {load.key()}, alpha {settings.perf_alpha}, "
              f"band {settings.perf_tolerance:.0%} (TTFT {settings.perf_ttft_tolerance:.0%})", flush=True)
        for i in range(opts.runs):
            base = gate(clean_url, clean_workers, None)
            baseline = {**base.evidence["figures"], "release": f"clean-{i}"}
            start = time.monotonic()
            clean = gate(clean_url, clean_workers, baseline)
            seconds.append(time.monotonic() - start)
            slow = gate(slow_url, slow_workers, baseline)
            kept.append({"clean": clean.evidence.get("judgements"), "slow": slow.evidence.get("judgements")})
            false_alarms += clean.status == GateStatus.FAILED
            detections += slow.status == GateStatus.FAILED
            print(f"run {i + 1:2d}: clean {clean.status.value:<7} slow {slow.status.value:<7} "
                  f"({seconds[-1]:.1f} s a gate) clean: {clean.summary[:160]}", flush=True)
            if clean.status == GateStatus.FAILED:
                print(f"        false alarm: {clean.summary}", flush=True)
            if slow.status != GateStatus.FAILED:
                print(f"        missed: {slow.summary}", flush=True)
    finally:
        launcher.close()
        shutil.rmtree(root, ignore_errors=True)
    runs = len(seconds)
    if opts.json:
        opts.json.write_text(json.dumps(kept, indent=1))
    fa_lo, fa_hi = exact_interval(false_alarms, runs)
    d_lo, d_hi = exact_interval(detections, runs)
    print(f"{runs} runs: false alarms {false_alarms}/{runs} ({false_alarms / runs:.1%}, 95% interval "
          f"{fa_lo:.1%}-{fa_hi:.1%}); {SLOW} refused {detections}/{runs} ({detections / runs:.1%}, 95% interval "
          f"{d_lo:.1%}-{d_hi:.1%}); gate {sorted(seconds)[runs // 2]:.1f} s median")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
