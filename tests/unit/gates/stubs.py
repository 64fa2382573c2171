"""Small stand-ins for sglang servers and the router, served on 127.0.0.1 for the gate tests."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    """What a stub route sees: the request and how many times this route was hit before."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    n: int  # 0 for the first call of this route


Reply = tuple[int, Any]  # (status, dict -> JSON body | str -> text body)
Route = Callable[[Request], Reply]


@dataclass
class StubServer:
    """A ThreadingHTTPServer whose routes are ``{"GET /health": fn(request) -> (status, body)}``."""

    routes: dict[str, Route]
    calls: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    auth_headers: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                stub._serve(self, "GET")

            def do_POST(self) -> None:
                stub._serve(self, "POST")

        class Server(ThreadingHTTPServer):
            # The default backlog (5) drops connections when a gate opens 16 at once (a second's SYN retry).
            request_queue_size = 128

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll interval keeps shutdown (once per test) from waiting half a second per server.
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def count(self, key: str) -> int:
        """How many times ``"METHOD /path"`` was called."""
        return self.calls.count(key)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        key = f"{method} {handler.path}"
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        with self._lock:
            n = self._counts.get(key, 0)
            self._counts[key] = n + 1
            self.calls.append(key)
            self.auth_headers.append(handler.headers.get("Authorization"))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            route = self.routes.get(key)
            body = json.loads(raw) if raw else None
            status, payload = (
                route(Request(method, handler.path, dict(handler.headers), body, n))
                if route
                else (404, {"detail": "Not Found"})
            )
        finally:
            with self._lock:
                self.in_flight -= 1
        data = payload if isinstance(payload, str) else json.dumps(payload)
        encoded = data.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
        handler.send_header("Content-Length", str(len(encoded)))
        handler.end_headers()
        # The gate may have given up on this request (deadline): nobody is left to answer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            handler.wfile.write(encoded)


def after(n: int, early: Reply, late: Reply) -> Route:
    """A route that answers ``early`` for its first ``n`` calls, then ``late``."""
    return lambda request: early if request.n < n else late


def always(reply: Reply) -> Route:
    """A route that always answers ``reply``."""
    return lambda _request: reply


def completion(content: str, prompt_tokens: int = 12) -> dict[str, Any]:
    """An OpenAI chat completion body."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2, "total_tokens": prompt_tokens + 2},
    }


# What a model can repeat back from a prompt: codes, long numbers, names of people (two capitalised
# words inside a sentence). The stub knows nothing of the gate's sentences or questions.
VALUE = re.compile(r"\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\b|\b\d{5,}\b|(?<=[a-z,:;] )[A-Z][a-z]+ [A-Z][a-z]+")
NO_IDEA = "I have no information about that."


def model(chars_per_token: float = 3.0, full_recall_tokens: int = 10**9, window_tokens: int = 0):
    """A stand-in model: repeats every value it sees; in long prompts it sees only the last ``window_tokens``."""

    def route(request: Request):
        content = request.body["messages"][-1]["content"]
        context, _, _question = content.rpartition("\n")
        tokens = int(len(content) / chars_per_token) + 8  # the chat template adds a few tokens
        seen = [m.group(0) for m in VALUE.finditer(context)
                if tokens <= full_recall_tokens or (len(content) - m.end()) / chars_per_token <= window_tokens]
        return 200, completion(" ".join(seen) or NO_IDEA, tokens)

    return route
