"""1P1D across three real systemd hosts over ssh: prefill, decode and router each on its own host.

The inventory is inventory/examples/1p1d-three-hosts with the lab's addresses and the simulator
standing in for sglang and nvidia-smi (each host's simulated GPUs are its own). The decode reaches
the prefill's bootstrap port across the bridge. The API key comes from a vault variable, so the
playbook installs it on each host for the service user. Tests run in order on the same three hosts;
the lab also boots the example's second pair (prefill2, decode2), idle until blue_green_hosts moves the
release onto it and back, and the last stop covers all five.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.systemd import checks, example_site
from tests.systemd.checks import GATES, INSTALL_ROOT, ROUTER_UNIT, assert_moved, main_pids, new_release, output
from tests.systemd.hostkit import CONTROLLER_ADDRESS, REPO, VENV_BIN, Lab

READINESS = ("-e", '{"dsv4_gates_names": ["readiness"]}')  # for a deploy whose gates are not the subject

UNITS = {"prefill1": ["sglang-dsv4-prefill"], "decode1": ["sglang-dsv4-decode"], "router1": ["sglang-dsv4-router"]}
API_KEY = "sk-three-hosts-" + "5f1e0c2a9b7d"
KEY_FILE = f"{INSTALL_ROOT}/secrets/api_key"


# The example's second prefill/decode pair (its commented blue_green_hosts block): booted with the lab, idle and
# named by no inventory but the pair's own (blue_green_hosts' test) and the last stop's.
PAIR = {"prefill1": "prefill2", "decode1": "decode2"}
# The router's metrics on every interface, as a site scraping them from elsewhere has them: the firewall's test then
# proves them closed by the rules, not by a loopback address.
GROUP_VARS = {**GATES, "api_key": {"vault_var": "dsv4_api_key"}, "dsv4_api_key": API_KEY,
              "router": {"host": "router1", "port": 30000, "listen": "0.0.0.0", "prometheus_listen": "0.0.0.0"}}


@pytest.fixture(scope="module")
def lab(hostkit) -> Iterator[Lab]:
    with hostkit.lab([*UNITS, *PAIR.values()], routers=["router1"]) as booted:
        for name in [*UNITS, *PAIR.values()]:  # the model folder the example names, on every host that runs a server
            example_site.install_model(booted.hosts[name])
        yield booted


@pytest.fixture(scope="module")
def inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lab.write_inventory(tmp_path_factory.mktemp("three") / "inventory", example="1p1d-three-hosts",
                               group_vars=GROUP_VARS, only=list(UNITS))


@pytest.fixture(scope="module")
def pair_inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example with its second pair added as its comment says: prefill2 and decode2 in hosts.yml with prefill1's
    and decode1's host variables, and its two `dsv4_rollout_*` lines uncommented."""
    example = REPO / "inventory" / "examples" / "1p1d-three-hosts" / "host_vars"
    host_vars = {new: yaml.safe_load((example / f"{old}.yml").read_text()) for old, new in PAIR.items()}
    return lab.write_inventory(tmp_path_factory.mktemp("pair") / "inventory", example="1p1d-three-hosts",
                               group_vars={**GROUP_VARS, **example_site.rollout_block("1p1d-three-hosts")},
                               host_vars=host_vars)


@pytest.fixture(scope="module")
def state() -> dict[str, str]:
    """What earlier tests of the module found (release ids)."""
    return {}


def assert_serving(lab: Lab, release: str) -> None:
    """Every host runs `release`, its units active, enabled and installed from that release."""
    for name, units in UNITS.items():
        host = lab.hosts[name]
        assert checks.active_release(host) == release, name
        for unit in units:
            assert checks.unit_state(host, unit) == ("active", "enabled"), f"{name} {unit}"
            installed = host.exec(["cat", f"/etc/systemd/system/{unit}.service"]).stdout
            shipped = host.exec(["cat", f"{INSTALL_ROOT}/releases/{release}/units/{unit}.service"]).stdout
            assert installed == shipped, f"{name}: {unit} is not the unit of release {release}"


