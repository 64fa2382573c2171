"""Which host must reach which, and whether the inventory lets it: the cross-host paths of a deployment.

A worker that another host must reach (the router reaches every worker, a decode every prefill's
bootstrap port, the ranks of a multi-node server their rank 0's rendezvous port) is refused when what
that host would connect to cannot be reached from it: a loopback listener, or a host with no address
(no `ansible_host`, so the plan would render 127.0.0.1). Hosts whose addresses are all loopback are
one machine (the embedded host, a test's several hosts on one box) and reach each other there.

`cross_host_paths(spec)` lists the paths (preflight proves each one on the hosts before anything
stops); `reachability_problems(spec)` refuses what cannot work whatever the network does.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from dsv4deploy.spec.models import Deployment, HostSpec, PrefillSpec, Problem

WILDCARDS = ("0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class Path:
    """One connection the deployment needs: from host `source` to `address`:`port` on host `target`."""

    source: str
    target: str
    address: str
    port: int
    what: str  # who connects, e.g. "the router on gpu2"
    reaches: str  # what it connects to, e.g. "decode[0]", "prefill[0]'s bootstrap port"
    field: str  # the setting that chose the address: listen, or ansible_host
    worker: str  # the spec path of the server reached, e.g. decode[0]


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost (a host name is not loopback)."""
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def _to(source: str, host: HostSpec, port: int, what: str, reaches: str, worker: str,
        rendezvous: bool = False) -> Path:
    # The rendezvous address is the host's own (--dist-init-addr); a listener's is its bind address
    # unless it binds every address.
    by_listen = not rendezvous and host.listen not in WILDCARDS
    address = host.listen if by_listen else host.address
    return Path(source=source, target=host.name, address=address, port=port, what=what, reaches=reaches,
                field="listen" if by_listen else "ansible_host", worker=worker)


def cross_host_paths(spec: Deployment) -> list[Path]:
    """Every connection from one host to another that the active topology needs."""
    paths: list[Path] = []
    workers = spec.workers()
    if spec.topology == "pd" and spec.router is not None:
        for path, worker in workers:
            paths.append(_to(spec.router.host, spec.host(worker.host), worker.port,
                             f"the router on {spec.router.host}", path, path))
    prefills = [(p, w) for p, w in workers if isinstance(w, PrefillSpec)]
    for path, decode in ((p, w) for p, w in workers if p.startswith("decode")):
        for ppath, prefill in prefills:
            paths.append(_to(decode.host, spec.host(prefill.host), prefill.bootstrap_port,
                             f"{path} on {decode.host}", f"{ppath}'s bootstrap port", ppath))
    for path, worker in workers:
        if len(worker.node_names()) > 1 and worker.dist_init_port is not None:
            for node in worker.node_names()[1:]:
                paths.append(_to(node, spec.host(worker.host), worker.dist_init_port, f"{path}'s rank on {node}",
                                 "its rank 0 (dist_init_port)", path, rendezvous=True))
    return [p for p in paths if p.source != p.target]


def _one_machine(host: HostSpec) -> bool:
    return host.addressed and is_loopback(host.address)


def reachability_problems(spec: Deployment) -> list[Problem]:
    """A problem (field, host, fix) for every cross-host path that cannot work."""
    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for path in cross_host_paths(spec):
        target, source = spec.host(path.target), spec.host(path.source)
        if path.field == "ansible_host" and not target.addressed:
            why = f"{path.target} has no address (no ansible_host), so the plan would point it at {target.address}"
            fix = f"set ansible_host of {path.target} to the address other hosts reach it at"
        elif is_loopback(path.address) and not _one_machine(source):
            where = (f"listens on {path.address}" if path.field == "listen"
                     else f"has the loopback address {path.address}")
            why = f"{path.target} {where}, which {path.source} cannot reach"
            fix = (f"set listen of {path.target} to 0.0.0.0 or its own address (with an api_key)"
                   if path.field == "listen"
                   else f"set ansible_host of {path.target} to an address {path.source} reaches")
        else:
            continue
        if (path.field, path.target) in seen:
            continue
        seen.add((path.field, path.target))
        out.append(Problem(field=path.field, host=path.target,
                           message=f"{path.what} must reach {path.reaches} on {path.target} port {path.port}, "
                                   f"but {why}",
                           fix=fix))
    return out
