"""Action plugin: validate the spec, check memory and render every host's release, on the controller.

Documented in modules/dsv4_build_plan.py (ansible-doc dsv4.deploy.dsv4_build_plan); ARGUMENT_SPEC follows it.
"""

from __future__ import annotations

import base64
from typing import Any

from ansible.errors import AnsibleError

from dsv4deploy.controller.action import ValidatedAction
from dsv4deploy.gates import reach
from dsv4deploy.gates.runner import GateSettingsError, plan_index_topk, weakened
from dsv4deploy.inventory import names, plain
from dsv4deploy.inventory.checks import inventory_problems, vault_var_problems, view_of
from dsv4deploy.inventory.varnames import ALLOW_VAR
from dsv4deploy.isolate import isolation_plan, parse_suite
from dsv4deploy.isolate.estimate import estimate
from dsv4deploy.isolate.sequential import split_budget
from dsv4deploy.plan import installed, make_plan, secret_files, secret_hosts, targets_from_release_spec
from dsv4deploy.rollout.blue_green import beside_spec
from dsv4deploy.rollout.other_hosts import directed, other_spec, preview_spec
from dsv4deploy.rollout.rolling_strategy import surge_spec
from dsv4deploy.rollout.router_change import rotated_key_problems, router_change
from dsv4deploy.rollout.settings import VARS as ROLLOUT_VARS
from dsv4deploy.rollout.settings import bake_problems, load_rollout
from dsv4deploy.rollout.strategy import rollout_plan
from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS, SpecError, load_spec, secret_env
from dsv4deploy.spec.homes import TRUST_KEYS

# One state, one job and one fact (documented per state in modules/dsv4_build_plan.py):
#   planned - the inventory's plan (blue_green_hosts: on the host set that does not serve); beside - blue_green's
#   plan in the other slot; preview - blue_green_hosts' preview router; surge - a roll's surge slot;
#   secrets - the secret env files per host (no_log); targets - an installed release's gate targets
#   (release_spec); combined - the isolation plan of the PD release in release_spec (playbooks/isolate.yml);
#   roots - each play host's install root only (stop, rollback, verify, isolate); installed - an installed
#   release's view from its records; router_change - the production router's changed settings (serving_spec);
#   secret_hosts - the play hosts whose digest salt the plan needs, with their install roots.
STATES = ("planned", "beside", "preview", "surge", "secrets", "targets", "combined", "roots", "installed",
          "router_change", "secret_hosts")
# The fact a state sets when the task names none.
DEFAULT_FACT = {"combined": "dsv4_isolation", "roots": "dsv4_installed_roots", "secret_hosts": "dsv4_secret_hosts"}
# The registered result of dsv4_digest_salt on each host (roles/dsv4_plan/tasks/digest_salt.yml): its `salt`;
# O(salts_from) names another (the release's own read, for a plan the plan role did not make).
SALT_RESULT = "dsv4_plan_digest_salt"
# The fact state=secret_hosts also sets: host -> the API key's file there (api_key.file only).
KEY_FILES_FACT = "__dsv4_plan_key_files"

ARGUMENT_SPEC = {
    "state": {"type": "str", "required": True, "choices": list(STATES)},
    "release_spec": {"type": "str"},
    "fact": {"type": "str", "default": "dsv4_plan"},
    "salts_from": {"type": "str", "default": SALT_RESULT},
    "release_id": {"type": "str", "default": ""},
    "gpus": {"type": "list", "elements": "int", "default": []},
    "port": {"type": "int", "default": 0},
    "env": {"type": "dict", "default": {}},
    "suite": {"type": "raw", "default": ""},
    # state=installed: the release's records on the hosts.
    "installed": {"type": "dict"},
    # state=secrets: the plan being installed, when it is not the inventory's own (the isolation twin);
    # state=router_change: the new plan's spec.
    "planned_spec": {"type": "raw"},
    # state=router_change, and planned under blue_green_hosts: the serving release's spec.json text.
    "serving_spec": {"type": "str", "default": ""},
    # state=preview: the plan's rollout.going (serving host -> new host).
    "going": {"type": "dict", "default": {}},
}


def digest_keys(hostvars: Any, play_hosts: list[str], salts_from: str = SALT_RESULT) -> dict[str, str]:
    """Each play host's digest salt, as dsv4_digest_salt read it there into the host variable `salts_from`
    (hosts it did not run on have none)."""
    out = {}
    for host in play_hosts:
        salt = plain(hostvars[host].get(salts_from) or {}).get("salt") if host in hostvars else None
        if isinstance(salt, str) and salt:
            out[host] = salt
    return out


