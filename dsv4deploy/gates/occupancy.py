"""Each server's realised batch occupancy while a load runs: sglang's ``sglang:num_running_reqs`` gauge.

The seeds' corruption depends on batch occupancy, and a slower path runs smaller batches: two sides of an
experiment are comparable only at similar occupancy. :class:`OccupancySampler` reads every worker's
``/metrics`` (open without the API key, as sglang leaves it) about once a second in a thread while the load
runs, and summarises the running requests per worker (mean and peak over the samples). A worker whose
metrics cannot be read is listed with why, never guessed.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from dsv4deploy.gates import prom

GAUGE = "sglang:num_running_reqs"


class OccupancySampler:
    """``with OccupancySampler(workers) as s: ...; s.summary()``: running requests per worker while inside."""

    def __init__(self, workers: Sequence[Mapping[str, Any]], interval_s: float = 1.0) -> None:
        self.workers = [dict(w) for w in workers]
        self.interval_s = interval_s
        self.samples: dict[str, list[float]] = {w["name"]: [] for w in self.workers}
        self.errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="occupancy", daemon=True)

    def __enter__(self) -> OccupancySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.wait(self.interval_s):
                for w in self.workers:
                    self._read(client, w)

    def _read(self, client: httpx.Client, worker: Mapping[str, Any]) -> None:
        try:
            resp = client.get(str(worker["url"]).rstrip("/") + "/metrics")
            if resp.status_code != 200:
                self.errors[worker["name"]] = f"/metrics answered HTTP {resp.status_code} (is --enable-metrics on?)"
                return
            value = prom.parse(resp.text).values.get(GAUGE)
        except (httpx.HTTPError, prom.MetricsFormatError) as exc:
            self.errors[worker["name"]] = f"/metrics unreadable: {exc}"
            return
        if value is None:
            self.errors[worker["name"]] = f"/metrics has no {GAUGE}"
            return
        self.samples[worker["name"]].append(value)

    def summary(self) -> list[dict[str, Any]]:
        """Per worker: its role, the samples taken, mean and peak running requests (None when unread)."""
        out = []
        for w in self.workers:
            values = self.samples[w["name"]]
            out.append({"name": w["name"], "role": w.get("role"), "samples": len(values),
                        "mean_running": round(statistics.fmean(values), 2) if values else None,
                        "peak_running": max(values) if values else None,
                        "error": None if values else self.errors.get(w["name"], "no sample taken")})
        return out


def decode_occupancy(summary: Sequence[Mapping[str, Any]]) -> float | None:
    """The mean running requests of the servers that decode (PD's decodes, or the combined server)."""
    decoding = [s["mean_running"] for s in summary if s.get("role") in ("decode", "combined")
                and s.get("mean_running") is not None]
    return round(statistics.fmean(decoding), 2) if decoding else None
