"""Action plugin: the dsv4_lock module plus what only the controller can know (is the holder alive?).

A lock held by a dead run (same controller - host name, boot and process namespace - with its process gone
or replaced) or an empty lock file is taken
over, with one line saying whose run died and in which phase; a live holder fails the task naming it.
Its options are the module's (modules/dsv4_lock.py, ansible-doc dsv4.deploy.dsv4_lock), which validates them.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from collections.abc import Callable
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()
# The lock module, by its full name: the collection is always found (a clone's collections path, the
# wheel's site-packages), whatever name the task used.
LOCK_MODULE = "dsv4.deploy.dsv4_lock"
PROC = "/proc"  # absent on a macOS controller: every read of it has a portable fallback


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _run(*argv: str) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def process_alive(pid: int) -> bool:
    """Whether a process `pid` exists (signal 0 checks without sending anything; EPERM: it exists)."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM  # another user's process: it exists (ESRCH: it does not)
    return True


def process_start(pid: int) -> str:
    """The start time of `pid` ('' when there is no such process): clock ticks since boot from /proc,
    else what ps says (macOS, BSD)."""
    stat = _read(f"{PROC}/{pid}/stat")
    if stat:
        try:
            return stat.rsplit(")", 1)[1].split()[19]
        except IndexError:
            return ""
    if not os.path.isdir(PROC) and process_alive(pid):
        return _run("ps", "-o", "lstart=", "-p", str(pid))
    return ""


def boot_identity() -> str:
    """This controller's boot and process namespace: two controllers with one host name (cloned VMs, which
    boot apart; containers, which share a kernel but not a pid namespace) differ here. '' when unknown."""
    boot = _read(f"{PROC}/sys/kernel/random/boot_id") or _run("sysctl", "-n", "kern.bootsessionuuid")
    try:
        namespace = os.readlink(f"{PROC}/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{boot}/{namespace}" if boot or namespace else ""


def controller_identity() -> dict[str, Any]:
    """This controller: host name, boot and namespace, the ansible-playbook process (the worker's parent)
    and its start time."""
    pid = os.getppid()
    return {"controller": socket.gethostname(), "controller_boot": boot_identity(), "controller_pid": pid,
            "controller_start": process_start(pid)}


def holder_is_dead(holder: dict[str, Any], me: dict[str, Any]) -> str | None:
    """Why the holder's run is known to be dead, or None (alive, or on another controller: cannot tell)."""
    if not holder:
        return "the lock file is empty or unreadable (its writer died, or it was not written by dsv4deploy)"
    if holder.get("controller") != me["controller"] or not holder.get("controller_pid"):
        return None
    # Same host name, another boot or process namespace (a clone, a container, or a reboot): its process
    # cannot be seen from here.
    if holder.get("controller_boot", "") != me.get("controller_boot", ""):
        return None
    pid = int(holder["controller_pid"])
    if not process_alive(pid):
        return f"its controller process {pid} is gone"
    started = process_start(pid)
    if holder.get("controller_start") and started and started != holder["controller_start"]:
        return f"its controller process {pid} is gone (the pid now belongs to another process)"
    return None


def take_or_take_over(execute: Callable[[dict[str, Any]], dict], lock: dict[str, Any], me: dict[str, Any],
                      host: str) -> dict:
    """Run `execute(lock)` (a module run that takes the deploy lock with the arguments `lock`, the controller's
    identity `me` already in them); when it failed on a lock held by a run known to be dead, run it once more
    taking that run's lock over, and say so in one line; a live holder's failure names it and what to do."""
    module_result = execute(lock)
    holder = module_result.get("holder")
    left = (module_result.get("previous") or {}).get("from_record")
    if left and not module_result.get("failed"):
        # The lock said nothing (removed by hand after a reboot, say), the switch record did.
        line = (f"a blue_green switch of run {module_result['previous'].get('run_id')} was left in progress "
                f"({left}); this run repairs it (the production router back to the active release's workers)")
        display.display(f"  {host}: {line}")
        module_result["msg"] = line
    if not module_result.get("failed") or holder is None or "takeover_from" in lock:
        return module_result
    why = holder_is_dead(holder, me)
    if not why:
        module_result["msg"] = held_message(module_result, holder, me, str(lock.get("path")))
        return module_result
    module_result = execute({**lock, "takeover_from": holder.get("run_id", "")})
    if not module_result.get("failed"):
        line = (f"previous run {holder.get('run_id') or '?'} of {holder.get('owner') or 'unknown'} died "
                f"during phase '{holder.get('phase', '?')}' ({why}); took over its lock, this run "
                "repairs what it left")
        # On stdout with the play (warnings go to stderr): the operator reads it in order.
        display.display(f"  {host}: {line}")
        module_result["msg"] = line
    return module_result


def held_message(module_result: dict, holder: dict[str, Any], me: dict[str, Any], path: str) -> str:
    """The failure of a lock held by a run this controller cannot call dead: who holds it and what to do."""
    base = module_result.get("msg", "")
    if holder.get("controller") not in (None, "", me["controller"]):
        hint = (f"it was taken on controller {holder['controller']}, which this run cannot check: if no run is "
                f"alive there, remove {path} on the host and retry")
    elif holder.get("controller_pid") and holder.get("controller_boot", "") != me.get("controller_boot", ""):
        hint = (f"it was taken on another controller named {holder['controller']} (another machine or container "
                "with this host name, or before this one rebooted), which this run cannot check: if no run is "
                f"alive there, remove {path} on the host and retry")
    else:
        hint = "that run is alive: wait for it to finish"
    if module_result.get("stale"):
        hint += f" (the lock is {module_result.get('age_s', '?')} s old)"
    return f"{base}; {hint}"


class ActionModule(ActionBase):
    """Runs dsv4_lock on the host; on a held lock, checks the holder on the controller."""

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        me = controller_identity()
        args = {**self._task.args, **me}
        if args.get("state", "present") == "present":
            module_result = take_or_take_over(
                lambda lock: self._execute_module(module_name=LOCK_MODULE, module_args=lock, task_vars=task_vars),
                args, me, task_vars.get("inventory_hostname", ""))
        else:
            module_result = self._execute_module(module_name=LOCK_MODULE, module_args=args, task_vars=task_vars)
        result.update(module_result)
        return result
