#!/usr/bin/python
"""Which of the active release's services run, their processes, and what they logged since their start."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_service_state_info
short_description: Status and logs of dsv4deploy services under systemd or supervisord
description:
  - Reads the services of the active release C(install_root/current) (its C(bin/serve-NAME.sh)) from the
    service manager - running or not, main pid, every pid of theirs and their children's - and, with
    O(logs), what each logged since its start, API keys redacted (sglang prints them in its start line).
  - Changes nothing. Where no supervisord of ours runs, nothing of ours runs.
options:
  names:
    type: list
    elements: str
    description:
      - Services to report on (default all of the active release's).
  only:
    type: str
    choices: [all, router, workers, decode, prefill]
    default: all
    description:
      - Narrow O(names) by kind, as M(dsv4.deploy.dsv4_service_state) does.
  logs:
    type: bool
    default: false
    description:
      - Also return each service's log since its start.
  tail:
    type: int
    default: 0
    description:
      - With O(logs), also return the last O(tail) lines of each service's log as RV(lines), each
        prefixed with its service's name (what a failed run's cause shows).
  log_offsets:
    type: dict
    default: {}
    description:
      - Byte offsets per service, as M(dsv4.deploy.dsv4_service_state)
        O(dsv4.deploy.dsv4_service_state#module:state=started) returned them (supervisord); the log is read from there.
  invocations:
    type: dict
    default: {}
    description:
      - systemd invocation ids per service, as M(dsv4.deploy.dsv4_service_state) returned them; the journal of that
        invocation is read (default the running one's).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.service_manager
  - dsv4.deploy.dsv4deploy.read_only
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Which of our services run, with their PIDs
  dsv4.deploy.dsv4_service_state_info:
    manager: supervisor
    install_root: "{{ playbook_dir }}/.state"
    supervisor_bin_dir: "{{ ansible_playbook_python | dirname }}"
  register: status

- name: What the workers logged since their start
  dsv4.deploy.dsv4_service_state_info:
    manager: systemd
    install_root: /opt/dsv4deploy
    only: workers
    logs: true
  register: logs
  no_log: true
"""

RETURN = r"""
services:
  description: Service name to C(name), C(running), C(serving) (running, or STARTING within supervisord's
    startsecs), C(active) and C(pid).
  returned: always
  type: dict
pids:
  description: PIDs of our services and all their children (and of our supervisord).
  returned: always
  type: list
  elements: int
logs:
  description: Service name to the text it logged since its start, API keys redacted.
  returned: O(logs=true)
  type: dict
lines:
  description: "The last O(tail) lines each service logged since its start, as C(NAME: line), API keys redacted."
  returned: O(logs=true) and O(tail) above 0
  type: list
  elements: str
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils.layout import chosen, root_problem
from ansible_collections.dsv4.deploy.plugins.module_utils.managers import MANAGER_OPTIONS, open_manager
from ansible_collections.dsv4.deploy.plugins.module_utils.ours import report
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **MANAGER_OPTIONS,
            "names": {"type": "list", "elements": "str"},
            "only": {"type": "str", "choices": ["all", "router", "workers", "decode", "prefill"], "default": "all"},
            "logs": {"type": "bool", "default": False},
            "tail": {"type": "int", "default": 0},
            "log_offsets": {"type": "dict", "default": {}},
            "invocations": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if root_problem(p["install_root"]):
        module.fail_json(msg=root_problem(p["install_root"]))
    mgr = open_manager(p["manager"], p["install_root"], p["supervisor_bin_dir"], p["unit_dir"])
    names = chosen(p["install_root"], p["names"], p["only"])
    try:
        found = report(mgr, names, p["logs"], p["log_offsets"], p["invocations"])
    except ServiceError as exc:
        module.fail_json(msg=str(exc))
    if p["logs"] and p["tail"] > 0:
        found["lines"] = [f"{name}: {line}" for name, text in found["logs"].items()
                          for line in text.splitlines()[-p["tail"]:]]
    module.exit_json(**found)


if __name__ == "__main__":
    main()
