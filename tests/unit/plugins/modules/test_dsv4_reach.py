"""dsv4_reach proves a cross-host path between two hosts (two network namespaces joined by a veth pair):
a listener on the target's port, a connection from the source; what is in the way is named - refused
(nothing listens: a wrong address) apart from timed out (a path that drops packets, as a firewall does)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.plugins.runner import MODULES, REPO

SOURCE, TARGET, NOWHERE = "10.199.0.1", "10.199.0.2", "10.199.0.3"
PATH = {"address": TARGET, "port": 30002, "target": "db", "what": "the router on rt", "reaches": "decode[0]",
        "field": "ansible_host"}


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


@pytest.fixture
def hosts() -> Iterator[dict[str, str]]:
    """Two namespaces, rt (the source, 10.199.0.1) and db (the target, 10.199.0.2); rt sends 10.199.0.3's
    packets to a MAC no one has, so they are dropped unanswered."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make two network namespaces")
    names = {"rt": f"dsv4r{os.getpid()}s", "db": f"dsv4r{os.getpid()}t"}
    try:
        for ns in names.values():
            _ip("netns", "add", ns)
        _ip("link", "add", "dsv4rs", "netns", names["rt"], "type", "veth", "peer", "name", "dsv4rt",
            "netns", names["db"])
        for host, dev, addr in (("rt", "dsv4rs", SOURCE), ("db", "dsv4rt", TARGET)):
            _ip("-n", names[host], "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", names[host], "link", "set", dev, "up")
            _ip("-n", names[host], "link", "set", "lo", "up")
        _ip("-n", names["rt"], "neigh", "add", NOWHERE, "lladdr", "02:00:00:00:00:99", "dev", "dsv4rs",
            "nud", "permanent")
    except subprocess.CalledProcessError as exc:
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        pytest.skip(f"cannot make network namespaces here: {exc.stderr.decode().strip()}")
    try:
        yield names
    finally:
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def reach(ns: str, tmp_path: Path, **args: object) -> dict:
    """dsv4_reach run inside namespace `ns`, as Ansible runs it on that host."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, str(MODULES / "dsv4_reach.py"),
                           str(args_file)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def listeners() -> Iterator[list[int]]:
    """PIDs of listeners a test started, ended by PID when the test did not stop them."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            if b"dsv4-reach-listener" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_path_to_the_targets_listener_is_proven_and_the_listener_stopped(
        hosts: dict[str, str], tmp_path: Path, listeners: list[int]) -> None:
    started = reach(hosts["db"], tmp_path, state="listen", ports=[{"address": "0.0.0.0", "port": 30002}], ttl_s=60)
    assert (started["bound"], started["busy"]) == ([30002], [])
    listeners.append(started["pid"])
    proven = reach(hosts["rt"], tmp_path, state="connect", paths=[PATH], timeout_s=3)
    assert (proven.get("failed"), proven["proven"]) == (None, ["db:30002"])
    assert reach(hosts["db"], tmp_path, state="stop", pid=started["pid"])["stopped"] is True
    assert not Path(f"/proc/{started['pid']}").exists() or b"dsv4-reach-listener" not in \
        Path(f"/proc/{started['pid']}/cmdline").read_bytes()
    # With the listener gone the same path is refused: the check can fail.
    assert reach(hosts["rt"], tmp_path, state="connect", paths=[PATH], timeout_s=3)["failed"] is True


def test_nothing_listening_is_refused_and_a_path_that_drops_packets_times_out(
        hosts: dict[str, str], tmp_path: Path) -> None:
    refused = reach(hosts["rt"], tmp_path, state="connect", paths=[{**PATH, "field": "listen"}], timeout_s=3)
    assert refused["failed"] is True
    assert refused["msg"] == (
        "listen (host db): the router on rt cannot reach decode[0] at 10.199.0.2:30002: connection refused: "
        "10.199.0.2 answered but nothing listens on port 30002 there (a wrong address: another machine answers "
        "at 10.199.0.2, or the listener could not bind); fix: set listen of db to an address the connecting "
        "host reaches (0.0.0.0, with an api_key)")
    dropped = reach(hosts["rt"], tmp_path, state="connect", paths=[{**PATH, "address": NOWHERE}], timeout_s=1)
    assert dropped["msg"] == (
        "ansible_host (host db): the router on rt cannot reach decode[0] at 10.199.0.3:30002: timed out after 1 s: "
        "likely a firewall dropping port 30002, or 10.199.0.3 is not on a route from here; fix: check ansible_host "
        "of db (10.199.0.3) is the address other hosts reach it at, and that port 30002 is open to them")


def test_a_port_the_serving_release_holds_is_left_to_it(hosts: dict[str, str], tmp_path: Path,
                                                        listeners: list[int]) -> None:
    serving = reach(hosts["db"], tmp_path, state="listen", ports=[{"address": "0.0.0.0", "port": 30002}], ttl_s=60)
    listeners.append(serving["pid"])
    again = reach(hosts["db"], tmp_path, state="listen", ports=[{"address": "0.0.0.0", "port": 30002}], ttl_s=60)
    assert (again["pid"], again["bound"], again["busy"]) == (None, [], [30002])
    # What connects reaches the listener that holds the port.
    assert reach(hosts["rt"], tmp_path, state="connect", paths=[PATH], timeout_s=3)["proven"] == ["db:30002"]
    assert reach(hosts["db"], tmp_path, state="stop", pid=serving["pid"])["stopped"] is True


def test_a_port_held_on_loopback_is_proven_at_the_address_the_others_connect_to(
        hosts: dict[str, str], tmp_path: Path, listeners: list[int]) -> None:
    # The serving release listens on loopback; the new one will listen on every address.
    old = reach(hosts["db"], tmp_path, state="listen", ports=[{"address": "127.0.0.1", "port": 30002}], ttl_s=60)
    listeners.append(old["pid"])
    new = reach(hosts["db"], tmp_path, state="listen", ttl_s=60,
                ports=[{"address": "0.0.0.0", "port": 30002, "reach": TARGET}])
    listeners.append(new["pid"])
    assert (new["bound"], new["busy"]) == ([30002], [])
    assert reach(hosts["rt"], tmp_path, state="connect", paths=[PATH], timeout_s=3)["proven"] == ["db:30002"]
    for pid in (new["pid"], old["pid"]):
        assert reach(hosts["db"], tmp_path, state="stop", pid=pid)["stopped"] is True
