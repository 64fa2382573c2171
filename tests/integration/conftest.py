"""Integration fixtures: a simulated host per test module, always torn down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.simhost import VENV_BIN, SimHost, sim_host_at


def _missing_tools() -> str | None:
    for tool in ("ansible-playbook", "supervisord", "supervisorctl"):
        if not (VENV_BIN / tool).exists():
            return f"{VENV_BIN / tool} is missing: run ./scripts/setup.sh"
    try:
        import sglang_router  # noqa: F401
    except ImportError:
        return "sglang-router is not installed: run ./scripts/setup.sh"
    return None


@pytest.fixture(scope="module")
def sim_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHost]:
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    with sim_host_at(tmp_path_factory.mktemp("simhost")) as host:
        yield host
