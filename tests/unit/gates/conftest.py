"""Fixtures for the gate tests: stub servers that are always stopped, and a dead URL."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.ports import free_port

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
    return f"http://127.0.0.1:{free_port()}"
