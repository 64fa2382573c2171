"""An nftables ruleset per host, from the deployment: what `dsv4deploy firewall` writes.

The API key covers only the HTTP APIs; sglang's `/metrics` and `/health*`, the router's metrics, the prefill's
bootstrap server, torch's store of a multi-node server and mooncake's transfer ports are open to whoever reaches
them (docs/security.md, "Listeners"). Each host's ruleset lets the deployment's own hosts (and the peers named)
reach everything, the clients named reach the API, and drops every other source on the ports that host opens.
The ports come from the same service definitions the release renders, so they are exact.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from dsv4deploy.plan.services import build_services
from dsv4deploy.spec import Deployment, Problem

TABLE = "dsv4deploy"
# Linux's default net.ipv4.ip_local_port_range: where mooncake's and sglang's ZMQ listeners get their ports.
DEFAULT_EPHEMERAL = (32768, 60999)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class HostPorts:
    """What one host opens: the API port(s) clients use, the ports only the deployment's hosts need."""

    api: set[int] = field(default_factory=set)
    internal: dict[int, str] = field(default_factory=dict)  # port -> what listens there
    transfers: bool = False  # a PD server: mooncake and ZMQ listen on ephemeral ports


class FirewallError(ValueError):
    """The deployment or the options cannot be turned into exact rules: one Problem per cause."""

    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def parse_networks(values: list[str], option: str) -> list[Network]:
    """`--client`/`--peer` values as networks (an address is a /32 or /128); a bad one names the option."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise FirewallError([Problem(field=option, message=f"{value!r} is not an IP address or network",
                                         fix=f"give {option} as an address or CIDR, e.g. 192.0.2.0/24")]) from None
    return out


def host_ports(spec: Deployment) -> dict[str, HostPorts]:
    """Every port each host of the active topology opens, named, from the rendered services."""
    ports: dict[str, HostPorts] = {}
    for svc in build_services(spec):
        mine = ports.setdefault(svc.host, HostPorts())
        if svc.role == "router":
            mine.api.add(svc.ports[0])
            mine.internal[svc.ports[1]] = f"{svc.name}: the router's Prometheus metrics"
            continue
        if svc.role == "combined" and svc.node_rank == 0:
            mine.api.add(svc.ports[0])  # the clients' API; its /metrics and /health ride along
        else:
            mine.internal[svc.ports[0]] = f"{svc.name}: sglang's API, /metrics and /health (the router's way in)"
        if svc.role == "prefill" and len(svc.ports) > 1:
            mine.internal[svc.ports[1]] = f"{svc.name}: the bootstrap server the decodes register with"
        mine.transfers = mine.transfers or svc.role in ("prefill", "decode")
    for path, worker in spec.workers():
        if len(worker.node_names()) > 1 and worker.dist_init_port is not None:
            ports.setdefault(worker.host, HostPorts()).internal[worker.dist_init_port] = \
                f"{path}: torch's store for the ranks on {', '.join(worker.node_names())}"
    return ports


def host_networks(spec: Deployment) -> dict[str, Network]:
    """Each host's inventory address as a /32 or /128; a name that is no IP address is refused."""
    out, problems = {}, []
    for name in spec.hosts_in_use():
        address = spec.host(name).address
        try:
            out[name] = ipaddress.ip_network(address)
        except ValueError:
            problems.append(Problem(field="ansible_host", host=name,
                                    message=f"{address!r} is not an IP address: a firewall rule needs one",
                                    fix=f"set ansible_host of {name} to its address on the deployment's network"))
    if problems:
        raise FirewallError(problems)
    return out


def _elements(nets: list[Network], version: int) -> str:
    chosen = sorted({str(n) for n in nets if n.version == version})
    return f" elements = {{ {', '.join(chosen)} }};" if chosen else ""


def _ports(ports: set[int] | list[int]) -> str:
    ordered = sorted(ports)
    return str(ordered[0]) if len(ordered) == 1 else "{ " + ", ".join(map(str, ordered)) + " }"


def ruleset(host: str, address: Network, opened: HostPorts, peers: list[Network], clients: list[Network],
            ephemeral: tuple[int, int] = DEFAULT_EPHEMERAL) -> str:
    """One host's nftables file: `nft -f` applies it, and applying it again replaces the table."""
    lines = [f"# dsv4deploy firewall for {host} ({address.network_address}), written by `dsv4deploy firewall` from "
             "the inventory.",
             f"# Apply: nft -f {host}.nft   Show: nft list table inet {TABLE}   Remove: nft delete table inet {TABLE}",
             f"table inet {TABLE}", f"delete table inet {TABLE}", f"table inet {TABLE} {{"]
    for name, nets in (("peers", peers), ("clients", clients)):
        lines += [f"  set {name}4 {{ type ipv4_addr; flags interval;{_elements(nets, 4)} }}",
                  f"  set {name}6 {{ type ipv6_addr; flags interval;{_elements(nets, 6)} }}"]
    lines += ["  chain input {", "    type filter hook input priority filter; policy accept;",
              '    iif "lo" accept', "    ct state established,related accept",
              "    # The deployment's hosts (and the peers named): the router to the workers, prefill and decode.",
              "    ip saddr @peers4 accept", "    ip6 saddr @peers6 accept"]
    if opened.api and clients:
        lines += ["    # The API the clients use (the key covers it).",
                  f"    tcp dport {_ports(opened.api)} ip saddr @clients4 accept",
                  f"    tcp dport {_ports(opened.api)} ip6 saddr @clients6 accept",
                  f"    tcp dport {_ports(opened.api)} drop"]
    elif opened.api:
        lines.append(f"    # The API ({_ports(opened.api)}) stays open to everyone: no --client was given.")
    for port, what in sorted(opened.internal.items()):
        lines += [f"    # {what}", f"    tcp dport {port} drop"]
    if opened.transfers:
        lines += ["    # Mooncake's transfer engine and sglang's ZMQ sockets: ephemeral ports.",
                  f"    tcp dport {ephemeral[0]}-{ephemeral[1]} drop"]
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def firewall_files(spec: Deployment, clients: list[Network], extra_peers: list[Network],
                   ephemeral: tuple[int, int] = DEFAULT_EPHEMERAL) -> dict[str, str]:
    """`<host>.nft` content per host of the active topology."""
    addresses = host_networks(spec)
    peers = [*addresses.values(), *extra_peers]
    return {host: ruleset(host, addresses[host], opened, peers, clients, ephemeral)
            for host, opened in sorted(host_ports(spec).items())}