def test_promote_1p1d_across_three_hosts(lab: Lab, inventory: Path, tmp_path: Path, state: dict[str, str]) -> None:
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path)
    assert proc.returncode == 0, output(proc)
    report = checks.report(tmp_path)
    assert report["verdict"] == "promoted"
    assert all(g["status"] == "passed" for g in report["gates"]), report["gates"]
    assert_serving(lab, report["release"])
    # The router hands the decode the prefill's address on the other host; the decode fetches the KV
    # from the prefill's bootstrap port there (the simulated decode fails the request without it, so
    # the passing smoke and needle gates prove the transfer crossed the bridge).
    prefill1, router1 = lab.hosts["prefill1"], lab.hosts["router1"]
    script = router1.exec(["cat", f"{INSTALL_ROOT}/current/bin/serve-sglang-dsv4-router.sh"]).stdout
    assert f"http://{prefill1.address}:30001" in script and "8998" in script, script
    assert prefill1.sh("ss -Hltn '( sport = :8998 )'").stdout.strip(), "the prefill's bootstrap port is not open"
    # Preflight proved those paths over the bridge before anything stopped: the router to both workers, the
    # decode to the prefill's bootstrap port (each host connecting to the others' short-lived listeners).
    proof = proc.stdout.split("Connect along every path from this host]", 1)[1].split("TASK [", 1)[0]
    assert ("ok: [router1]" in proof and "ok: [decode1]" in proof
            and "skipping: [prefill1]" in proof), proof
    # Every unit's exposure is in the report, as the host's own systemd scores the installed unit.
    for name, units in UNITS.items():
        for unit in units:
            scored = report["hardening"][name][f"{unit}.service"]
            on_host = lab.hosts[name].exec(["systemd-analyze", "security", "--offline=true", "--no-pager",
                                           f"/etc/systemd/system/{unit}.service"], check=False).stdout
            assert f"{unit}.service: {scored['exposure']:.1f} {scored['rating']}" in on_host, (scored, on_host[-300:])
    state["good"] = report["release"]


def test_api_key_is_the_service_users_alone(lab: Lab) -> None:
    for name in UNITS:
        host = lab.hosts[name]
        assert host.exec(["runuser", "-u", "sglang", "--", "cat", KEY_FILE]).stdout.strip() == API_KEY, name
        denied = host.exec(["runuser", "-u", "nobody", "--", "cat", KEY_FILE], check=False)
        assert denied.returncode != 0, f"{name}: another user can read the key"
        # No other file a user could read holds the key: not the units, scripts, specs or reports on the host.
        holders = host.sh(f"grep -rlsF {API_KEY} /opt /etc /var/lib /var/log /tmp /home /root /run || true").stdout
        for path in holders.split():
            readable = host.exec(["runuser", "-u", "nobody", "--", "test", "-r", path], check=False).returncode == 0
            assert path == KEY_FILE or not readable, f"{name}: {path} holds the key and others can read it"
        assert not [p for p in holders.split() if p.startswith("/etc/systemd")], f"{name}: a unit holds the key"
        ours = host.sh("journalctl -o cat --no-pager -t sudo -t ansible-dsv4_service_state "
                       "-t ansible-dsv4_service_state_info -t ansible-dsv4_worker_check -t ansible-dsv4_host_releases "
                       "-t ansible-ansible.legacy.copy "
                       "|| true").stdout
        assert API_KEY not in ours, f"{name}: the key is in a journal line the deploy wrote"


# Which of `address:port` accept a TCP connection, tried at once (a dropped SYN waits out the timeout).
PROBE = """import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
def reach(target):
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return True
    except OSError:
        return False
with ThreadPoolExecutor(16) as pool:
    print(json.dumps(dict(zip(sys.argv[1:], pool.map(reach, sys.argv[1:])))))
"""
# A chat request through the router with the key: the prefill, the decode and the KV transfer between them.
ASK = """import json, sys, urllib.request
body = json.dumps({"model": "deepseek-v4-flash", "max_tokens": 8,
                   "messages": [{"role": "user", "content": "say hi"}]}).encode()
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", body, {
    "Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).status)
"""


def reachable_from_controller(lab: Lab, targets: list[str]) -> dict[str, bool]:
    proc = lab.run([sys.executable, "-c", PROBE, *targets], timeout=60)
    assert proc.returncode == 0, output(proc)
    return json.loads(proc.stdout)


def reachable_from(lab: Lab, name: str, targets: list[str]) -> dict[str, bool]:
    return json.loads(lab.hosts[name].exec(["python3", "-c", PROBE, *targets], timeout=60).stdout)


