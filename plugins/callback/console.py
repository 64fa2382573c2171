"""Stdout callback: Ansible's default output, quieter at the default verbosity, ending with the run's outcome."""

from __future__ import annotations

DOCUMENTATION = r"""
name: console
type: stdout
short_description: The default output without its noise, ending with what the run did and why
description:
  - Ansible's C(default) stdout callback, with three changes at the default verbosity (at C(-v) and above it
    prints what C(default) prints, the ending included).
  - Tasks that were skipped, or ended C(ok) without a message, are not printed, nor are includes; a task of
    dsv4.deploy that prints while it runs (the readiness wait, the gates, the report) gets its banner at its
    start, so its lines sit under it.
  - A failure whose result is hidden (C(no_log)) once the rollout has named its outcome is not printed where
    it happens - the outcome says it.
  - The run ends with its outcome as its last lines, after the recap - the rollout's line (C(PROMOTED),
    C(UNCHANGED), C(ROLLED BACK), C(FAILED) ...), then, for a failure, the gate or stage that failed, the
    hosts, the end of each failed service's log and the fix, as far as the run recorded them.
extends_documentation_fragment:
  - default_callback
  - result_format_callback
"""

EXAMPLES = r"""
# ANSIBLE_STDOUT_CALLBACK=dsv4.deploy.console, or in the ansible.cfg beside the playbooks:
# [defaults]
# stdout_callback = dsv4.deploy.console
"""

import threading
import time
from typing import Any

from ansible import constants as C
from ansible.playbook.block import Block
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

# The rollout's outcome, as the role hands it on (set_fact): what this callback prints last.
OUTCOME_FACTS = ("dsv4_rollout_verdict", "dsv4_rollout_line", "dsv4_rollout_serving", "dsv4_rollout_context")
# Actions that print while they run: their banner comes first.
PRINTING_ACTIONS = frozenset({"dsv4_worker_probe", "dsv4_run_gates", "dsv4_write_report", "dsv4_isolate_report"})
LOG_LINES = 8  # of each failed service's log, in the ending
HEARTBEAT_S = 10.0  # the longest a running task stays silent


