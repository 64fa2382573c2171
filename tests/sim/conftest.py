"""Fixtures for the simulated host: processes on free loopback ports, stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from simhelpers import Launcher


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """A launcher whose processes are stopped when the test ends, pass or fail."""
    lch = Launcher(tmp_path)
    try:
        yield lch
    finally:
        lch.close()


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    """Same, shared by the tests of one module (for routers and their workers)."""
    lch = Launcher(tmp_path_factory.mktemp("procs"))
    try:
        yield lch
    finally:
        lch.close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A fresh simulated host (GPU ledger) per test."""
    return tmp_path / "host"