def test_the_firewall_from_the_inventory_closes_what_the_key_does_not_cover(lab: Lab, inventory: Path,
                                                                          tmp_path: Path) -> None:
    """`dsv4deploy firewall` renders each host's rules from the inventory; applied with nft on every host, the
    router still serves a keyed request across the three hosts while the controller, another host that is only a
    client, reaches no worker, bootstrap or metrics port (each of which it reached before)."""
    prefill1, decode1, router1 = (lab.hosts[n] for n in UNITS)
    router_api = f"{router1.address}:30000"
    closed = [f"{prefill1.address}:30001", f"{prefill1.address}:8998", f"{decode1.address}:30002",
              f"{router1.address}:29000"]
    assert reachable_from_controller(lab, [router_api, *closed]) == dict.fromkeys([router_api, *closed], True)
    out = tmp_path / "firewall"
    proc = lab.run([str(VENV_BIN / "dsv4deploy"), "firewall", "-i", str(inventory), "--out", str(out),
                    "--client", CONTROLLER_ADDRESS], timeout=120)
    assert proc.returncode == 0, output(proc)
    try:
        for name in UNITS:
            ruleset = (out / f"{name}.nft").read_text()
            lab.hosts[name].exec(["nft", "-f", "-"], input=ruleset)
            lab.hosts[name].exec(["nft", "-f", "-"], input=ruleset)  # applied again: replaced, not doubled
            listed = lab.hosts[name].exec(["nft", "list", "table", "inet", "dsv4deploy"]).stdout
            assert listed.count("chain input") == 1, listed
        ask = lab.run([sys.executable, "-c", ASK, f"http://{router_api}", API_KEY], timeout=120)
        assert ask.returncode == 0 and ask.stdout.strip() == "200", output(ask)
        assert reachable_from_controller(lab, [router_api, *closed]) == {router_api: True,
                                                                          **dict.fromkeys(closed, False)}
        # Where it must be: the router to both workers, the decode to the prefill's API and bootstrap port.
        assert all(reachable_from(lab, "router1", [f"{prefill1.address}:30001", f"{decode1.address}:30002"])
                   .values())
        assert all(reachable_from(lab, "decode1", [f"{prefill1.address}:30001", f"{prefill1.address}:8998"])
                   .values())
        assert_serving(lab, checks.active_release(router1))
    finally:
        for name in UNITS:
            lab.hosts[name].exec(["nft", "delete", "table", "inet", "dsv4deploy"], check=False)


def run_testinfra(lab: Lab, *hosts_args: str) -> subprocess.CompletedProcess:
    """The deployed-state suite (tests/testinfra) from the controller side, as a user runs it."""
    return lab.run([str(VENV_BIN / "python"), "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                    "tests/testinfra/test_deployed.py", f"--dsv4-install-root={INSTALL_ROOT}", *hosts_args],
                   timeout=600)


def test_testinfra_over_ssh_and_ansible_passes_then_names_the_broken_check(lab: Lab, inventory: Path) -> None:
    over_ssh = ["--hosts=" + ",".join(f"ssh://{name}" for name in UNITS), f"--ssh-config={lab.ssh_config()}"]
    # The ansible backend on one host of the inventory: it runs an ansible module per command (a run over all
    # three was ~2/3 of this test's 220 s under CI's load); the three hosts' states are checked over ssh.
    via_ansible = ["--hosts=ansible://prefill1", f"--ansible-inventory={inventory}"]
    for args in (over_ssh, via_ansible):
        proc = run_testinfra(lab, *args)
        assert proc.returncode == 0, output(proc)
        assert " passed" in proc.stdout and "error" not in proc.stdout.splitlines()[-1], proc.stdout[-2000:]
    # Drift an operator would catch: the decode stopped and disabled by hand.
    decode1 = lab.hosts["decode1"]
    decode1.exec(["systemctl", "disable", "--now", "sglang-dsv4-decode"])
    try:
        # One backend and the drifted host suffice here (each run costs a minute on a loaded machine).
        for args in (["--hosts=ssh://decode1", f"--ssh-config={lab.ssh_config()}"],):
            proc = run_testinfra(lab, *args)
            assert proc.returncode != 0
            failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
            assert any("test_services_are_running" in line and "decode1" in line for line in failed), failed
            assert any("test_units_are_enabled_at_boot" in line and "decode1" in line for line in failed), failed
            assert "sglang-dsv4-decode: not enabled at boot" in proc.stdout, proc.stdout[-3000:]
    finally:
        decode1.exec(["systemctl", "enable", "--now", "sglang-dsv4-decode"])


def test_unchanged_rerun(lab: Lab, inventory: Path, tmp_path: Path, state: dict[str, str]) -> None:
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path)
    assert proc.returncode == 0, output(proc)
    assert checks.report(tmp_path)["verdict"] == "unchanged"
    assert_serving(lab, state["good"])


