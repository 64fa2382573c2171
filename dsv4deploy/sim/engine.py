"""Time behaviour of a serving engine: prefill and decode cost, batching between requests.

Prefill is compute-bound: prompts are processed one after another (a FIFO lock), at
``PREFILL_TOKENS_PER_S``. Decode runs all active requests as one batch: each step produces one
token per request and gets slower as the batch grows. Every duration is multiplied by
``DSV4_SIM_TIME_SCALE``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PREFILL_TOKENS_PER_S = 20000.0
DECODE_STEP_S = 0.01  # one token per request per step, batch of one
BATCH_SLOWDOWN = 0.03  # extra step time per additional request in the batch


class Engine:
    """Shared by the request threads of one server process."""

    def __init__(self, time_scale: float, slow_decode: float = 1.0) -> None:
        self.time_scale = max(0.0, time_scale)
        self.slow_decode = max(1.0, slow_decode)  # the slow_decode fault: every step this many times longer
        self._prefill_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.running = 0  # requests between admission and their last token
        self.peak_running = 0

    @contextmanager
    def request(self) -> Iterator[int]:
        """Count a request as running; yields the batch size it joined."""
        with self._count_lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            joined = self.running
        try:
            yield joined
        finally:
            with self._count_lock:
                self.running -= 1

    def prefill(self, tokens: int) -> None:
        """Spend the time a prefill of ``tokens`` takes (queued behind other prefills)."""
        with self._prefill_lock:
            time.sleep(tokens / PREFILL_TOKENS_PER_S * self.time_scale)

    def decode(self, tokens: int, on_token: Callable[[int], None] | None = None) -> list[float]:
        """Spend the time decoding ``tokens`` takes in the current batch; returns when each token came
        (monotonic seconds). ``on_token(i)`` is called as token ``i`` is ready (a stream sends it)."""
        times = []
        for i in range(tokens):
            step = DECODE_STEP_S * (1 + BATCH_SLOWDOWN * max(0, self.running - 1)) * self.slow_decode
            time.sleep(step * self.time_scale)
            times.append(time.monotonic())
            if on_token is not None:
                on_token(i)
        return times
