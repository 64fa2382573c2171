"""HTTP routes of the simulated server (stdlib ``http.server``), sglang's paths and bodies."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .flags import version_key
from .serving import ServingError, TokenStream, response_body, run_generation

if TYPE_CHECKING:
    from .server import SimServer

GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")
OPEN_PREFIXES = ("/health", "/ready", "/metrics")  # stay open with --api-key
FLUSH_BODY = ("Cache flushed.\nPlease check backend logs for more details. (When there are "
              "running or waiting requests, the operation will not be performed.)\n")


class Handler(BaseHTTPRequestHandler):
    """One connection; ``self.server.sim`` is the :class:`SimServer`."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def sim(self) -> SimServer:
        """The server state."""
        return self.server.sim  # type: ignore[attr-defined]

    # -- plumbing -------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:
        """Access and error lines in uvicorn's shape, through the server's log."""
        self.sim.log.raw(f"INFO:     {self.client_address[0]}:{self.client_address[1]} - {format % args}")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """``INFO:     127.0.0.1:5555 - "GET /health HTTP/1.1" 200``."""
        self.log_message('"%s" %s', self.requestline, str(code))

    def _send(self, status: int, body: bytes, ctype: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _empty(self, status: int) -> None:
        self._send(status, b"", ctype="text/plain")

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _authorized(self, path: str) -> bool:
        key = self.sim.settings.args.get("api_key")
        if not key or path.startswith(OPEN_PREFIXES):
            return True
        return self.headers.get("authorization", "") == f"Bearer {key}"

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        body = self._read_body() if method == "POST" else b""
        if not self._authorized(path):
            self._json(401, {"error": "Unauthorized"})
            return
        route = ROUTES.get((method, path))
        if self.sim.dummy_health:
            # A node of rank 1 and up: a dummy /health, nothing else (sglang #12297).
            self._empty(200) if path == "/health" else self._json(404, {"detail": "Not Found"})
            return
        if route is None:
            if method == "GET" and path.startswith("/v1/models/"):
                self._model_card(path[len("/v1/models/"):])
                return
            known = any(p == path for _, p in ROUTES)
            self._json(405 if known else 404,
                       {"detail": "Method Not Allowed" if known else "Not Found"})
            return
        route(self, body)

    def do_GET(self) -> None:
        """GET routes."""
        self._dispatch("GET")

    def do_POST(self) -> None:
        """POST routes."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """/generate also takes PUT in sglang."""
        self._dispatch("POST")

    # -- routes --------------------------------------------------------------------------
    def health(self, _body: bytes) -> None:
        """503 while starting, warming up or shutting down; 200 when up."""
        sim = self.sim
        if sim.shutting_down:
            sim.log.line("Health check request received during shutdown. Returning 503.")
        self._empty(200 if sim.ready and not sim.shutting_down else 503)

    def ready(self, _body: bytes) -> None:
        """200 only when up; the route exists only from sglang 0.5.23 (FastAPI's 404 before)."""
        if version_key(self.sim.version) < (0, 5, 23):
            self._json(404, {"detail": "Not Found"})
            return
        self._empty(200 if self.sim.ready and not self.sim.shutting_down else 503)

    def server_info(self, _body: bytes) -> None:
        """Every resolved server arg plus version and internal state."""
        self._json(200, self.sim.server_info())

    def model_info(self, _body: bytes) -> None:
        """Model path, served name, PD mode, architecture, parsers."""
        self._json(200, self.sim.model_info())

    def models(self, _body: bytes) -> None:
        """``/v1/models``: one card."""
        self._json(200, {"object": "list", "data": [self._card()]})

    def _card(self) -> dict[str, Any]:
        name = self.sim.settings.served_name
        return {"id": name, "object": "model", "created": int(self.sim.startup_time),
                "owned_by": "sglang", "root": name, "parent": None,
                "max_model_len": self.sim.settings.context_length}

    def _model_card(self, name: str) -> None:
        if name != self.sim.settings.served_name:
            self._json(404, {"object": "error", "message": f"The model `{name}` does not exist.",
                             "type": "NotFoundError", "param": None, "code": 404})
            return
        self._json(200, self._card())

    def flush_cache(self, _body: bytes) -> None:
        """Always succeeds in the simulation."""
        self._send(200, FLUSH_BODY.encode(), ctype="text/plain; charset=utf-8")

    def metrics(self, _body: bytes) -> None:
        """sglang's metrics (dsv4deploy.sim.metrics) when ``--enable-metrics``; 404 otherwise."""
        if not self.sim.settings.args.get("enable_metrics"):
            self._json(404, {"detail": "Not Found"})
            return
        if self.sim.env.faults.metrics_error:
            # A metrics endpoint that fails while the server serves: watchers cannot judge it.
            self._send(500, b"Internal Server Error", ctype="text/plain; charset=utf-8")
            return
        text = self.sim.metrics.text(self.sim.engine.running, self.sim.tokens_in_use)
        self._send(200, text.encode(), ctype="text/plain; version=0.0.4; charset=utf-8")

    def generation(self, raw: bytes) -> None:
        """chat/completions/generate, with sglang's error bodies."""
        path = urlsplit(self.path).path
        started = time.time()
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            self._error(path, 400, f"Invalid JSON body: {exc}")
            return
        stream = TokenStream(self.sim, path, body, started, self._start_stream, self._write_stream) \
            if body.get("stream") else None
        try:
            prompt, answer, out_tokens = run_generation(self.sim, path, body, stream)
        except ServingError as exc:
            if stream is not None and stream.begun:  # the head is sent: end the stream (sglang sends an error event)
                self._write_stream(b"data: " + json.dumps({"error": {"message": exc.message}}).encode() + b"\n\n")
                return
            self._error(path, exc.status, exc.message, exc.error_type)
            return
        if stream is not None:
            stream.finish(prompt, answer, out_tokens)
            return
        self._json(200, response_body(self.sim, path, prompt, answer, out_tokens, started, body))

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _write_stream(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _error(self, path: str, status: int, message: str, error_type: str | None = None) -> None:
        if status >= 500:
            self.sim.log.line(f"[http_server] Error: {message}")
        if path == "/generate":
            self._json(status, {"error": {"message": message}})
            return
        err_type = error_type or ("BadRequestError" if status == 400 else str(status))  # sglang 0.5.23's
        self._json(status, {"object": "error", "message": message, "type": err_type,
                            "param": None, "code": status})


ROUTES = {
    ("GET", "/health"): Handler.health,
    ("GET", "/health_generate"): Handler.health,
    ("GET", "/ready"): Handler.ready,
    ("GET", "/server_info"): Handler.server_info,
    ("GET", "/get_server_info"): Handler.server_info,
    ("GET", "/model_info"): Handler.model_info,
    ("GET", "/get_model_info"): Handler.model_info,
    ("GET", "/v1/models"): Handler.models,
    ("GET", "/flush_cache"): Handler.flush_cache,
    ("POST", "/flush_cache"): Handler.flush_cache,
    ("GET", "/metrics"): Handler.metrics,
    **{("POST", p): Handler.generation for p in GENERATION_PATHS},
}
