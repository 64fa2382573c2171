#!/usr/bin/python
"""What serves on a host: the active release, its services' state, its engine, the verify timer's last result."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_host_status
short_description: What a dsv4deploy host serves now, read-only
description:
  - Reads, under O(install_root), the active release (its id, whether it passed its gates, when it was installed),
    the sglang version it was rendered for (its C(spec.json)), each of its services' state from the service
    manager, and the verify timer's last result (its textfile metrics under C(verify-timer/metrics)).
  - Changes nothing. C(dsv4deploy status) runs it ad hoc over the inventory's hosts.
options: {}
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.service_manager
  - dsv4.deploy.dsv4deploy.read_only
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: What serves here
  dsv4.deploy.dsv4_host_status:
    manager: supervisor
    install_root: /opt/dsv4deploy
    supervisor_bin_dir: /opt/venv/bin
  register: status
"""

RETURN = r"""
active:
  description: The active release's id (none when nothing is active).
  type: str
  returned: always
release_status:
  description: C(verified), C(baked), C(verified, bake inconclusive), C(unverified) (its gates have not passed) or
    C(none).
  type: str
  returned: always
created:
  description: When the active release was installed (epoch seconds).
  type: float
  returned: with an active release
engine:
  description: The engine the active release records (C(0.5.23 in VENV), its C(engine.json)), else the sglang version
    it was rendered for (C(sglang_version) in its spec.json), else empty.
  type: str
  returned: always
services:
  description: The active release's services, in drain order, each with C(name), C(state) (running; starting, while its
    service manager has not yet counted it up, as supervisord's startsecs; or stopped) and C(pid).
  type: list
  elements: dict
  returned: always
verify_timer:
  description: The verify timer's last result, from its metrics file - C(at) (epoch seconds), C(gates) (gate to
    passed), C(release); empty when no timer has written one under this install root.
  type: dict
  returned: always
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import release_store as store
from ansible_collections.dsv4.deploy.plugins.module_utils.engines import ENGINE_FILE
from ansible_collections.dsv4.deploy.plugins.module_utils.layout import chosen, root_problem
from ansible_collections.dsv4.deploy.plugins.module_utils.managers import MANAGER_OPTIONS, open_manager
from ansible_collections.dsv4.deploy.plugins.module_utils.ours import report
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError
from ansible_collections.dsv4.deploy.plugins.module_utils.textfile_publish import Refused, read_source

# One sample of the textfile format: name{labels} value (docs/verify-timer.md lists the metrics).
SAMPLE = re.compile(r'^(dsv4deploy_\w+)\{([^}]*)\}\s+(\S+)', re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def release_status(root: str, active: str | None) -> tuple[str, float | None]:
    """How the active release stands here (verified, baked, unverified) and when it was installed."""
    if not active:
        return "none", None
    summary = store.summary(root)
    baked = summary["baked"].get(active, "")
    if active in summary["good"]:
        status = {"passed": "baked", "inconclusive": "verified, bake inconclusive"}.get(baked, "verified")
    else:
        status = "unverified"
    try:
        created = os.path.getmtime(os.path.join(store.releases_dir(root), active, store.MANIFEST))
    except OSError:
        created = None
    return status, created


def engine(root: str) -> str:
    """The engine the active release records (`0.5.23 in VENV`), else the sglang version its spec.json was rendered
    for on this host ('' when unknown)."""
    installed = store.read_json(os.path.join(root, "current", ENGINE_FILE))
    if installed.get("sglang") and installed.get("venv"):
        return f"{installed['sglang']} in {installed['venv']}"
    spec = store.read_json(os.path.join(root, "current", "spec.json"))
    hosts = (spec.get("deployment") or {}).get("hosts") or {}
    host = hosts.get(spec.get("host")) or {}
    return str(host.get("sglang_version") or "")


def verify_timer(root: str) -> dict:
    """The verify timer's last result under `root`: when, each gate's pass, and the release it judged."""
    out: dict = {}
    metrics = os.path.join(root, "verify-timer", "metrics")
    try:
        owner = os.stat(metrics).st_uid
    except OSError:
        return out
    # The service user's folder: a name there may be a FIFO or a link to a root-only file, read as the publish
    # step reads it (no link followed, no blocking, bounded) or not at all.
    for path in sorted(glob.glob(os.path.join(metrics, "*.prom"))):
        try:
            text = read_source(path, owner).decode("utf-8", errors="replace")
        except Refused:
            continue
        for name, labels, value in SAMPLE.findall(text):
            tags = dict(LABEL.findall(labels))
            if name == "dsv4deploy_last_verification_timestamp_seconds":
                out["at"] = float(value)
            elif name == "dsv4deploy_gate_passed":
                out.setdefault("gates", {})[tags.get("gate", "?")] = float(value) == 1
            elif name == "dsv4deploy_release_info":
                out["release"] = tags.get("release", "")
    return out


def services(mgr: object, root: str) -> list[dict]:
    """The active release's services (drain order) with their state."""
    names = chosen(root, None, "all")
    found = report(mgr, names)["services"]
    # A program within supervisord's startsecs has a process but is not RUNNING yet: "starting", not "stopped".
    return [{"name": n, "state": "running" if found[n].get("running") else "starting" if found[n].get("serving")
             else "stopped", "pid": found[n].get("pid")} for n in names]


def main() -> None:
    """Run the module."""
    module = AnsibleModule(argument_spec=dict(MANAGER_OPTIONS), supports_check_mode=True)
    p = module.params
    root = p["install_root"]
    if root_problem(root):
        module.fail_json(msg=root_problem(root))
    active = store.active(root)
    status, created = release_status(root, active)
    result = {"changed": False, "active": active or "", "release_status": status, "engine": engine(root),
              "verify_timer": verify_timer(root), "services": []}
    if created is not None:
        result["created"] = created
    if active:
        mgr = open_manager(p["manager"], root, p["supervisor_bin_dir"] or None, p["unit_dir"])
        try:
            result["services"] = services(mgr, root)
        except ServiceError as exc:
            module.fail_json(msg=str(exc), **{k: v for k, v in result.items() if k != "changed"})
    module.exit_json(**result)


if __name__ == "__main__":
    main()
