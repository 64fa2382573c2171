"""The occupancy sampler reads sglang's running-requests gauge from each server while a load runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dsv4deploy.gates.occupancy import OccupancySampler, decode_occupancy


@pytest.fixture
def metrics_server() -> Iterator[tuple[str, list[int]]]:
    running = [4]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_response(404)
                self.end_headers()
                return
            body = (f"# TYPE sglang:num_running_reqs gauge\n"
                    f'sglang:num_running_reqs{{model_name="m"}} {running[0]}\n').encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", running
    finally:
        server.shutdown()
        server.server_close()


def test_mean_and_peak_running_requests_per_worker_and_an_unreadable_one_named(metrics_server) -> None:
    url, running = metrics_server
    workers = [{"name": "decode", "role": "decode", "url": url},
               {"name": "gone", "role": "prefill", "url": "http://127.0.0.1:9"}]
    def until(seen: Callable[[], bool]) -> None:  # the machine may be loaded: wait for samples, not a time
        deadline = time.monotonic() + 20
        while not seen() and time.monotonic() < deadline:
            time.sleep(0.02)

    with OccupancySampler(workers, interval_s=0.05) as sampler:
        until(lambda: len(sampler.samples["decode"]) >= 2)
        running[0] = 20
        until(lambda: 20 in sampler.samples["decode"])
    decode, gone = sampler.summary()
    assert decode["samples"] >= 3 and 4 < decode["mean_running"] < 20 and decode["peak_running"] == 20
    assert gone["mean_running"] is None and "unreadable" in gone["error"]
    assert decode_occupancy([decode, gone]) == decode["mean_running"]
