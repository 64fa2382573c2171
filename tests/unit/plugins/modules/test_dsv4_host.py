"""dsv4_host's preflight in one module run (state=check with access and lock), run as Ansible runs it: the lock
is taken after the access check, and a problem after it is not mistaken for another run's lock."""

from __future__ import annotations

import json
import socket
from pathlib import Path

# At import time, before a test installs Ansible's collection finder (which then refuses this import).
from ansible_collections.dsv4.deploy.plugins.modules.dsv4_host import clashes
from tests.unit.plugins.conftest import BIN_DIR, PROGRAM
from tests.unit.plugins.runner import run_module


def preflight(tmp_path: Path, run_id: str, check_mode: bool = False, **extra: object) -> dict:
    """dsv4_host's preflight with the lock (and whatever `extra` adds), on a host with no GPU to check."""
    root = tmp_path / "root"
    return run_module("dsv4_host", tmp_path, check_mode=check_mode, gpu_query_command=["false"], state="check",
                      services={"manager": "supervisor", "install_root": str(root)},
                      lock={"path": str(root / "deploy.lock"), "run_id": run_id, "owner": "alice@ops",
                            "controller": "ctl", "controller_pid": 4242, "phase": "preflight"}, **extra)


def test_the_preflight_takes_the_lock_after_the_access_check_and_names_a_holder(tmp_path: Path) -> None:
    path = tmp_path / "root" / "deploy.lock"
    missing = {"host": "gpu1", "user": "no-such-user-dsv4", "needs": []}
    refused = preflight(tmp_path, "r1", access=missing)
    assert refused["failed"] and refused["msg"].startswith("the services could not start as configured:")
    assert "host gpu1, user no-such-user-dsv4: user no-such-user-dsv4 does not exist" in refused["msg"]
    assert not path.exists(), "an access problem changes nothing, not even the lock"
    assert preflight(tmp_path, "r1", check_mode=True)["would"] == [f"take the lock {path}"]
    assert not path.exists(), "check mode takes no lock"
    taken = preflight(tmp_path, "r1")
    assert not taken.get("failed") and taken["holder"]["run_id"] == "r1" and taken["previous"] is None
    assert taken["kept_warm"] is False and taken["services"] == {}
    assert json.loads(path.read_text())["controller_pid"] == 4242
    held = preflight(tmp_path, "r2")
    assert held["failed"] and "another run holds" in held["msg"] and held["holder"]["run_id"] == "r1"
    (tmp_path / "root" / "blue_green.json").write_text("{}")
    assert preflight(tmp_path, "r1")["kept_warm"] is True
    assert taken["roll_record"] is False
    (tmp_path / "root" / "rolling.json").write_text("{}")
    assert preflight(tmp_path, "r1")["roll_record"] is True


def test_a_preflight_problem_after_the_lock_is_not_reported_as_a_held_lock(tmp_path: Path) -> None:
    # The port check fails (this test's own listener is not ours): the failure carries no holder, so the action
    # does not mistake this run's own lock for another run's.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        out = preflight(tmp_path, "r1", ports=[sock.getsockname()[1]])
    assert out["failed"] and out["msg"].startswith("preflight failed:") and "holder" not in out
    assert json.loads((tmp_path / "root" / "deploy.lock").read_text())["run_id"] == "r1"


def test_a_listener_on_another_address_leaves_the_port_to_a_server_bound_elsewhere(tmp_path: Path) -> None:
    # Two nodes of a multi-node server on one machine: rank 0 on 127.0.0.1:P does not take 127.0.0.2:P, but it
    # takes P from a server bound to 127.0.0.1 or to every address (and from one whose address is not named).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        elsewhere = run_module("dsv4_host", tmp_path, gpu_query_command=["false"], state="check", ports=[port],
                               port_addresses={str(port): "127.0.0.2"})
        same, wildcard, unnamed = (
            run_module("dsv4_host", tmp_path, gpu_query_command=["false"], state="check", ports=[port], **extra)
            for extra in ({"port_addresses": {str(port): "127.0.0.1"}}, {"port_addresses": {str(port): "0.0.0.0"}},
                          {}))
    assert not elsewhere.get("failed") and elsewhere["problems"] == [], elsewhere
    for out in (same, wildcard, unnamed):
        assert out["failed"] and f"port {port} is taken by" in out["msg"], out


def test_addresses_clash_when_equal_or_either_is_a_wildcard_and_an_ipv4_mapped_listener_is_its_ipv4() -> None:
    assert [clashes(bound, other) for bound, other in (("127.0.0.2", "127.0.0.1"), ("127.0.0.1", "::ffff:127.0.0.1"),
                                                       ("127.0.0.1", "::"), ("0.0.0.0", "10.0.0.1"),
                                                       (None, "10.0.0.1"))] == [False, True, True, True, True]


def test_a_program_within_supervisords_startsecs_counts_as_serving(tmp_path: Path, install_root: Path) -> None:
    # A deploy started within startsecs of the previous start finds the program STARTING: the strategy that keeps
    # the old release serving (blue_green, rolling) must count it as serving, not fall back to recreate's outage.
    conf = install_root / "current" / "supervisor" / f"{PROGRAM}.conf"
    conf.write_text(conf.read_text().replace("startsecs=0", "startsecs=120"))
    started = run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(install_root),
                         supervisor_bin_dir=BIN_DIR, state="started")
    assert started["started"] == [PROGRAM], started
    out = run_module("dsv4_host", tmp_path, gpu_query_command=["false"], state="check",
                     services={"manager": "supervisor", "install_root": str(install_root),
                               "supervisor_bin_dir": BIN_DIR})
    status = out["services"][PROGRAM]
    assert status["state"] == "STARTING" and not status["running"], status
    assert status["serving"] is True and status["pid"] in out["pids"], status


def test_a_stopped_program_is_not_serving(tmp_path: Path, install_root: Path) -> None:
    out = run_module("dsv4_host", tmp_path, gpu_query_command=["false"], state="check",
                     services={"manager": "supervisor", "install_root": str(install_root),
                               "supervisor_bin_dir": BIN_DIR})
    assert out["services"][PROGRAM]["serving"] is False, out
