"""sglang's Prometheus metrics of one simulated server, written as Prometheus text (stdlib only).

The names and types are sglang's (`--enable-metrics`, see SGLANG_CONTRACT.md "Metrics"); the values
are what this process really did: every generation's measured time to first token, inter-token gaps
and end-to-end latency, its token counts, aborts and KV transfer failures. The bucket bounds are
finer than sglang's defaults at the low end, where the simulator's scaled-down times fall; readers
take quantiles from whatever buckets a server reports.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

# 0.1 ms to about 100 s, a factor 1.5 apart: fine enough that a 3x slower decode moves the p50.
BUCKETS: tuple[float, ...] = tuple(round(0.0001 * 1.5 ** i, 7) for i in range(35))


@dataclass
class Histogram:
    """Cumulative buckets, sum and count, as Prometheus histograms are exposed."""

    bounds: tuple[float, ...] = BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        """Count one observation."""
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        """The ``_bucket``, ``_sum`` and ``_count`` samples."""
        out, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            out.append(f'{name}_bucket{{{labels},le="{bound!r}"}} {running}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


HISTOGRAMS = {
    "sglang:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "sglang:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "sglang:e2e_request_latency_seconds": "Histogram of End-to-end request latency in seconds",
}
COUNTERS = {
    "sglang:num_requests_total": "Number of requests processed.",
    "sglang:num_aborted_requests_total": "Number of requests aborted.",
    "sglang:prompt_tokens_total": "Number of prefill tokens processed.",
    "sglang:generation_tokens_total": "Number of generation tokens processed.",
    "sglang:num_transfer_failed_reqs_total": "Number of failed transfer requests.",
    "sglang:num_bootstrap_failed_reqs_total": "Number of failed bootstrap requests.",
}
GAUGES = {
    "sglang:num_running_reqs": "The number of running requests.",
    "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
    "sglang:gen_throughput": "The generation throughput (token/s).",
    "sglang:token_usage": "The token usage.",
    "sglang:kv_transfer_latency_ms": "The KV transfer latency of the last request (ms).",
}
THROUGHPUT_WINDOW_S = 10.0  # gen_throughput: tokens generated over the last this many seconds


class Metrics:
    """Shared by the request threads of one server; :meth:`text` is the ``/metrics`` body."""

    def __init__(self, model_name: str, max_tokens: int) -> None:
        self._labels = f'model_name="{model_name}"'
        self._max_tokens = max(1, max_tokens)
        self._lock = threading.Lock()
        self._hist = {name: Histogram() for name in HISTOGRAMS}
        self._counts = dict.fromkeys(COUNTERS, 0.0)
        self._gauges = dict.fromkeys(GAUGES, 0.0)
        self._recent: list[tuple[float, int]] = []  # (when, tokens) for gen_throughput

    def request_done(self, prompt_tokens: int, output_tokens: int, ttft_s: float | None,
                     gaps_s: list[float], e2e_s: float) -> None:
        """One finished generation, with what it really took."""
        now = time.monotonic()
        with self._lock:
            self._counts["sglang:num_requests_total"] += 1
            self._counts["sglang:prompt_tokens_total"] += prompt_tokens
            self._counts["sglang:generation_tokens_total"] += output_tokens
            if ttft_s is not None:
                self._hist["sglang:time_to_first_token_seconds"].observe(ttft_s)
            for gap in gaps_s:
                self._hist["sglang:inter_token_latency_seconds"].observe(gap)
            self._hist["sglang:e2e_request_latency_seconds"].observe(e2e_s)
            self._recent = [(t, n) for t, n in self._recent if now - t <= THROUGHPUT_WINDOW_S]
            self._recent.append((now, output_tokens))

    def aborted(self) -> None:
        """A generation that ended in an error."""
        with self._lock:
            self._counts["sglang:num_aborted_requests_total"] += 1

    def transfer_failed(self) -> None:
        """A decode whose KV never arrived."""
        with self._lock:
            self._counts["sglang:num_transfer_failed_reqs_total"] += 1

    def transfer_latency(self, ms: float) -> None:
        """How long the last KV transfer took."""
        with self._lock:
            self._gauges["sglang:kv_transfer_latency_ms"] = ms

    def text(self, running: int, used_tokens: int) -> str:
        """The Prometheus text exposition (format 0.0.4) of every metric."""
        now = time.monotonic()
        lab = self._labels
        with self._lock:
            recent = sum(n for t, n in self._recent if now - t <= THROUGHPUT_WINDOW_S)
            self._gauges["sglang:num_running_reqs"] = running
            self._gauges["sglang:gen_throughput"] = recent / THROUGHPUT_WINDOW_S
            self._gauges["sglang:token_usage"] = min(1.0, used_tokens / self._max_tokens)
            lines: list[str] = []
            for name, doc in HISTOGRAMS.items():
                lines += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *self._hist[name].lines(name, lab)]
            for name, doc in COUNTERS.items():
                lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name}{{{lab}}} {self._counts[name]!r}"]
            for name, doc in GAUGES.items():
                value = float(self._gauges[name])
                lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{{{lab}}} {value!r}"]
        return "\n".join(lines) + "\n"
