"""Action plugin: validate the spec, check memory and render every host's release, on the controller."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from dsv4deploy.gate_runner import GateSettingsError, plan_index_topk, settings_from_vars
from dsv4deploy.inventory import plain
from dsv4deploy.plan import make_plan, targets_from_release_spec
from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS, SpecError, load_spec

DOCUMENTATION = r"""
action: dsv4_plan
short_description: Build the dsv4deploy rollout plan from inventory variables
description:
  - Reads the spec from the play's variables exactly as `dsv4deploy validate` does, validates it,
    checks memory feasibility and renders each play host's release. Fails, listing every problem
    with its field, host and fix, before anything on a host changes. Sets the fact C(dsv4_plan).
  - With I(release_spec) (the spec.json of an installed release) it sets I(fact) to that release's
    gate targets instead (endpoint, workers, expected overrides), to verify a rollback.
options:
  release_spec: {description: spec.json text of an installed release}
  fact: {description: Name of the fact to set, default: dsv4_plan}
"""


class ActionModule(ActionBase):
    """Computes the plan once; run it with run_once so every host shares it."""

    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = plain(self._task.args)
        fact = args.get("fact") or "dsv4_plan"
        if args.get("release_spec"):
            try:
                targets = targets_from_release_spec(args["release_spec"])
            except (ValueError, KeyError) as exc:
                result.update(failed=True, msg=f"cannot read the release's spec.json: {exc}")
                return result
            result.update(changed=False, ansible_facts={fact: targets})
            return result
        hostvars = task_vars["hostvars"]
        play_hosts = list(task_vars.get("ansible_play_hosts_all") or [task_vars["inventory_hostname"]])
        try:
            common = {k: plain(self._templar.template(task_vars[k])) for k in DEPLOYMENT_KEYS if k in task_vars}
            host_data = {
                h: {k: plain(hostvars[h][k]) for k in (*HOST_KEYS, "ansible_host") if k in hostvars[h]}
                for h in play_hosts
            }
            spec = load_spec(common, host_data)
            plan = make_plan(spec, play_hosts)
        except SpecError as exc:
            result.update(failed=True, problems=[str(p) for p in exc.problems],
                          msg="the deployment spec is invalid; nothing was changed:\n- "
                              + "\n- ".join(str(p) for p in exc.problems))
            return result
        try:  # the gates' settings too: a needle grid that cannot prove its requirement is refused now
            settings_from_vars(task_vars, lambda v: plain(self._templar.template(v)), None, plan_index_topk(plan))
        except GateSettingsError as exc:
            result.update(failed=True, problems=exc.problems,
                          msg="the gate settings are invalid; nothing was changed:\n- " + "\n- ".join(exc.problems))
            return result
        result.update(changed=False, ansible_facts={fact: plan},
                      msg=f"release {plan['release_id']}: {plan['topology']} on {', '.join(plan['hosts_in_use'])}, "
                          f"endpoint {plan['endpoint']}")
        return result
