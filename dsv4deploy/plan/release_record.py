"""The record of its services each release carries (`services.json`), written at install time.

Name, role, drain rank, ports, GPUs and endpoint of every service of the host's release: what stop,
rollback and verify need to act on the release later, whatever the inventory says by then.
"""

from __future__ import annotations

import json
from typing import Any

from dsv4deploy.plan.services import ServiceDefinition, build_services
from dsv4deploy.spec import Deployment

SERVICES_FILE = "services.json"
SERVICES_FORMAT = 1
# Stop order, lowest first: the router stops taking requests and drains, then decode workers (which read
# KV from the prefills), then prefill workers and the combined server.
DRAIN_RANK = {"router": 0, "decode": 1, "prefill": 2, "combined": 2}


def service_record(svc: ServiceDefinition) -> dict[str, Any]:
    """One service as its release records it."""
    record = {"name": svc.name, "role": svc.role, "drain_rank": DRAIN_RANK[svc.role], "ports": list(svc.ports),
              "gpus": list(svc.gpus), "endpoint": svc.url, "service_manager": svc.service_manager}
    if svc.rank0:
        # A multi-node server's rank >= 1: its /health is a dummy; it serves as part of rank0's server.
        record.update(node_rank=svc.node_rank, rank0=svc.rank0)
    return record


def services_json(spec: Deployment, host: str) -> str:
    """`services.json` of `host`'s release: its services in drain order, as stable JSON."""
    mine = [s for s in build_services(spec) if s.host == host]
    records = sorted((service_record(s) for s in mine), key=lambda r: (r["drain_rank"], r["name"]))
    return json.dumps({"format": SERVICES_FORMAT, "host": host, "services": records}, indent=2, sort_keys=True) + "\n"
