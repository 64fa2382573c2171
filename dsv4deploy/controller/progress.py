"""What the console says while a wait goes on: each worker's start-up phase read from the end of its log,
and throttled progress lines for the gates (per item only at -v, a summary at least every HEARTBEAT_S)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping

#: The longest the console stays silent during a gate (its summaries) or a task (the callback's heartbeat).
HEARTBEAT_S = 10.0
#: A slice of the readiness wait on a host: with the module's start (seconds over ssh on a busy controller)
#: the line between two slices still comes within 15 s.
WAIT_SLICE_S = 8.0

# sglang's start-up, in the order it logs it (the simulated host logs the same lines); the phase is the last
# marker found in the log's end. Real sglang prints shard progress lines while it loads weights.
_PHASES: tuple[tuple[str, str], ...] = (
    (r"Init torch distributed", "initialising torch distributed"),
    (r"Load weight begin", "loading weights"),
    (r"Loading safetensors checkpoint shards", "loading weights"),
    (r"Load weight end", "weights loaded"),
    (r"KV Cache is allocated|Memory pool end", "KV cache allocated"),
    (r"Capture cuda graph begin", "capturing CUDA graphs"),
    (r"Capture cuda graph end", "graphs captured"),
    (r"Uvicorn running on", "listening, warming up"),
    (r"fired up and ready to roll", "ready"),
)
_SHARDS = re.compile(r"checkpoint shards:\s*(\d+%)")


def startup_phase(log_tail: str) -> str:
    """The start-up phase the end of a server's log shows ('loading weights 45%', 'capturing CUDA graphs', ...),
    or its last line (cut) when it logs none of sglang's markers, or 'nothing logged yet'."""
    best, where = "", -1
    for pattern, phase in _PHASES:
        for match in re.finditer(pattern, log_tail):
            if match.start() > where:
                best, where = phase, match.start()
    if best == "loading weights":
        shards = _SHARDS.findall(log_tail)
        return f"loading weights {shards[-1]}" if shards else best
    if best:
        return best
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    return f"log: {lines[-1][:80]}" if lines else "nothing logged yet"


def wait_line(host: str, elapsed_s: float, deadline_s: float, tails: Mapping[str, str],
              healthy: Mapping[str, float], waiting_for: list[str]) -> str:
    """One console line for a readiness wait still going on a host: seconds spent and left, then per worker
    its phase (healthy ones as such), e.g.
    ``[readiness] gpu1: 20 s, 280 s left of 300 s: prefill-0 loading weights 40%; decode-0 healthy``."""
    parts = [f"{name} healthy" if name in healthy else f"{name} {startup_phase(tails.get(name, ''))}"
             for name in waiting_for]
    left = max(deadline_s - elapsed_s, 0.0)
    return f"  [readiness] {host}: {elapsed_s:.0f} s, {left:.0f} s left of {deadline_s:g} s: " + "; ".join(parts)


class Heartbeat:
    """A gate's `progress` callback for the console, used as a context manager around the gate: every item at -v
    (`verbose`); otherwise, every `every_s` seconds while the gate runs, one line of where it is (none for a gate
    that ends sooner)."""

    def __init__(self, gate: str, say: Callable[[str], None], verbose: bool, every_s: float = HEARTBEAT_S) -> None:
        self.gate, self.say, self.verbose, self.every_s = gate, say, verbose, every_s
        self.latest: tuple[int, int, str] | None = None
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def __call__(self, done: int, total: int, note: str) -> None:
        """Hear of one item (`done` of `total`, 0 when unknown)."""
        self.latest = (done, total, note)
        if self.verbose:
            self.say(f"  [{self.gate}] {done}/{total} {note}" if total else f"  [{self.gate}] {note}")

    def line(self) -> str:
        """Where the gate is now, in one line."""
        spent = f"{time.monotonic() - self.started:.0f} s so far"
        if self.latest is None:
            return f"  [{self.gate}] running, {spent}"
        done, total, note = self.latest
        count = f"{done} of {total} done, " if total else ""
        return f"  [{self.gate}] {count}{spent} (last: {note[:100]})"

    def _beat(self) -> None:
        while not self.stop.wait(self.every_s):
            self.say(self.line())