def api_key_digests(spec: Any, hostvars: Any, keys: dict[str, str], vault_value: Any,
                    salts_from: str = SALT_RESULT) -> dict[str, str]:
    """Each host's API key content as a digest under its salt: a key file's as dsv4_digest_salt read it on the
    host, a vault variable's (`vault_value`) made here. Hosts with neither have none."""
    if spec.api_key is None:
        return {}
    if vault_value is not None:
        return {h: secret_env.api_key_digest(str(vault_value), salt) for h, salt in keys.items()}
    out = {}
    for host in keys:
        found = plain(hostvars[host].get(salts_from) or {}).get("key_digest")
        if isinstance(found, str) and found:
            out[host] = found
    return out


def key_changed_hosts(hostvars: Any, digests: dict[str, str], salts_from: str = SALT_RESULT) -> list[str]:
    """The hosts whose active release was made with another API key than the one they have now."""
    return sorted(h for h, d in digests.items()
                  if (plain(hostvars[h].get(salts_from) or {}).get("active_key_digest") or d) != d)


class ActionModule(ValidatedAction):
    """Computes the plan once; run it with run_once so every host shares it."""

    _requires_connection = False
    argument_spec = ARGUMENT_SPEC

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """What O(state) names, as the fact O(fact) (router_change: as its own result)."""
        state = args["state"]
        if args["fact"] == "dsv4_plan" and state in DEFAULT_FACT:
            args = {**args, "fact": DEFAULT_FACT[state]}
        fact = args["fact"]
        if state == "router_change":
            try:
                change = router_change(args["serving_spec"], args.get("planned_spec") or {})
            except (ValueError, AttributeError) as exc:
                result.update(failed=True, msg=f"cannot read the serving release's spec.json: {exc}")
                return result
            result.update(changed=False, router_change=change)
            return result
        if state == "combined":
            return self._combined(result, args, task_vars)
        if state == "roots":
            return self._roots(result, args, task_vars)
        if state == "installed":
            if args.get("installed") is None:
                result.update(failed=True,
                              msg="state=installed needs installed (the release's records); nothing was changed")
                return result
            return self._installed(result, args, task_vars)
        if state == "targets":
            try:
                targets = targets_from_release_spec(args.get("release_spec") or "")
            except (ValueError, KeyError) as exc:
                result.update(failed=True, msg=f"cannot read the release's spec.json: {exc}")
                return result
            result.update(changed=False, ansible_facts={fact: targets})
            return result
        hostvars = task_vars["hostvars"]
        play_hosts = self.play_hosts(task_vars)
        try:
            common = {k: self.templated(task_vars[k]) for k in DEPLOYMENT_KEYS if k in task_vars}
            host_data = {
                h: {k: plain(hostvars[h][k]) for k in (*HOST_KEYS, "ansible_host") if k in hostvars[h]}
                | self._trust_vars(hostvars[h])
                for h in play_hosts
            }
            # The inventory as written first: a misspelt name explains the defaults it leads to.
            problems = self._inventory_problems(task_vars)
            try:
                spec = load_spec(common, host_data)
            except SpecError as exc:
                raise SpecError(problems + exc.problems) from None
            problems += vault_var_problems(spec, task_vars)
            if problems:
                raise SpecError(problems)
            if state == "secret_hosts":
                hosts = secret_hosts(spec, play_hosts)
                settings = load_rollout(
                    {v: self.templated(task_vars[v]) for v in ROLLOUT_VARS.values() if v in task_vars})
                if settings.strategy == "blue_green_hosts":  # either host set may run this release
                    hosts |= secret_hosts(other_spec(spec, settings.hosts), play_hosts)
                # The key's file where it is one on the hosts: dsv4_digest_salt digests it there.
                files = {h: spec.api_key.file for h in hosts if spec.api_key and spec.api_key.file}
                result.update(changed=False, ansible_facts={fact: hosts, KEY_FILES_FACT: files})
                return result
            keys = digest_keys(hostvars, play_hosts, args["salts_from"])
            key_digests = api_key_digests(spec, hostvars, keys, self.templated(task_vars.get(
                spec.api_key.vault_var)) if spec.api_key and spec.api_key.vault_var else None, args["salts_from"])
            if state == "secrets":
                planned = args.get("planned_spec") or None
                result.update(changed=False, ansible_facts={fact: secret_files(spec, play_hosts, planned, keys)})
                return result
            settings = load_rollout(
                {v: self.templated(task_vars[v]) for v in ROLLOUT_VARS.values() if v in task_vars})
            rollout = rollout_plan(spec, settings)
            if rollout["strategy"] == "blue_green_hosts" and state == "preview":  # the way the plan goes
                spec = preview_spec(other_spec(spec, args["going"]), settings)
            elif rollout["strategy"] == "blue_green_hosts":  # the host set that does not serve now
                router_host = spec.router.host if spec.router else ""

                def serves_as(candidate: Any) -> bool:  # rendered as the router host's serving spec.json
                    files = make_plan(candidate, play_hosts, keys=keys, api_key_digests=key_digests)["hosts"]
                    return files.get(router_host, {}).get("files", {}).get("spec.json") == args["serving_spec"]
                spec, rollout = directed(spec, rollout, args["serving_spec"], serves_as)
            if state == "planned":  # a rotated key behind a router that keeps the old one, a bake of the wrong servers
                changed = key_changed_hosts(hostvars, key_digests, args["salts_from"])
                refused = rotated_key_problems(rollout["strategy"], changed)
                refused += bake_problems(settings, float(self.templated(task_vars.get("dsv4_bake_s", 0)) or 0))
                if refused:
                    raise SpecError(refused)
            if state == "beside":
                spec = beside_spec(spec, settings)
            elif state == "surge":
                spec = surge_spec(spec, settings)
            plan = make_plan(spec, play_hosts, rollout=rollout, keys=keys, api_key_digests=key_digests)
        except SpecError as exc:
            result.update(failed=True, problems=[str(p) for p in exc.problems],
                          msg="the deployment spec is invalid; nothing was changed:\n- "
                              + "\n- ".join(str(p) for p in exc.problems))
            return result
        try:  # the gates' settings too: a needle grid that cannot prove its requirement is refused now
            gates = self.gate_settings(task_vars, plan)
        except GateSettingsError as exc:
            result.update(failed=True, problems=exc.problems,
                          msg="the gate settings are invalid; nothing was changed:\n- " + "\n- ".join(exc.problems))
            return result
        problem = self._unreachable_endpoint(plan, hostvars)
        if problem:
            result.update(failed=True, problems=[problem],
                          msg=f"the deployment spec is invalid; nothing was changed:\n- {problem}")
            return result
        # Settings weaker than the spec implies: named on the plan line and the report's first line.
        weak = weakened(gates, plan_index_topk(plan), task_vars, self.templated)
        changed_key = key_changed_hosts(hostvars, key_digests, args["salts_from"]) if state == "planned" else []
        result.update(changed=False, ansible_facts={fact: plan, "dsv4_plan_weakened": weak,
                                                    "dsv4_plan_key_changed": changed_key},
                      msg=f"release {plan['release_id']}: {plan['topology']} on {', '.join(plan['hosts_in_use'])}, "
                          f"endpoint {plan['endpoint']}" + (f"; WEAKENED: {'; '.join(weak)}" if weak else ""))
        return result

    def _roots(self, result: dict, args: dict, task_vars: dict) -> dict:
        """Where each play host keeps its releases: its install root, and nothing else of the inventory."""
        hostvars = task_vars["hostvars"]
        play_hosts = self.play_hosts(task_vars)
        try:
            roots = installed.locate({h: self.templated(hostvars[h].get("install_root"))
                                      for h in play_hosts})
        except SpecError as exc:
            result.update(failed=True, problems=[str(p) for p in exc.problems],
                          msg="cannot find the releases; nothing was changed:\n- "
                              + "\n- ".join(str(p) for p in exc.problems))
            return result
        fact = args["fact"]
        # The playbooks that locate first say, once, which old input names this run used.
        result.update(changed=False, ansible_facts={fact: roots}, warnings=names.deprecation_warnings(task_vars))
        return result

    def _installed(self, result: dict, args: dict, task_vars: dict) -> dict:
        """The installed release named in `installed`, from its spec.json and each host's services.json."""
        want = args["installed"]
        play_hosts = self.play_hosts(task_vars)

        def texts(files: Any) -> dict[str, str]:  # slurp's base64, by host
            return {h: base64.b64decode(c).decode("utf-8") if c else "" for h, c in dict(files or {}).items()}
        try:
            view = installed.release_view(str(want.get("release_id") or ""), texts(want.get("spec_files")),
                                          texts(want.get("services_files")), dict(want.get("install_roots") or {}),
                                          play_hosts)
        except (ValueError, KeyError, TypeError) as exc:
            result.update(failed=True, msg=f"cannot read release {want.get('release_id')}'s spec.json: {exc}")
            return result
        result.update(changed=False, ansible_facts={args["fact"]: view})
        return result

    def _inventory_problems(self, task_vars: dict) -> list:
        """Misspelt variable names and an -e server_env that drops switches, as `dsv4deploy validate` finds them."""
        hostvars = task_vars["hostvars"]
        inventory = getattr(hostvars, "_inventory", None)
        manager = getattr(hostvars, "_variable_manager", None)
        if inventory is None or manager is None:  # not Ansible's HostVars: nothing to read the names from
            return []
        view = view_of(inventory, getattr(hostvars, "_loader", None) or self._loader, plain(manager.extra_vars))
        allowed = self.templated(task_vars[ALLOW_VAR]) if ALLOW_VAR in task_vars else None
        return inventory_problems(view, allowed)

    def _combined(self, result: dict, args: dict, task_vars: dict) -> dict:
        """The isolation plan: the serving PD release and its combined twin."""
        if not args.get("release_spec"):
            result.update(failed=True, msg="the serving release's spec.json was not found on any host "
                                           "(state=combined needs release_spec); nothing was changed")
            return result
        play_hosts = self.play_hosts(task_vars)
        try:
            suite = parse_suite(args.get("suite") or "")
            if "soak" in suite:  # the soak's budget split into its alternating rounds
                split_budget(int(self.templated(task_vars.get("dsv4_isolate_soak_sessions", 700))),
                             int(self.templated(task_vars.get("dsv4_isolate_soak_rounds", 1))))
            plan = isolation_plan(args["release_spec"], play_hosts, release_id=args.get("release_id") or None,
                                  gpus=[int(g) for g in args.get("gpus") or []],
                                  port=int(args.get("port") or 0) or None, env=args.get("env") or {},
                                  root_ok=[h for h in sorted(task_vars["hostvars"])
                                           if task_vars["hostvars"][h].get("service_user_root_ok") is True])
        except SpecError as exc:
            result.update(failed=True, problems=[str(p) for p in exc.problems],
                          msg="the experiment cannot be set up; nothing was changed:\n- "
                              + "\n- ".join(str(p) for p in exc.problems))
            return result
        except (ValueError, KeyError) as exc:
            result.update(failed=True, msg=f"cannot read the serving release's spec.json: {exc}")
            return result
        try:  # the suite's settings, judged by what the serving release runs (its index_topk)
            # dsv4_isolate_soak_sessions is the soak's budget a side (the role splits it into its rounds' blocks).
            sessions = task_vars.get("dsv4_isolate_soak_sessions")
            settings = self.gate_settings(task_vars, plan["original"], {"soak_sessions": self.templated(sessions)}
                                          if sessions is not None else None)
        except GateSettingsError as exc:
            result.update(failed=True, problems=exc.problems,
                          msg="the gate settings are invalid; nothing was changed:\n- " + "\n- ".join(exc.problems))
            return result
        problem = self._unreachable_endpoint(plan["combined"], task_vars["hostvars"])
        if problem:  # the suite talks to the combined server from here, like a client
            result.update(failed=True, problems=[problem],
                          msg=f"the combined server could not be tested; nothing was changed:\n- {problem} "
                              "(isolate_port, or the host's listen address)")
            return result
        plan["suite"] = suite
        rounds = task_vars.get("dsv4_isolate_soak_rounds")
        plan["estimate"] = estimate(suite, settings, int(self.templated(rounds)) if rounds is not None else 1)
        result.update(changed=False, ansible_facts={args["fact"]: plan},
                      msg=f"combined release {plan['combined']['release_id']} on "
                          f"{', '.join(plan['combined']['hosts_in_use'])}, endpoint {plan['combined']['endpoint']}")
        return result

    @staticmethod
    def _trust_vars(host_vars: Any) -> dict[str, Any]:
        """Who the host's modules run as and the verification's paths (spec.homes), where they template now: one
        that needs play-time facts is left to the host's own walk."""
        out = {}
        for key in TRUST_KEYS:
            try:
                if key in host_vars:
                    out[key] = plain(host_vars[key])
            except AnsibleError:
                continue
        return out

    def _unreachable_endpoint(self, plan: dict[str, Any], hostvars: Any) -> str | None:
        """Why the gates (and clients) on the controller could never reach the endpoint, or None.

        A host is the controller itself when Ansible reaches it through the local connection or at
        a loopback address; without ansible_connection in its variables it uses this task's one.
        """
        host = plan.get("endpoint_host") or ""
        if host not in hostvars:
            return None
        hv = hostvars[host]
        connection = str(hv.get("ansible_connection") or self._connection.transport)
        local = connection.rsplit(".", 1)[-1] == "local" or reach.is_loopback(str(hv.get("ansible_host", host)))
        what = "router.listen" if plan.get("router_url") else "listen"
        return reach.endpoint_problem(what, plan["endpoint"], host, local)
