"""Action plugin: the dsv4_host module, plus, when it takes the deploy lock (its lock option), what only the
controller can know - its own identity, and whether a run holding the lock is dead - as dsv4_lock's action
does for that module (the same code: take_or_take_over).

Its options are the module's (modules/dsv4_host.py, ansible-doc dsv4.deploy.dsv4_host), which validates them.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.dsv4.deploy.plugins.action.dsv4_lock import controller_identity, take_or_take_over

# The host module, by its full name: the collection is always found (a clone's collections path, the wheel's
# site-packages), whatever name the task used.
HOST_MODULE = "dsv4.deploy.dsv4_host"


class ActionModule(ActionBase):
    """Runs dsv4_host on the host; with a lock to take, checks a holder on the controller."""

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)

        def execute(lock: dict[str, Any]) -> dict:
            module_args = {**args, "lock": lock} if lock else args
            return self._execute_module(module_name=HOST_MODULE, module_args=module_args, task_vars=task_vars)

        lock = args.get("lock")
        if isinstance(lock, dict) and lock and args.get("state", "check") == "check":
            me = controller_identity()
            result.update(take_or_take_over(execute, {**lock, **me}, me, task_vars.get("inventory_hostname", "")))
        else:
            result.update(execute({}))
        return result
