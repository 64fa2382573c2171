"""Fixtures for the gate tests: stub servers that are always stopped, and a dead URL."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from .stubs import Route, StubServer


@pytest.fixture
def stub() -> Iterator[Callable[[dict[str, Route]], StubServer]]:
    """Start stub servers; every one is shut down after the test, passed or not."""
    servers: list[StubServer] = []

    def start(routes: dict[str, Route]) -> StubServer:
        server = StubServer(routes)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def dead_url() -> str:
    """A URL on a free local port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
