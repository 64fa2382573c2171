#!/usr/bin/python
"""Install the release's engine on a host: sglang (and the router) in a venv per version, as the service user."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_engine
short_description: Install a release's sglang into a venv of its own under the install root
description:
  - Builds C(engine.venv) as O(user) unless a complete venv for the same requirements is there (reused as is);
    C(python -m venv) under a temporary name, C(pip install) of C(engine.requirements) from C(engine.index) and/or
    C(engine.wheelhouse) (only from those), the base environment of C(engine.base_python) beneath it when given
    (then only the named wheels are installed, C(--no-deps), the base bringing their dependencies),
    a marker written last, then a rename. A half-built venv is never used; one left by a run that died is rebuilt.
  - Fails, naming the field and the fix, on an engine pip cannot install here (a wheelhouse that is not a folder,
    a version the index or wheelhouse does not have, an index it cannot reach); preflight runs it before anything
    stops. Returns the active release's engine (RV(before)) so the plan can say what changes.
  - O(state=query) (the plan) builds nothing and only reads whether the venv is complete, and RV(change).
  - In check mode nothing is built; the result's C(changed) says whether it would be, after the wheelhouse is checked.
options:
  state:
    description: C(present) builds the venv when needed; C(query) only reads.
    type: str
    choices: [present, query]
    default: present
  install_root:
    description: The deployment's install root on this host; the venvs live in its C(engines) folder.
    type: path
    required: true
  engine:
    description: The release's engine record (C(dsv4deploy.spec.engine.record)) - C(sglang), C(venv), C(python),
      C(requirements), C(index), C(wheelhouse), C(base_python).
    type: dict
    required: true
  user:
    description: The service user, who builds and owns the venv.
    type: str
    required: true
  creator:
    description: The interpreter that makes the venv (and runs pip) when C(engine.base_python) is not given.
    type: str
    default: python3
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  check_mode:
    support: full
    description: Nothing is built; the wheelhouse is checked and whether a build is needed is reported.
  diff_mode:
    support: none
    description: A venv has no text to compare; RV(change) says which engine replaces which.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Install the engine
  dsv4.deploy.dsv4_engine:
    install_root: /opt/dsv4deploy
    user: sglang
    engine: "{{ dsv4_plan_host.engine }}"
"""

RETURN = r"""
venv:
  description: The engine's venv on this host.
  type: str
  returned: always
built:
  description: Whether this run built it (false when a complete one was reused, or in check mode).
  type: bool
  returned: always
before:
  description: The engine the active release records (its C(engine.json)), empty when it records none.
  type: dict
  returned: always
change:
  description: C(engine 0.5.23 -> 0.5.23.post1) when this engine is not the active release's, else empty.
  type: str
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils.engines import (
    ENGINE_FILE,
    EngineError,
    change_line,
    complete,
    install,
    source_problem,
)


def active_engine(root: str) -> dict:
    """The engine the active release records, {} when none does."""
    try:
        with open(os.path.join(root, "current", ENGINE_FILE), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def main() -> None:
    """Run the module."""
    module = AnsibleModule(argument_spec={
        "install_root": {"type": "path", "required": True},
        "engine": {"type": "dict", "required": True},
        "user": {"type": "str", "required": True},
        "creator": {"type": "str", "default": "python3"},
        "state": {"type": "str", "choices": ["present", "query"], "default": "present"},
    }, supports_check_mode=True)
    p = module.params
    record = p["engine"]
    before = active_engine(p["install_root"])
    result = {"venv": record["venv"], "built": False, "before": before, "change": change_line(before, record) or ""}
    if p["state"] == "query" or module.check_mode:
        problem = source_problem(record)
        if problem:
            module.fail_json(msg=problem, **result)
        module.exit_json(changed=not complete(record["venv"], record), **result)
    try:
        built = install(p["install_root"], record, p["user"], p["creator"])
    except (EngineError, KeyError) as exc:
        module.fail_json(msg=str(exc), **result)
    module.exit_json(changed=built, **{**result, "built": built})


if __name__ == "__main__":
    main()
