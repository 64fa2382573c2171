"""Needle grid throughput at concurrency 1 vs 4 against a stub server with a fixed latency.

    .venv/bin/python bench/needle_throughput.py [--latency-ms 50] [--cells-per-row 5]

Prints seconds per run and the speed-up ratio. The stub answers every request after the same
delay from a thread per request, so the ideal speed-up at concurrency 4 is close to 4; a much
smaller ratio means the gate serialises somewhere (client pool, locks, progress callback).
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dsv4deploy.gates import run_needle

# Whatever distinctive values the prompt holds (codes, long numbers, names): the stub repeats them all.
VALUE = re.compile(r"\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\b|\b\d{5,}\b|(?<=[a-z,:;] )[A-Z][a-z]+ [A-Z][a-z]+")


def serve(latency_s: float) -> ThreadingHTTPServer:
    """A chat endpoint that recalls every needle after ``latency_s``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            content = body["messages"][-1]["content"]
            time.sleep(latency_s)
            answer = {
                "choices": [{"message": {"role": "assistant", "content": " ".join(VALUE.findall(content))}}],
                "usage": {"prompt_tokens": len(content) // 4},
            }
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    return httpd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--cells-per-row", type=int, default=5)
    args = parser.parse_args()
    httpd = serve(args.latency_ms / 1000)
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    depths = [i / max(1, args.cells_per_row - 1) for i in range(args.cells_per_row)]
    lengths = [1000, 2000, 4000, 8000]
    timings = {}
    try:
        for concurrency in (1, 4):
            started = time.perf_counter()
            result = run_needle(
                url,
                "bench",
                context_lengths=lengths,
                depths=depths,
                required_tokens=0,  # no requirement: the curve only
                deadline_s=600,
                concurrency=concurrency,
                calibrate=False,
            )
            timings[concurrency] = time.perf_counter() - started
            cells = len(result.evidence["cells"])
            print(
                f"concurrency {concurrency}: {cells} cells in {timings[concurrency]:.2f} s "
                f"({cells / timings[concurrency]:.1f} cells/s), {result.status}"
            )
    finally:
        httpd.shutdown()
    print(f"speed-up 4 vs 1: {timings[1] / timings[4]:.2f}x (ideal about 4x)")


if __name__ == "__main__":
    main()