class CallbackModule(DefaultCallback):
    """The default callback, quieter at verbosity 0, ending with the outcome."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "dsv4.deploy.console"

    def __init__(self) -> None:
        super().__init__()
        self.running: tuple[Any, float] | None = None  # the task under way and when it started
        self.said = time.monotonic()  # when this callback last printed (the heartbeat's clock)
        self.lock = threading.Lock()
        self.beat = threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True).start()
        self.outcome: dict[str, Any] = {}
        self.cause: dict[str, str] = {}  # the last failure a block rescued, as the task said it

    def _quiet(self) -> bool:
        return self._display.verbosity < 1

    def get_option(self, k: str) -> Any:
        """The default callback's options, with skipped and ok results hidden at verbosity 0."""
        if k in ("display_skipped_hosts", "display_ok_hosts") and self._quiet():
            return False
        return super().get_option(k)

    def _task_start(self, task: Any, prefix: str | None = None) -> None:
        super()._task_start(task, prefix=prefix)
        with self.lock:
            printing = task.action.rsplit(".", 1)[-1] in PRINTING_ACTIONS
            # Those that print while they run say their own progress; any other is watched by the heartbeat.
            self.running = None if printing else (task, time.monotonic())
            self.said = time.monotonic()
            if self._quiet() and printing:
                self._print_task_banner(task)

    def _heartbeat(self) -> None:
        """A task that runs long with nothing printed gets its banner and a line of how long it has run, at
        least every HEARTBEAT_S: a wait on a host (GPU memory released, a bake, a drain) is never silent."""
        while not self.beat.wait(1.0):
            with self.lock:
                if self.running is None or time.monotonic() - self.said < HEARTBEAT_S:
                    continue
                task, started = self.running
                if self._last_task_banner != task._uuid:
                    self._print_task_banner(task)
                self._display.display(f"  ... still running, {time.monotonic() - started:.0f} s so far")
                self.said = time.monotonic()

    def v2_playbook_on_include(self, included_file: Any) -> None:
        """Includes are said at -v only."""
        if not self._quiet():
            super().v2_playbook_on_include(included_file)

    def v2_runner_on_ok(self, result: Any) -> None:
        """Remember the outcome facts; print what has something to say (a message, a change)."""
        self.said = time.monotonic()
        facts = result.result.get("ansible_facts") or {}
        self.outcome.update({k: facts[k] for k in OUTCOME_FACTS if k in facts})
        if self._quiet() and isinstance(result.task, TaskInclude):
            return
        if self._quiet() and not result.result.get("changed") and result.result.get("msg") \
                and result.task.action.rsplit(".", 1)[-1] == "debug":
            if result.result["msg"] == self.outcome.get("dsv4_rollout_line"):
                return  # the run's last line
            if self._last_task_banner != result.task._uuid:
                self._print_task_banner(result.task)
            self._display.display(str(result.result["msg"]))
            return
        super().v2_runner_on_ok(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        """At verbosity 0, a failure a block rescues is one line here (the rollout names its cause last), and a
        hidden one after the outcome is named is not printed at all."""
        self.said = time.monotonic()
        if self._quiet() and self.outcome.get("dsv4_rollout_line") and "censored" in result.result:
            return
        if self._quiet() and not ignore_errors and rescued(result.task):
            self.cause = {"host": self.host_label(result), "task": result.task.get_name().strip(),
                          "msg": str(result.result.get("msg") or "")}
            if self._last_task_banner != result.task._uuid:
                self._print_task_banner(result.task)
            self._display.display(f"failed: [{self.host_label(result)}]: {first_line(result.result.get('msg'))} "
                                  "(the run's outcome, last, says what it did about it)", color=C.COLOR_ERROR)
            return
        super().v2_runner_on_failed(result, ignore_errors)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        """The recap, then the outcome as the last lines."""
        self.beat.set()
        with self.lock:
            self.running = None
        super().v2_playbook_on_stats(stats)
        for line in ending(self.outcome, self.cause):
            self._display.display(line)


def rescued(task: Any) -> bool:
    """Whether a block around `task` has a rescue (the failure is handled there, not the end of the run)."""
    parent = getattr(task, "_parent", None)
    while parent is not None:
        if isinstance(parent, Block) and parent.rescue:
            return True
        parent = getattr(parent, "_parent", None)
    return False


def first_line(msg: Any, width: int = 160) -> str:
    """The first line of a task's message, cut to `width`."""
    text = str(msg or "failed").strip().splitlines()[0] if str(msg or "").strip() else "failed"
    return text if len(text) <= width else text[:width] + "..."


def ending(outcome: dict[str, Any], cause: dict[str, str] | None = None) -> list[str]:
    """The last lines of a run: its outcome line, then for a failure the gate, hosts, logs and fix recorded, and
    the failed task's whole message (`cause`) where the outcome line holds only part of it."""
    line = str(outcome.get("dsv4_rollout_line") or "").strip()
    if not line:
        return []
    out = ["", line]
    msg = (cause or {}).get("msg", "")
    if msg and " ".join(msg.split()) not in " ".join(line.split()):
        out.append(f"  {cause['task']} on {cause['host']}:")
        out += [f"    {x}" for x in msg.strip().splitlines()]
    verdict = str(outcome.get("dsv4_rollout_verdict") or "")
    failure = (outcome.get("dsv4_rollout_context") or {}).get("failure") or {}
    if verdict in ("promoted", "unchanged") or not isinstance(failure, dict) or not failure:
        return out
    if failure.get("gate") or failure.get("stage"):
        out.append(f"  failed at: {failure.get('gate') or failure.get('stage')}"
                   + (f" (task: {failure['task']})" if failure.get("task") else ""))
    hosts = failure.get("hosts") or ([failure["host"]] if failure.get("host") else [])
    if hosts:
        out.append(f"  host: {', '.join(map(str, hosts))}")
    for host, log in sorted((failure.get("logs") or {}).items()):
        lines = [str(x) for x in (log if isinstance(log, list) else str(log).splitlines()) if str(x).strip()]
        if lines:
            out.append(f"  log on {host} (last {min(len(lines), LOG_LINES)} lines):")
            out += [f"    {x[:300]}" for x in lines[-LOG_LINES:]]
    if outcome.get("dsv4_rollout_serving"):
        out.append(f"  serving now: {outcome['dsv4_rollout_serving']}")
    if failure.get("fix"):
        out.append(f"  fix: {failure['fix']}")
    return out
