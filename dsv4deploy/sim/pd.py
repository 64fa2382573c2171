"""Prefill/decode disaggregation: the prefill's bootstrap port and the decode's KV fetch.

Wire protocol (simulated, one request per TCP connection): the decode sends one JSON line
``{"room": <bootstrap_room>, "wait_s": <seconds>}``; the prefill answers one JSON line
``{"kv": <PromptKV wire form>}`` once that room's prefill is done, or ``{"error": "..."}``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
import time

from .recall import PromptKV

FAILURE_REASON = "Failed to get kvcache from prefill instance, it might be dead"


class KVTransferError(Exception):
    """The decode could not get a room's KV (sglang's wording in ``str()``)."""

    def __init__(self, room: int, reason: str) -> None:
        super().__init__(reason)
        self.room = room
        self.reason = reason

    def __str__(self) -> str:
        return f"KVTransferError(bootstrap_room={self.room}): {self.reason}"


class RoomStore:
    """KV computed by a prefill, kept per bootstrap room until a decode takes it."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._rooms: dict[int, tuple[dict, float]] = {}
        self._cond = threading.Condition()

    def publish(self, room: int, kv: PromptKV) -> None:
        """Make ``room``'s KV available."""
        with self._cond:
            now = time.monotonic()
            for r in [r for r, (_, exp) in self._rooms.items() if exp < now]:
                del self._rooms[r]
            self._rooms[room] = (kv.to_json(), now + self._ttl_s)
            self._cond.notify_all()

    def take(self, room: int, wait_s: float) -> dict | None:
        """Wait up to ``wait_s`` for ``room`` and remove it; None if it never came."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            while room not in self._rooms:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 0.5))
            return self._rooms.pop(room)[0]


class _BootstrapHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        store: RoomStore = self.server.store  # type: ignore[attr-defined]
        try:
            line = self.rfile.readline(65536)
            req = json.loads(line)
            room, wait_s = int(req["room"]), float(req.get("wait_s", 30.0))
        except (ValueError, KeyError, TypeError, OSError):
            self._reply({"error": "bad bootstrap request"})
            return
        data = store.take(room, wait_s)
        self._reply({"kv": data} if data is not None else {"error": FAILURE_REASON})

    def _reply(self, obj: dict) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(json.dumps(obj).encode() + b"\n")


class BootstrapServer(socketserver.ThreadingTCPServer):
    """The prefill's bootstrap listener (``--disaggregation-bootstrap-port``)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, host: str, port: int, store: RoomStore) -> None:
        super().__init__((host, port), _BootstrapHandler)
        self.store = store


def fetch_kv(host: str, port: int, room: int, timeout_s: float) -> PromptKV:
    """Decode side: get ``room``'s KV from the prefill at host:port within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error = FAILURE_REASON
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise KVTransferError(room, last_error)
        try:
            with socket.create_connection((host, port), timeout=min(left, 5.0)) as sock:
                sock.settimeout(left + 1.0)
                sock.sendall(json.dumps({"room": room, "wait_s": left}).encode() + b"\n")
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        break
                    buf += chunk
            reply = json.loads(buf or b"{}")
        except (OSError, ValueError) as exc:
            last_error = f"{FAILURE_REASON} ({exc.__class__.__name__}: {exc})"
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            continue
        if "kv" in reply:
            return PromptKV.from_json(reply["kv"])
        raise KVTransferError(room, str(reply.get("error", FAILURE_REASON)))
