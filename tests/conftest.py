"""The order test modules are handed to pytest-xdist's workers (`-n 3 --dist loadfile`, as CI runs).

loadfile makes each module one unit of work. xdist queues them by number of tests, most first, so the
modules that deploy (a few tests, minutes each) come last, where one of them can keep a worker busy
while the others have nothing left. With tests/durations.json (each module's measured seconds, written
from a run's junit xml by scripts/loadfile_schedule.py --write) the queue is the modules heaviest first,
and the short unit modules fill the workers' ends. Within a module the tests keep their order; while the
table is empty ({}, until a whole run's figures are recorded) or without workers, nothing is reordered.

It also lets every Python the tests start cache its bytecode (below).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# The tests start hundreds of Pythons (ansible-playbook and its forks, the simulated servers and nvidia-smi,
# the gates' clients) that import the same modules of this clone. With PYTHONDONTWRITEBYTECODE set (as in
# some CI images) none of them caches its bytecode, so each compiled dsv4deploy, the plugins and the sim
# anew: about 5% of a deploy's CPU. Python reads and writes its caches safely from many processes at once;
# .gitignore, the sdist and the collection's copies all leave __pycache__ out. Set before the xdist workers
# start, so they and everything they run inherit it.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

DURATIONS = Path(__file__).with_name("durations.json")
# A module not in the table yet (new since it was written): the order of its tier's usual weight.
TIER_SECONDS = {"systemd": 300.0, "integration": 150.0, "real_engine": 150.0}


def module_seconds(module: str, table: dict[str, float]) -> float:
    """The seconds a module (path from the repository root) is expected to take, for ordering only."""
    if module in table:
        return table[module]
    parts = Path(module).parts
    return TIER_SECONDS.get(parts[1], 0.0) if len(parts) > 2 else 0.0


def durations() -> dict[str, float]:
    """tests/durations.json: module -> seconds ({} when it is empty or missing)."""
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> None:
    """Keep the collected order (below) for loadfile; xdist's own scheduler then runs it (None: the next
    implementation, xdist's, makes the scheduler)."""
    if config.getvalue("dist") == "loadfile" and durations():
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, heaviest module first (every worker collects the same order)."""
    table = durations()
    if not hasattr(config, "workerinput") or not table:
        return
    weight: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if module not in weight:
            weight[module] = module_seconds(module, table)
    items.sort(key=lambda item: -weight[item.nodeid.split("::", 1)[0]])  # stable: a module's order is kept
