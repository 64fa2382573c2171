"""`dsv4deploy firewall`: each host's nftables ruleset names exactly the ports that host opens."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dsv4deploy.cli import main
from dsv4deploy.plan.firewall import FirewallError, firewall_files, host_ports, parse_networks

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import combined_spec, multi_node_pd_spec, pd_spec, xpyd_spec

CLIENTS = parse_networks(["192.0.2.0/24"], "--client")


def drops(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().endswith("drop")]


def test_each_host_drops_the_ports_it_opens_and_lets_the_peers_in() -> None:
    files = firewall_files(xpyd_spec(), CLIENTS, parse_networks(["10.9.9.9"], "--peer"))
    assert drops(files["gpu1"]) == ["tcp dport 8000 drop", "tcp dport 8998 drop", "tcp dport 29000 drop",
                                    "tcp dport 30001 drop", "tcp dport 32768-60999 drop"]
    assert drops(files["gpu2"]) == ["tcp dport 8999 drop", "tcp dport 30001 drop", "tcp dport 32768-60999 drop"]
    assert drops(files["gpu3"]) == ["tcp dport 30002 drop", "tcp dport 30003 drop", "tcp dport 32768-60999 drop"]
    assert "elements = { 10.0.0.11/32, 10.0.0.12/32, 10.0.0.13/32, 10.9.9.9/32 };" in files["gpu3"]
    assert "tcp dport 8000 ip saddr @clients4 accept" in files["gpu1"]
    # The accepts come before any drop: a peer or a client is never dropped.
    text = files["gpu1"]
    assert text.index("ip saddr @peers4 accept") < text.index("@clients4 accept") < text.index("drop")


def test_the_multi_node_store_is_closed_on_rank0s_node_and_the_rank_port_on_the_other() -> None:
    files = firewall_files(multi_node_pd_spec(), CLIENTS, [])
    assert "tcp dport 5000 drop" in drops(files["gpu1"])
    assert "tcp dport 5000 drop" not in drops(files["gpu2"]) and "tcp dport 30002 drop" in drops(files["gpu2"])


def test_combined_serves_its_port_to_the_clients_and_opens_no_transfer_range() -> None:
    spec = combined_spec()
    port = spec.combined.port
    assert host_ports(spec)["gpu1"].api == {port} and not host_ports(spec)["gpu1"].transfers
    assert drops(firewall_files(spec, CLIENTS, [])["gpu1"]) == [f"tcp dport {port} drop"]
    # No client named: the API stays open, and the file says so.
    assert drops(firewall_files(spec, [], [])["gpu1"]) == []
    assert "stays open to everyone: no --client was given" in firewall_files(spec, [], [])["gpu1"]


def test_a_host_named_by_a_dns_name_is_refused_naming_the_host_and_the_fix() -> None:
    spec = pd_spec(host={"ansible_host": "gpu1.example.org"})
    with pytest.raises(FirewallError) as err:
        firewall_files(spec, CLIENTS, [])
    assert "'gpu1.example.org' is not an IP address" in str(err.value)
    assert "set ansible_host of gpu1 to its address" in str(err.value)


def test_the_command_writes_one_file_per_host_and_refuses_a_bad_client(tmp_path: Path, capsys) -> None:
    inventory = str(Path(__file__).resolve().parents[3] / "inventory" / "examples" / "1p1d-three-hosts")
    out = tmp_path / "fw"
    assert main(["firewall", "-i", inventory, "--out", str(out), "--client", "192.0.2.0/24"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["decode1.nft", "prefill1.nft", "router1.nft"]
    assert "tcp dport 8998 drop" in (out / "prefill1.nft").read_text()
    assert main(["firewall", "-i", inventory, "--out", str(out), "--client", "192.0.2.0/33"]) == 2
    assert "--client: '192.0.2.0/33' is not an IP address or network" in capsys.readouterr().err




def test_the_ephemeral_range_is_the_one_given(tmp_path: Path, capsys) -> None:
    inventory = str(Path(__file__).resolve().parents[3] / "inventory" / "examples" / "1p1d-three-hosts")
    out = tmp_path / "fw"
    assert main(["firewall", "-i", inventory, "--out", str(out), "--ephemeral-ports", "40000-50000"]) == 0
    assert "tcp dport 40000-50000 drop" in drops((out / "decode1.nft").read_text())
    assert not any("-" in rule for rule in drops((out / "router1.nft").read_text()))  # no PD server there
    with pytest.raises(SystemExit):
        main(["firewall", "-i", inventory, "--out", str(out), "--ephemeral-ports", "50000-40000"])
    assert "is not a port range within 1-65535, low first" in capsys.readouterr().err
