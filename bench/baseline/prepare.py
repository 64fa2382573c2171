"""Set the stage for the manual baseline (manual.sh), run it on the clock, and clean up after it.

The baseline switches a simulated host from one release's serve scripts to another's, exactly as
the seeds' engineer did by hand. Before the clock starts (as the engineer had them before): the
serve scripts (the releases our tool installed, so both sides start the very same servers), the
needle requests (the gate's own haystacks, same grid and seed), and the old release serving.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from dsv4deploy.gates.haystack import build_haystack
from tests.integration.simhost import SimHost

HERE = Path(__file__).resolve().parent
SERVICES = ("prefill", "decode", "router")
MODEL = "deepseek-v4-flash"


def prepare(host: SimHost, work: Path, new_release: str, lengths: list[int], depths: list[float],
            soak: dict[str, Any] | None = None) -> None:
    """Write `work`/env, the needle requests, the soak's settings (`soak`: the deploy's soak gate evidence;
    None: no soak) and an empty pid folder for switching to `new_release`."""
    (work / "pids").mkdir(parents=True, exist_ok=True)
    (work / "needle").mkdir(exist_ok=True)
    smi = [sys.executable, "-m", "dsv4deploy.sim.smi"]
    values = {
        "BIN": str(host.install_root / "releases" / new_release / "bin"),
        "ROUTER": host.endpoint,
        "MODEL": MODEL,
        "KEY_FILE": str(host.root / "api_key"),
        "SMI": " ".join(["env", f"DSV4_SIM_STATE_DIR={host.install_root / 'sim-gpus'}", *smi]),
    }
    (work / "env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items()))
    cells = [(n, d) for n in lengths for d in depths]
    for i, (tokens, depth) in enumerate(cells):
        hay = build_haystack(tokens, depth, seed=0)
        body = {"model": MODEL, "messages": [{"role": "user", "content": hay.content}], "max_tokens": 32}
        (work / "needle" / f"{i:02d}.json").write_text(json.dumps(body))
        (work / "needle" / f"{i:02d}.code").write_text(hay.code)
    if soak:
        (work / "soak").write_text(soak_options(soak) + "\n")


def soak_options(evidence: dict[str, Any]) -> str:
    """`dsv4deploy gate soak` options for the load the deploy's soak gate ran (from its evidence)."""
    return (f"--sessions {int(evidence['sessions'])} --turns {int(evidence['turns'])} "
            f"--concurrency {int(evidence['concurrency'])} "
            f"--max-corruption-rate {float(evidence['max_corruption_rate']):g} "
            f"--deadline {float(evidence['deadline_s']):g}")


def start_release(host: SimHost, work: Path, release: str, timeout_s: float = 300) -> None:
    """Start `release`'s serve scripts by hand (off the clock) and wait until the router is ready."""
    bin_dir = host.install_root / "releases" / release / "bin"
    for svc in SERVICES:
        # As the engineer did (nohup ... &): the server is not our child, so its exit is reaped by init and
        # manual.sh's `kill -0` sees it gone.
        script, log = bin_dir / f"serve-sglang-dsv4-{svc}.sh", work / f"old-{svc}.log"
        pid = subprocess.run(["bash", "-c", f"nohup bash {shlex.quote(str(script))} >> {shlex.quote(str(log))} 2>&1 "
                              "< /dev/null & echo $!"], capture_output=True, text=True, check=True).stdout.strip()
        (work / "pids" / svc).write_text(pid)
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {host.api_key}"}
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{host.endpoint}/readiness", headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the old release {release} never became ready for the baseline")


def run_manual(work: Path, timeout_s: float = 1200) -> tuple[float, int, str]:
    """manual.sh on the clock: (seconds, exit code, output)."""
    started = time.monotonic()
    proc = subprocess.run(["bash", str(HERE / "manual.sh"), str(work)], capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                                                  f"{os.environ.get('PATH', '')}"})
    return time.monotonic() - started, proc.returncode, proc.stdout + proc.stderr


def stop_all(work: Path) -> None:
    """Stop what the baseline started, by the PIDs it recorded."""
    for svc in SERVICES:
        pidfile = work / "pids" / svc
        if not pidfile.exists():
            continue
        pid = int(pidfile.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            for _ in range(300):
                os.kill(pid, 0)
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        pidfile.unlink()

