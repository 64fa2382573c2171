"""Action plugin: the dsv4_lock module plus what only the controller can know (is the holder alive?).

A lock held by a dead run (same controller, process gone or replaced) or an empty lock file is taken
over, with one line saying whose run died and in which phase; a live holder fails the task naming it.
Its options are the module's (modules/dsv4_lock.py, ansible-doc dsv4.deploy.dsv4_lock), which validates them.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


def process_start(pid: int) -> str:
    """The start time of `pid` in clock ticks since boot ('' when there is no such process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def controller_identity() -> dict[str, Any]:
    """This controller: host name, the ansible-playbook process (the worker's parent) and its start time."""
    pid = os.getppid()
    return {"controller": socket.gethostname(), "controller_pid": pid, "controller_start": process_start(pid)}


def holder_is_dead(holder: dict[str, Any], me: dict[str, Any]) -> str | None:
    """Why the holder's run is known to be dead, or None (alive, or on another controller: cannot tell)."""
    if not holder:
        return "the lock file is empty or unreadable (its writer died, or it was not written by dsv4deploy)"
    if holder.get("controller") != me["controller"] or not holder.get("controller_pid"):
        return None
    pid = int(holder["controller_pid"])
    started = process_start(pid)
    if not started:
        return f"its controller process {pid} is gone"
    if holder.get("controller_start") and started != holder["controller_start"]:
        return f"its controller process {pid} is gone (the pid now belongs to another process)"
    return None


class ActionModule(ActionBase):
    """Runs dsv4_lock on the host; on a held lock, checks the holder on the controller."""

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        # The module of the same name: dsv4.deploy.dsv4_lock in the collection, else the library's.
        module = self._task.resolved_action or "dsv4_lock"
        me = controller_identity()
        args.update(me)
        module_result = self._execute_module(module_name=module, module_args=args, task_vars=task_vars)
        holder = module_result.get("holder")
        if (args.get("state", "present") == "present" and module_result.get("failed")
                and holder is not None and "takeover_from" not in args):
            why = holder_is_dead(holder, me)
            if why:
                retry = {**args, "takeover_from": holder.get("run_id", "")}
                module_result = self._execute_module(module_name=module, module_args=retry, task_vars=task_vars)
                if not module_result.get("failed"):
                    line = (f"previous run {holder.get('run_id') or '?'} of {holder.get('owner') or 'unknown'} died "
                            f"during phase '{holder.get('phase', '?')}' ({why}); took over its lock, this run "
                            "repairs what it left")
                    # On stdout with the play (warnings go to stderr): the operator reads it in order.
                    display.display(f"  {task_vars.get('inventory_hostname', '')}: {line}")
                    module_result["msg"] = line
            else:
                module_result["msg"] = self._held_message(module_result, holder, me, str(args.get("path")))
        result.update(module_result)
        return result

    @staticmethod
    def _held_message(module_result: dict, holder: dict[str, Any], me: dict[str, Any], path: str) -> str:
        base = module_result.get("msg", "")
        if holder.get("controller") not in (None, "", me["controller"]):
            hint = (f"it was taken on controller {holder['controller']}, which this run cannot check: if no run is "
                    f"alive there, remove {path} on the host and retry")
        else:
            hint = "that run is alive: wait for it to finish"
        if module_result.get("stale"):
            hint += f" (the lock is {module_result.get('age_s', '?')} s old)"
        return f"{base}; {hint}"
