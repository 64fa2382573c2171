"""dsv4_router_workers run as Ansible runs it, against a stand-in for a router's worker API (sglang-router 0.3's
GET /workers) on loopback: bad entries are refused by field before the router is asked, check mode lists the
router's workers and says what a real run would add and remove while sending it nothing, and a router that
does not answer is named. The real routers (sglang-router 0.3.2, smg) are driven in tests/sim/test_router_workers.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.plugins.runner import run_module

SERVING = {"id": "0b7e4c1e-5f7a-4a8e-9d0c-111111111111", "url": "http://127.0.0.1:30001",
           "worker_type": "decode", "is_healthy": True, "bootstrap_port": None}


@pytest.fixture
def router() -> Iterator[dict]:
    """A worker API that lists one serving decode and records every request sent to it."""
    seen: list[str] = []

    class WorkerApi(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            body = json.dumps({"workers": [SERVING]}).encode() if self.command == "GET" else b"{}"
            self.send_response(200 if (self.command, self.path) == ("GET", "/workers") else 405)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), WorkerApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}", "seen": seen}
    finally:
        server.shutdown()
        server.server_close()


def workers(tmp_path: Path, url: str, check_mode: bool = False, **args: object) -> dict:
    settings = {"router": "sglang-router", "router_version": "0.3.2", "timeout_s": 5, **args}
    return run_module("dsv4_router_workers", tmp_path, check_mode=check_mode, router_url=url, **settings)


def silent_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_bad_worker_entries_are_refused_by_field(tmp_path: Path) -> None:
    """Refused before the router is asked (its URL here answers nothing)."""
    url = silent_url()
    out = workers(tmp_path, url, workers=[{"url": "127.0.0.1:30000"}])
    assert out["failed"] and "workers[0].url" in out["msg"] and "http://HOST:PORT" in out["msg"]
    out = workers(tmp_path, url, workers=[{"url": "http://127.0.0.1:1", "worker_type": "combined"}])
    assert out["failed"] and "workers[0].worker_type" in out["msg"]
    out = workers(tmp_path, url, router_version="latest", workers=[])
    assert out["failed"] and out["msg"].startswith("router_version:")
    out = workers(tmp_path, url, state="query")
    assert out["failed"] and f"router {url} did not answer GET /workers" in out["msg"]


def test_check_mode_says_what_it_would_add_and_remove_and_sends_the_router_nothing(tmp_path: Path,
                                                                                  router: dict) -> None:
    new = {"url": "http://127.0.0.1:30101", "worker_type": "decode"}
    out = workers(tmp_path, router["url"], check_mode=True, workers=[new], exclusive=True)
    assert out["changed"] and out["would"] == ["add the decode http://127.0.0.1:30101", "remove http://127.0.0.1:30001"]
    assert [w["url"] for w in out["before"]] == [w["url"] for w in out["workers"]] == ["http://127.0.0.1:30001"]
    assert router["seen"] == ["GET /workers"], "check mode only lists the workers"


def test_workers_the_router_has_already_change_nothing(tmp_path: Path, router: dict) -> None:
    out = workers(tmp_path, router["url"], workers=[{"url": SERVING["url"], "worker_type": "decode"}])
    assert not out.get("failed") and not out["changed"] and out["added"] == out["removed"] == []
    gone = workers(tmp_path, router["url"], state="absent", workers=[{"url": "http://127.0.0.1:30999"}])
    assert not gone["changed"] and gone["removed"] == []
    assert all(request == "GET /workers" for request in router["seen"]), router["seen"]
