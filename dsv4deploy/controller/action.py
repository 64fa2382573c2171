"""The shape every dsv4.deploy action plugin shares: validate the task's arguments against the
plugin's spec, hand them on as plain Python values, and template play variables the same way.

An action plugin subclasses `ValidatedAction`, sets `argument_spec` (the ARGUMENT_SPEC its module's
documentation follows) and implements `act`; a controller-only one also sets `_requires_connection`
to False.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ansible.plugins.action import ActionBase

from dsv4deploy.gates.runner import GateSettings, plan_index_topk, settings_from_vars
from dsv4deploy.inventory import plain


class ValidatedAction(ActionBase):
    """An action whose `act` receives its validated arguments as plain values."""

    argument_spec: ClassVar[dict[str, dict[str, Any]]] = {}

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        """Ansible's entry point: validate, then `act`."""
        result = super().run(tmp, task_vars)
        args = plain(self.validate_argument_spec(self.argument_spec)[1])
        return self.act(result, args, task_vars or {})

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """The plugin's work: update and return `result`."""
        raise NotImplementedError

    def templated(self, value: Any) -> Any:
        """A play variable's value templated, as plain Python values."""
        return plain(self._templar.template(value))

    @staticmethod
    def play_hosts(task_vars: dict) -> list[str]:
        """Every host of the play (unreachable ones too), else this task's host."""
        return list(task_vars.get("ansible_play_hosts_all") or [task_vars["inventory_hostname"]])

    def gate_settings(self, task_vars: dict, plan: dict, overrides: dict[str, Any] | None = None) -> GateSettings:
        """The gates' settings from the play's variables (templated), then `overrides`, for this plan.

        Raises GateSettingsError naming every unknown or invalid one."""
        return settings_from_vars(task_vars, self.templated, overrides, plan_index_topk(plan))


class ReportAction(ValidatedAction):
    """A controller-only action writing a report of what happened; subclasses implement `write`.

    In check mode nothing happened, so nothing is written."""

    _requires_connection = False

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """`write` the report, or say in check mode that none was written."""
        if self._task.check_mode:
            result.update(changed=False, skipped=True, paths=[], msg="check mode: no report was written")
            return result
        return self.write(result, args, task_vars)

    def write(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Write the report; update and return `result` (with its `paths`)."""
        raise NotImplementedError
