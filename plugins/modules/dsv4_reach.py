#!/usr/bin/python
"""Prove the deployment's cross-host paths before anything stops: listeners on the targets, connections from
the hosts that will connect."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_reach
short_description: Prove each cross-host path of the deployment with a short-lived listener and a connection
description:
  - The router reaches every worker, a decode every prefill's bootstrap port, a multi-node server's ranks their
    rank 0's rendezvous port. Preflight proves each path from the host that connects, before anything stops.
  - O(state=listen) (on each target host) binds every port in O(ports) in a detached child that accepts and
    closes connections and exits after O(ttl_s); a port already bound (the serving release, which preflight has
    found to be ours) is left to what listens there. Returns the child's PID.
  - O(state=connect) (on each host that connects) opens a TCP connection to every entry of O(paths) and fails,
    naming the worker, the target host, the field that chose the address and what is in the way - a refused
    connection (a wrong address, or no listener), one that timed out (likely a firewall), or no route.
  - O(state=stop) ends the listener O(pid) (only a listener this module started).
options:
  state:
    type: str
    choices: [listen, connect, stop]
    required: true
    description: [What to do.]
  ports:
    type: list
    elements: dict
    default: []
    description:
      - With O(state=listen), the C(address) and C(port) pairs to bind (the address the servers will bind).
  paths:
    type: list
    elements: dict
    default: []
    description:
      - With O(state=connect), the paths to connect along, each with C(address), C(port), C(target), C(what),
        C(reaches) and C(field) (C(dsv4deploy.spec.reachability.Path)).
  ttl_s:
    type: float
    default: 120
    description: [With O(state=listen), the listener's longest life in seconds.]
  timeout_s:
    type: float
    default: 5
    description: [With O(state=connect), seconds one connection may take.]
  pid:
    type: int
    description: [With O(state=stop), the listener's PID (RV(pid) of O(state=listen)).]
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  check_mode:
    support: full
    description: A listener and a connection change nothing on the host; they run in check mode too.
  diff_mode:
    support: none
    description: Nothing to show.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Listen where the other hosts will connect
  dsv4.deploy.dsv4_reach:
    state: listen
    ports: [{address: 0.0.0.0, port: 30002}]
  register: listener

- name: Connect to every worker this host reaches
  dsv4.deploy.dsv4_reach:
    state: connect
    paths:
      - {address: 10.0.0.22, port: 30002, target: decode1, what: the router on router1, reaches: "decode[0]",
         field: ansible_host}

- name: Stop the listener
  dsv4.deploy.dsv4_reach:
    state: stop
    pid: "{{ listener.pid }}"
"""

RETURN = r"""
pid:
  description: The listener's PID (none when it bound nothing).
  type: int
  returned: state=listen
bound:
  description: The ports the listener bound.
  type: list
  elements: int
  returned: state=listen
busy:
  description: The ports already bound here (what connects reaches the listener there).
  type: list
  elements: int
  returned: state=listen
proven:
  description: The paths that connected, as C(TARGET:PORT).
  type: list
  elements: str
  returned: state=connect
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils.reach import (
    connect_problem,
    start_listener,
    stop_listener,
)


def _fix(path: dict) -> str:
    if path["field"] == "listen":
        return f"set listen of {path['target']} to an address the connecting host reaches (0.0.0.0, with an api_key)"
    return (f"check ansible_host of {path['target']} ({path['address']}) is the address other hosts reach it at, "
            f"and that port {path['port']} is open to them")


def connect(paths: list[dict], timeout_s: float) -> tuple[list[str], list[str]]:
    """The paths proven (TARGET:PORT), and one line per path that is not."""
    proven, problems = [], []
    for path in paths:
        why = connect_problem(path["address"], int(path["port"]), timeout_s)
        if not why:
            proven.append(f"{path['target']}:{path['port']}")
            continue
        problems.append(f"{path['field']} (host {path['target']}): {path['what']} cannot reach {path['reaches']} at "
                        f"{path['address']}:{path['port']}: {why}; fix: {_fix(path)}")
    return proven, problems


def main() -> None:
    """Run the module."""
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["listen", "connect", "stop"], "required": True},
            "ports": {"type": "list", "elements": "dict", "default": []},
            "paths": {"type": "list", "elements": "dict", "default": []},
            "ttl_s": {"type": "float", "default": 120},
            "timeout_s": {"type": "float", "default": 5},
            "pid": {"type": "int"},
        },
        supports_check_mode=True,
    )
    state = module.params["state"]
    if state == "listen":
        answer = start_listener(module.params["ports"], module.params["ttl_s"])
        if answer["failed"]:
            stop_listener(answer["pid"])
            failed = ", ".join(f"{port}: {why}" for port, why in answer["failed"].items())
            module.fail_json(msg=f"cannot listen where the other hosts will connect ({failed})", **answer)
        module.exit_json(changed=False, **answer)
    if state == "stop":
        module.exit_json(changed=False, stopped=stop_listener(module.params["pid"]))
    proven, problems = connect(module.params["paths"], module.params["timeout_s"])
    if problems:
        module.fail_json(msg="\n".join(problems), proven=proven)
    module.exit_json(changed=False, proven=proven)


if __name__ == "__main__":
    main()
