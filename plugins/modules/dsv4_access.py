#!/usr/bin/python
"""Preflight for what the services will need: their user, and the paths they use as their units see them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_access
short_description: Check the service user and every path the services need, as their units will see them
description:
  - Changes nothing. Fails, one line per problem naming host, user, path and the fix, when the
    service user does not exist (unless O(create_user)), when a launcher is missing, hidden by the
    unit's sandbox (C(PrivateTmp), C(ProtectHome), C(InaccessiblePaths)) or not executable by that
    user, when the install root cannot be reached by it, or when the API key file is not readable by
    it or is readable by anyone else but root.
  - The needs come from C(dsv4deploy.plan.access) (the plan). A user that does not exist yet but will be
    created is judged as a new user with no groups, by the files' "other" permissions.
options:
  host:
    type: str
    required: true
    description:
      - Inventory name of this host (for the messages).
  user:
    type: str
    default: ""
    description:
      - Service user; empty means the service manager's own (root).
  create_user:
    type: bool
    default: false
    description:
      - The deploy creates the user when it is missing (C(service_user_create)).
  needs:
    type: list
    elements: dict
    default: []
    description:
      - "PathNeed mappings of the plan: C(path), C(need) (exec, search, secret), C(what), C(hidden),
        C(search_path), C(no_dac_override)."
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.read_only
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Check that user sglang can run the launcher its unit will execute
  dsv4.deploy.dsv4_access:
    host: "{{ inventory_hostname }}"
    user: sglang
    needs:
      - path: /opt/sglang/venv/bin/python
        need: exec
        what: server_launcher[0] of sglang-dsv4-decode
        hidden: {/tmp: PrivateTmp=yes}
"""

RETURN = r"""
problems:
  description: 'One line per problem: C(host H, user U: PATH (what): problem; fix: ...).'
  returned: always
  type: list
  elements: str
create_user:
  description: True when the user is missing, O(create_user) is set and nothing else is wrong.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils.access import failure_message, problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "user": {"type": "str", "default": ""},
            "create_user": {"type": "bool", "default": False},
            "needs": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False, **problems(p["host"], p["user"], p["create_user"], p["needs"])}
    if result["problems"]:
        module.fail_json(msg=failure_message(result["problems"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
