"""Fixtures of the real-engine tier: the unmodified sglang 0.5.23 on CPU, deployed by the tool.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m pytest -p no:xdist -m real_engine tests/real_engine'

(as root the tier enters a private network namespace itself). Excluded from the main run by the
``real_engine`` marker (pyproject's addopts); .ci/run runs it as its own serial step. It skips, saying
why, only where its environment cannot exist: scripts/setup.sh builds it on any Debian/Ubuntu machine.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.simhost import REPO, VENV_BIN, SimHost
from tests.real_engine import netns
from tests.real_engine.enginehost import engine_python, make_engine_host
from tests.real_engine.sidebyside import FIRST_DEPLOY_GATES, observe


def _missing() -> str | None:
    python = engine_python()
    if not python.exists():
        return f"{python} is missing: run ./scripts/setup.sh (it builds the real-engine venv once per machine)"
    for tool in ("ansible-playbook", "supervisord"):
        if not (VENV_BIN / tool).exists():
            return f"{VENV_BIN / tool} is missing: run ./scripts/setup.sh"
    return None


@pytest.fixture(scope="session")
def engine_ready() -> None:
    """The tier's environment is there and this process runs in a network namespace of its own."""
    reason = _missing() or netns.enter_private_namespace()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def tiny_model(engine_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Llama's folder, written once per session by the tier's python."""
    folder = tmp_path_factory.mktemp("tiny-llama") / "model"
    subprocess.run([str(engine_python()), "-m", "tests.real_engine.model", str(folder)], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return folder


@pytest.fixture(scope="module")
def engine_host(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHost]:
    """A host of the tier for one module, stopped (every program) and removed after it."""
    root = tmp_path_factory.mktemp("enginehost")
    host = make_engine_host(root, tiny_model)
    try:
        yield host
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)




@pytest.fixture(scope="session")
def combined_first_deploy(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimHost, dict]]:
    """A host and its first deploy (combined, gated by FIRST_DEPLOY_GATES), watched from its first second.

    One real server start serves two modules: test_combined goes on from this promoted release (its perf
    figures recorded, then judged by verify), and
    test_side_by_side compares what was seen here (taken before test_combined changes anything) with
    the simulator. The host is stopped and removed at the end of the session.
    """
    root = tmp_path_factory.mktemp("enginehost-combined")
    host = make_engine_host(root, tiny_model)
    try:
        yield host, observe(host, "tiny-llama", *FIRST_DEPLOY_GATES)
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