def test_failed_gate_rolls_back_all_three_hosts(lab: Lab, inventory: Path, tmp_path: Path,
                                                state: dict[str, str]) -> None:
    # index_topk 512 loses the 4K needle: the needle gate fails after the switch.
    proc = lab.playbook("deploy.yml", inventory, "-e", "index_topk=512", reports=tmp_path)
    assert proc.returncode != 0
    assert "ROLLED BACK" in proc.stdout, output(proc)
    report = checks.report(tmp_path)
    assert report["verdict"] == "rolled_back"
    assert report["serving_release"] == state["good"]
    # The restored release's units are the installed and enabled ones, never the failed release's.
    assert_serving(lab, state["good"])


def test_server_dying_after_start_rolls_back_all_three_hosts(lab: Lab, inventory: Path, tmp_path: Path,
                                                             state: dict[str, str]) -> None:
    # Type=exec: the start itself succeeds, the servers die a moment later.
    proc = lab.playbook("deploy.yml", inventory, "-e", "sim_faults=crash_on_start", reports=tmp_path)
    assert proc.returncode != 0
    assert "ROLLED BACK" in proc.stdout, output(proc)
    report = checks.report(tmp_path)
    assert report["verdict"] == "rolled_back" and report["serving_release"] == state["good"]
    assert_serving(lab, state["good"])


def test_rollback_playbook_returns_to_the_previous_release(lab: Lab, inventory: Path, tmp_path: Path,
                                                           state: dict[str, str]) -> None:
    # The second release only needs to be in place: readiness alone (gate names are not part of a release).
    proc = lab.playbook("deploy.yml", inventory, "-e", "context_length=262144", *READINESS, reports=tmp_path / "second")
    assert proc.returncode == 0, output(proc)
    second = checks.report(tmp_path / "second")["release"]
    assert second != state["good"]
    assert_serving(lab, second)
    proc = lab.playbook("rollback.yml", inventory, reports=tmp_path / "rollback")
    assert proc.returncode == 0, output(proc)
    assert_serving(lab, state["good"])


def test_reboot_of_every_host_serves_the_active_release(lab: Lab, inventory: Path, tmp_path: Path,
                                                         state: dict[str, str]) -> None:
    lab.reboot()
    for name, units in UNITS.items():
        checks.wait_active(lab.hosts[name], units)
    assert_serving(lab, state["good"])
    proc = lab.playbook("verify.yml", inventory, reports=tmp_path)
    assert proc.returncode == 0, output(proc)


