"""Whether a new release replaces the production router itself, and by which changed field.

blue_green and rolling switch workers behind the running router through its worker API; the router
keeps serving only while its own program stays the same. When a setting the router's program is made
of changes (its policy, flags, version, port, launcher, env, API key, drain grace), the router must be
restarted: a short outage, which the plan and the report name by field before anything changes.
"""

from __future__ import annotations

import json
from typing import Any

from dsv4deploy.spec import Problem

# Deployment fields the router's program is rendered from (dsv4deploy.plan.services._router, router_argv).
ROUTER_FIELDS = ("router", "router_implementation", "router_launcher", "drain_deadline_s", "api_key")
ROUTER_ENV = ("server_env_extra_by_role", "router")


def router_changes(serving: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The router's settings that differ between two deployments (spec dumps), as field paths.

    A field missing from one side counts as empty (spec.json leaves unset fields out)."""
    out: list[str] = []
    for key in ROUTER_FIELDS:
        old_value, new_value = serving.get(key), new.get(key)
        if isinstance(old_value, dict) and isinstance(new_value, dict):
            out += [f"{key}.{sub}" for sub in sorted({*old_value, *new_value})
                    if (old_value.get(sub) or None) != (new_value.get(sub) or None)]
        elif (old_value or None) != (new_value or None):
            out.append(key)
    role, name = ROUTER_ENV
    if ((serving.get(role) or {}).get(name) or {}) != ((new.get(role) or {}).get(name) or {}):
        out.append(f"{role}.{name}")
    return out


def router_change(serving_spec_json: str, new: dict[str, Any]) -> dict[str, Any]:
    """The plan's `rollout.router_change` from the serving release's spec.json text: {fields, line}.

    Empty when nothing of the router changes, or when no release serves (nothing to interrupt)."""
    if not serving_spec_json.strip():
        return {}
    serving = json.loads(serving_spec_json).get("deployment") or {}
    if not serving.get("router") or not new.get("router"):
        return {}
    fields = router_changes(serving, new)
    if not fields:
        return {}
    return {"fields": fields,
            "line": f"the production router's own settings change ({', '.join(fields)}): it is restarted with "
                    "them, a short outage while it starts and finds its workers"}


def rotated_key_problems(strategy: str, hosts: list[str]) -> list[Problem]:
    """A rotated API key under blue_green or rolling (`hosts`: where it changed): those switch workers behind the
    production router through its worker API, and that router holds the old key until it restarts, so the switch
    would be refused (401) and rolled back. Refused before anything changes, with the command that applies it."""
    if strategy == "recreate" or not hosts:
        return []
    return [Problem(field="api_key", message=f"the API key changed on {', '.join(hosts)}, and {strategy} switches "
                                             "the new workers in behind the production router, which holds the old "
                                             "key until it restarts",
                    fix="apply the new key with recreate (every server restarts: an outage until the new release "
                        "is ready), e.g. ansible-playbook dsv4.deploy.deploy -i INVENTORY -e dsv4_rollout_strategy="
                        "recreate; the next deploys run as blue_green again")]
