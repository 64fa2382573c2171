"""An installed release as the restore acts on it, read from its own records on the host.

Every release records, at install time, its services (`services.json`, see dsv4deploy.plan.release_record)
beside its resolved spec (`spec.json`). Stop, rollback and verify read these records
from the host instead of planning the inventory's next spec, so an inventory edited since the deploy
(to an invalid value, or to other ports) never blocks them, and a rollback gates the restored
release's own endpoints.
"""

from __future__ import annotations

import json
from typing import Any

from dsv4deploy import plan as plans
from dsv4deploy.plan.release_record import service_record
from dsv4deploy.plan.services import build_services
from dsv4deploy.spec import Deployment, HostSpec, Problem, SpecError, install_root_problems


def locate(install_roots: dict[str, Any]) -> dict[str, str]:
    """Each host's install root, from the inventory (None: the default), checked like a deploy checks it.

    The only part of the inventory stop, rollback and verify read: an inventory whose other values
    were changed, even to invalid ones, still finds its releases. Raises SpecError naming the host.
    """
    roots = {host: HostSpec.model_fields["install_root"].default if root in (None, "") else root
             for host, root in install_roots.items()}
    problems: list[Problem] = []
    for host, root in roots.items():
        if not isinstance(root, str):
            problems.append(Problem(field="install_root", host=host, message=f"{root!r} is not a path",
                                    fix="use an absolute path, e.g. /opt/dsv4deploy"))
        else:
            problems += install_root_problems(host, root)
    if problems:
        raise SpecError(problems)
    return roots


def host_view(records: list[dict[str, Any]], install_root: str, service_manager: str) -> dict[str, Any]:
    """A host's part of an installed release, from its services record: what a stop, switch or gate needs."""
    return {
        "services": [r["name"] for r in sorted(records, key=lambda r: (r["drain_rank"], r["name"]))],
        "gpus": sorted({g for r in records for g in r["gpus"]}),
        "ports": sorted({p for r in records for p in r["ports"]}),
        "install_root": install_root,
        "service_manager": service_manager,
        "files": {},
    }


def release_view(release_id: str, spec_files: dict[str, str], services_files: dict[str, str],
                 install_roots: dict[str, str], play_hosts: list[str]) -> dict[str, Any]:
    """The installed release `release_id` as the restore acts on it.

    `spec_files` and `services_files` map a host to the text of the release's spec.json and
    services.json there, empty where it has none: a host without spec.json does not have the release
    and runs nothing of it; a release installed before services.json existed is read from its spec.
    `install_roots` is where each play host keeps its releases (the inventory's checked install root).
    With the release on no host (nothing is deployed) the view names no service and no target.
    Raises ValueError or KeyError for a file that is not a release's.
    """
    having = [h for h in play_hosts if spec_files.get(h)]
    if not release_id or not having:
        return {"release_id": release_id or "", "installed_on": [],
                "hosts": {h: host_view([], install_roots.get(h, ""), "") for h in play_hosts}}
    spec = Deployment.model_validate(json.loads(spec_files[having[0]])["deployment"])
    targets = plans.gate_targets(spec)
    hosts = {}
    for host in play_hosts:
        records: list[dict[str, Any]] = []
        if host in having:
            text = services_files.get(host) or ""
            records = json.loads(text)["services"] if text else [
                service_record(s) for s in build_services(spec) if s.host == host]
        settings = spec.hosts.get(host)
        manager = records[0]["service_manager"] if records else (settings.service_manager if settings else "")
        hosts[host] = host_view(records, install_roots.get(host, ""), manager)
    return {"release_id": release_id, "installed_on": having, **targets, "hosts": hosts,
            "spec": spec.model_dump(mode="json")}