def test_host_dropping_off_the_network_mid_deploy(lab: Lab, inventory: Path, tmp_path: Path,
                                                   state: dict[str, str]) -> None:
    decode1 = lab.hosts["decode1"]
    argv = [str(VENV_BIN / "ansible-playbook"), "playbooks/deploy.yml", "-i", str(inventory),
            "-e", "context_length=131072", "-e", f"dsv4_report_dir={tmp_path}"]
    run = subprocess.Popen(lab.controller_argv(argv), cwd=REPO, env=lab.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        # The switchover has begun once the deploy stopped the decode: then its host drops off.
        deadline = time.monotonic() + 600
        while checks.unit_state(decode1, "sglang-dsv4-decode")[0] == "active" and run.poll() is None:
            assert time.monotonic() < deadline, "the deploy never stopped the decode"
            time.sleep(0.2)
        decode1.link(False)
        out, _ = run.communicate(timeout=900)
    finally:
        if run.poll() is None:
            run.kill()
        decode1.link(True)
    assert run.returncode != 0, out[-5000:]
    assert "UNREACHABLE" in out and "decode1" in out, out[-5000:]
    # The report names the host that dropped out; the reachable hosts are back on the good release.
    report = checks.report(tmp_path)
    failure = report.get("failure") or ""
    assert "UNREACHABLE decode1" in failure, failure
    # The run fails (the deployment is not whole), the hosts still here are back and their workers verified.
    assert report["verdict"] == "failed" and report["serving_release"] == state["good"], report
    assert "PARTLY ROLLED BACK" in out and "ROLLBACK FAILED" not in out, out[-5000:]
    assert [(g["name"], g["status"]) for g in report["gates"]] == [("readiness", "passed")], report["gates"]
    assert report["metadata"]["gate_phases"] == ["rollback"]
    for name in ("prefill1", "router1"):
        assert checks.active_release(lab.hosts[name]) == state["good"], name
        for unit in UNITS[name]:
            assert checks.unit_state(lab.hosts[name], unit) == ("active", "enabled"), f"{name} {unit}"
    # Back on the network, a deploy of the good release puts decode1 back in line (the dead run's
    # lock there is taken over).
    proc = lab.playbook("deploy.yml", inventory, *READINESS, reports=tmp_path / "again")
    assert proc.returncode == 0, output(proc)
    assert_serving(lab, state["good"])


# blue_green_hosts onto the example's second pair, as its comment says: the production router on router1 switched,
# through its worker API, from one pair's workers to the other's, under the playbook's continuous client.
def pair_serves_on(serving: dict[str, str]) -> dict:
    """assert_serves_on's arguments: the workers of one pair (`serving`'s keys, prefill host then decode host) listed
    by the router on router1, the other pair's (its values) stopped."""
    ports = [{"sglang-dsv4-prefill": 30001}, {"sglang-dsv4-decode": 30002}]
    return {"workers": dict(zip(serving, ports, strict=True)), "idle": serving, "router": "router1", "key": API_KEY}


def moved_by_pairs(lab: Lab, pair_inventory: Path, tmp_path: Path, going: dict[str, str], tag: str) -> None:
    """A new release moved by blue_green_hosts from the pair `going`'s keys to its values: promoted with no failed
    request; the old pair's workers stopped and not enabled at boot, its hosts still on the release they served
    (each host keeps the release it last ran; stop, rollback and verify read the router host's)."""
    serving = checks.active_release(lab.hosts["router1"])
    checks.assert_serves_on(lab, **pair_serves_on(going))
    router_pid = main_pids(lab.hosts["router1"], [ROUTER_UNIT])
    proc, report, line = new_release(lab, pair_inventory, tmp_path, tag)
    way = ", ".join(f"{old} -> {new}" for old, new in sorted(going.items()))  # as the plan's line says it
    print(f"blue_green_hosts {way} on five systemd hosts, under the continuous client: {line}")
    assert_moved(lab, proc, report, way, router_pid, **pair_serves_on({new: old for old, new in going.items()}))
    assert report["serving_release"] == report["release"] != serving, report
    for old in going:
        assert checks.active_release(lab.hosts[old]) == serving, old


def test_blue_green_hosts_moves_to_the_second_pair_with_no_failed_request(lab: Lab, pair_inventory: Path,
                                                                         tmp_path: Path) -> None:
    moved_by_pairs(lab, pair_inventory, tmp_path, PAIR, "pair-2")


def test_blue_green_hosts_goes_back_to_the_first_pair_with_no_failed_request(lab: Lab, pair_inventory: Path,
                                                                            tmp_path: Path) -> None:
    moved_by_pairs(lab, pair_inventory, tmp_path, {new: old for old, new in PAIR.items()}, "pair-1")


# A 2P1D on the same three hosts, rolled (dsv4_rollout_strategy: rolling): the two prefills on prefill1
# (GPUs 0-3 and 4-7), the lone decode on decode1's GPUs 0-3, the real sglang-router on router1. The
# decode is rolled by surge onto decode1's spare GPUs 4-7 (port 30102). The API key comes from its file
# (installed by the earlier tests for the service user): the preview router reads it there.
ROLL_UNITS = {"prefill1": ["sglang-dsv4-prefill", "sglang-dsv4-prefill-2"], "decode1": ["sglang-dsv4-decode"],
              "router1": ["sglang-dsv4-router"]}


def _roll_worker(host: str, gpus: list[int], port: int, **extra: object) -> dict:
    return {"host": host, "gpus": gpus, "tp_size": 4, "port": port, "mem_fraction_static": 0.8,
            "transfer_backend": "mooncake", **extra}


def test_rolling_2p1d_over_three_hosts_serves_throughout(lab: Lab, tmp_path: Path) -> None:
    group_vars = {**GATES, "api_key": {"file": KEY_FILE}, "dsv4_rollout_strategy": "rolling",
                  "prefill": [_roll_worker("prefill1", [0, 1, 2, 3], 30001, bootstrap_port=8998),
                              _roll_worker("prefill1", [4, 5, 6, 7], 30003, bootstrap_port=8997)],
                  "decode": [_roll_worker("decode1", [0, 1, 2, 3], 30002)]}
    inventory = lab.write_inventory(tmp_path / "inventory", example="1p1d-three-hosts", group_vars=group_vars,
                                    only=list(UNITS))
    # The first 2P1D release replaces the 1P1D by recreate (nothing of this layout serves yet).
    # Its gates are not the subject here: readiness alone.
    first = lab.playbook("deploy.yml", inventory, "-e", "dsv4_rollout_strategy=recreate",
                         "-e", '{"dsv4_gates_names": ["readiness"]}', reports=tmp_path / "first")
    assert first.returncode == 0, output(first)
    serving = checks.report(tmp_path / "first")["release"]
    # A change a roll carries (a server environment variable: the serve scripts differ, the units do not).
    proc = lab.playbook("deploy.yml", inventory, "-e", '{"server_env_extra": {"DSV4_ROLL_TEST": "2"}}',
                        reports=tmp_path / "roll")
    assert proc.returncode == 0, output(proc)
    assert "Readiness and config of the workers at home through the preview router: step 1" in proc.stdout
    report = checks.report(tmp_path / "roll")
    assert report["verdict"] == "promoted" and report["release"] != serving
    # The playbook's continuous client asked the production router throughout: nothing failed.
    downtime = report["downtime"]
    print(f"rolling 2P1D over three systemd hosts: sent {downtime['sent']}, failed {downtime['failed']}, "
          f"longest gap {downtime.get('longest_gap_s')} s")
    assert downtime["sent"] > 10 and downtime["failed"] == 0, downtime
    new = report["release"]
    assert report["rolling_table"][-1] == f"| 2 | {new} | {new} | {new} |", report["rolling_table"]
    for name, units in ROLL_UNITS.items():
        host = lab.hosts[name]
        assert checks.active_release(host) == new, name
        for unit in units:
            assert checks.unit_state(host, unit) == ("active", "enabled"), f"{name} {unit}"
    # The decode is home on its own port; nothing of the surge slot or the preview router is left.
    decode1, router1 = lab.hosts["decode1"], lab.hosts["router1"]
    assert decode1.sh("ss -Hltn '( sport = :30002 )'").stdout.strip(), "the decode is not home"
    assert not decode1.sh("ss -Hltn '( sport = :30102 )'").stdout.strip(), "the surge decode still listens"
    assert not router1.sh("ss -Hltn '( sport = :30100 )'").stdout.strip(), "the preview router still listens"
    # The preview router ran as a transient unit as the router's service user (not as root, outside
    # systemd), its output in the journal under its unit, and the unit is gone.
    user = router1.sh("systemctl show -p User --value sglang-dsv4-router.service").stdout.strip()
    uid = router1.sh(f"id -u {user}").stdout.strip()
    journal = router1.sh("journalctl -o json _SYSTEMD_UNIT=sglang-dsv4-router-preview.service || true").stdout
    uids = {json.loads(line).get("_UID") for line in journal.splitlines() if line.strip()}
    assert user and uids == {uid}, (user, uids)
    assert not router1.sh("systemctl list-units --all --plain --no-legend 'sglang-dsv4-router-preview*' || true"
                          ).stdout.strip()
    # The slot's units (its deployment name ends in b: sglang-dsv4_dsv4deployb-decode) are removed.
    assert not decode1.sh("ls /etc/systemd/system | grep -e 'b-decode.service' || true").stdout.strip()
    assert not decode1.sh("systemctl list-units --all --plain --no-legend '*b-decode*' || true").stdout.strip()


def test_stop_stops_every_host(lab: Lab, pair_inventory: Path) -> None:
    # The five hosts' inventory: each host stops what its active release runs (the second pair's workers stopped
    # already by the move back, their units still installed).
    proc = lab.playbook("stop.yml", pair_inventory)
    assert proc.returncode == 0, output(proc)
    pair_units = {"prefill2": ["sglang-dsv4-prefill"], "decode2": ["sglang-dsv4-decode"]}
    for name, units in (ROLL_UNITS | pair_units).items():
        for unit in units:
            assert checks.unit_state(lab.hosts[name], unit) == ("inactive", "disabled"), f"{name} {unit}"
