"""Ansible callback for the benchmarks: one JSON line per task and host with its start and end.

Enabled only by the benchmark (``ANSIBLE_CALLBACK_PLUGINS`` pointing here and
``ANSIBLE_CALLBACKS_ENABLED=dsv4_timing``); it writes to the file named by ``DSV4_BENCH_TIMING``.
"""

from __future__ import annotations

import json
import os
import resource
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: dsv4_timing
type: aggregate
short_description: Per-task wall times for dsv4deploy's benchmarks
description:
  - Appends one JSON line per finished task and host (name, action, status, start, end; for a gate
    task one line per gate it ran, with the gate's name, verdict and seconds) to the file named by
    the environment variable DSV4_BENCH_TIMING, and at the end the CPU seconds of the controller's
    main process; does nothing when it is unset.
requirements:
  - enable in the callbacks_enabled setting
"""


class CallbackModule(CallbackBase):
    """Records when each task started and when each host finished it."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dsv4_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._path = os.environ.get("DSV4_BENCH_TIMING")
        self._started: dict[str, float] = {}

    def _write(self, record: dict[str, Any]) -> None:
        if self._path:
            with open(self._path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def v2_playbook_on_start(self, playbook: Any) -> None:
        self._write({"event": "playbook_start", "t": time.time()})

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._started[task._uuid] = time.time()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._started[task._uuid] = time.time()

    def _done(self, result: Any, status: str) -> None:
        task = result._task
        record = {"event": "task", "task": task.get_name(), "action": task.action, "status": status,
                  "host": result._host.get_name(), "start": self._started.get(task._uuid), "end": time.time()}
        data = result._result if isinstance(result._result, dict) else {}
        gates = data.get("gates") or ([data["gate"]] if isinstance(data.get("gate"), dict) else [])
        if not gates:
            self._write(record)
        # A task that ran several gates together: one record per gate, with the task's start and end.
        for gate in gates:
            self._write({**record, "gate": gate.get("name"), "passed": gate.get("status") != "failed",
                         "seconds": gate.get("seconds")})

    def v2_runner_on_ok(self, result: Any) -> None:
        self._done(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._done(result, "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._done(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._done(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        # The controller's main process (strategy, templating of results, callbacks): on real hosts the part
        # every host shares, whatever runs on the hosts themselves.
        own = resource.getrusage(resource.RUSAGE_SELF)
        self._write({"event": "playbook_end", "t": time.time(), "cpu_main_s": own.ru_utime + own.ru_stime})
