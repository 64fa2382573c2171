"""The ranks of a simulated server over several nodes (`--nnodes N --node-rank i --dist-init-addr H:P`).

As sglang does: rank 0 waits, before loading, until every other rank has joined at the dist-init
address (torch.distributed's rendezvous, whose store on rank 0 keeps the port for the process group's
life: a second server's rank 0 on the same dist-init port fails to start); a rank that joins loads its
part and then answers only a dummy `/health` (sglang #12297: nodes of rank 1 and up run no HTTP server of
the model). A rank that goes away afterwards breaks the collective: rank 0 logs the error and exits, like
an NCCL failure.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

from .logs import Log

# How long a rank keeps trying to reach rank 0, and how long rank 0 waits for every rank.
JOIN_TIMEOUT_S = 600.0


def _address(args: dict[str, Any]) -> tuple[str, int]:
    host, _, port = str(args.get("dist_init_addr") or "").rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def rendezvous(args: dict[str, Any], log: Log, timeout_s: float = JOIN_TIMEOUT_S) -> socket.socket:
    """Meet the other ranks; returns what each keeps open while it runs: rank 1+'s connection to rank 0,
    rank 0's listener on the dist-init port.

    Raises TimeoutError when the others do not come within `timeout_s`.
    """
    nnodes, rank = int(args.get("nnodes") or 1), int(args.get("node_rank") or 0)
    host, port = _address(args)
    if rank == 0:
        return _gather(host, port, nnodes, log, timeout_s)
    return _join(host, port, rank, log, timeout_s)


def _gather(host: str, port: int, nnodes: int, log: Log, timeout_s: float) -> socket.socket:
    try:
        listener = socket.create_server(("0.0.0.0" if host not in ("127.0.0.1", "localhost") else host, port))
    except OSError as exc:  # torch's store: the port of another server's rank 0 (or anything else) is taken
        raise OSError(f"The server socket has failed to listen on any local network address. port: {port}, "
                      f"{exc.strerror}") from None
    listener.settimeout(timeout_s)
    log.line(f"Waiting for {nnodes - 1} more node(s) to join at {host}:{port} (nnodes={nnodes})")
    joined: list[socket.socket] = []
    deadline = time.monotonic() + timeout_s
    while len(joined) < nnodes - 1:
        listener.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            raise TimeoutError(f"torch.distributed: timed out waiting for {nnodes - 1 - len(joined)} node(s) "
                               f"at {host}:{port}") from None
        rank = conn.recv(64).decode(errors="replace").strip()
        log.line(f"Node rank {rank} joined")
        joined.append(conn)
    log.line(f"All {nnodes} nodes joined")
    for conn in joined:
        threading.Thread(target=_watch_rank, args=(conn, log), daemon=True).start()
    return listener


def _watch_rank(conn: socket.socket, log: Log) -> None:
    # The rank's connection ends only when its process does: the collective is broken, as NCCL's would be.
    with contextlib.suppress(OSError):
        conn.recv(1)
    log.raw("RuntimeError: NCCL error: remote process exited or there was a network error (simulated)")
    os._exit(1)


def _join(host: str, port: int, rank: int, log: Log, timeout_s: float) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=1)
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"node rank {rank} could not reach {host}:{port}") from None
            time.sleep(0.2)
    conn.sendall(f"{rank}\n".encode())
    conn.settimeout(None)
    log.line(f"Node rank {rank} joined {host}:{port}")
    return conn
