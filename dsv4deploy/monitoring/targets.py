"""File-based service discovery groups for one deployment: where each of its metrics endpoints listens."""

from __future__ import annotations

from dsv4deploy.net import is_loopback
from dsv4deploy.plan.services import build_services, derived_name, prometheus_port, reach_address, url_host
from dsv4deploy.spec import Deployment

# Scrape jobs, one per kind of endpoint; the alert rules and the dashboard select by these names.
JOB_WORKERS = "dsv4deploy-workers"
JOB_ROUTER = "dsv4deploy-router"
JOB_NODE = "dsv4deploy-node"
NODE_EXPORTER_PORT = 9100


def deployment_label(spec: Deployment) -> str:
    """The deployment's name as the verify timer's textfile metrics carry it (label `deployment`).

    `deployment_name`, else derived from the install root as the verify timer derives it; with several
    install roots, the first host's (in name order) that runs something.
    """
    if spec.deployment_name:
        return spec.deployment_name
    return derived_name(spec.host(spec.hosts_in_use()[0]).install_root)


Groups = dict[str, list[dict]]


def scrape_targets(spec: Deployment, node_exporter_port: int = NODE_EXPORTER_PORT) -> tuple[Groups, list[str]]:
    """The file_sd groups of each job (``{job: [{"targets": [...], "labels": {...}}]}``) and a note per
    endpoint left out.

    A worker is scraped on its rank 0 (the only rank with an HTTP server), at the address the router
    reaches it; the router on its metrics port and listen address; node_exporter on every host in use.
    An endpoint bound to loopback on a host with another address is left out (Prometheus elsewhere
    would scrape its own loopback), with a note naming the setting that opens it.
    """
    deployment = deployment_label(spec)
    groups: Groups = {JOB_WORKERS: [], JOB_ROUTER: [], JOB_NODE: []}
    notes: list[str] = []

    def add(job: str, host_name: str, address: str, port: int, role: str, field: str,
            worker: str | None = None) -> None:
        if is_loopback(address) and not is_loopback(spec.host(host_name).address):
            notes.append(f"{worker or role} on {host_name}: listens on {address} only, so a Prometheus on another "
                         f"host cannot scrape it; left out. Fix: set {field} to 0.0.0.0 (or {host_name}'s address), "
                         f"or run Prometheus on {host_name}")
            return
        labels = {"deployment": deployment, "host": host_name, "role": role}
        if worker is not None:
            labels["worker"] = worker
        groups[job].append({"targets": [f"{url_host(address)}:{port}"], "labels": labels})

    for svc in build_services(spec):
        if svc.role == "router" or svc.node_rank != 0:
            continue
        host = spec.host(svc.host)
        add(JOB_WORKERS, svc.host, reach_address(host, host.listen), svc.ports[0], svc.role,
            f"hosts.{svc.host}.listen", worker=svc.name)
    if spec.topology == "pd" and spec.router is not None:
        router = spec.router
        add(JOB_ROUTER, router.host, reach_address(spec.host(router.host), router.prometheus_listen),
            prometheus_port(router), "router", "router.prometheus_listen")
    for name in spec.hosts_in_use():
        add(JOB_NODE, name, spec.host(name).address, node_exporter_port, "node", "")
    return {job: sorted(g, key=lambda g: g["targets"]) for job, g in groups.items() if g}, notes
