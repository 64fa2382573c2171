"""Preflight checks what systemd will need, on a real host, before anything changes.

inventory/examples/pd-single-host, each time with one thing wrong that systemd would only have
noticed at the switchover (status=217/USER, 203/EXEC, a key the server cannot read). Each run must
stop in preflight with one line naming host, user, path and the fix, and leave the host as it was:
no install root, no unit, no user created.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.systemd import example_site
from tests.systemd.example_site import KEY_FILE
from tests.systemd.hostkit import Host, Lab


@pytest.fixture(scope="module")
def lab(hostkit) -> Iterator[Lab]:
    with hostkit.lab(["gpu1"], routers=["gpu1"]) as booted:
        example_site.prepare(booted.hosts["gpu1"], "sk-preflight")
        yield booted


def _state(host: Host) -> str:
    """What a deploy would have changed: install root, units, users."""
    return host.sh("ls -a /opt; ls /etc/systemd/system; getent passwd | cut -d: -f1 | sort; "
                   f"stat -c '%U %a' {KEY_FILE}", check=False).stdout


def _refused_in_preflight(lab: Lab, tmp_path: Path, **changes) -> str:
    """Deploy with `changes` (group_vars, host_vars); assert it stopped in preflight, changing nothing;
    return the problem lines."""
    gpu1 = lab.hosts["gpu1"]
    before = _state(gpu1)
    inventory = lab.write_inventory(tmp_path / "inventory", example="pd-single-host", **changes)
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path / "reports")
    out = proc.stdout
    assert proc.returncode != 0, out[-4000:]
    assert "FAILED at preflight, nothing was changed" in out, out[-4000:]
    assert _state(gpu1) == before
    assert "deploy.lock" not in gpu1.sh("ls /opt/dsv4deploy 2>&1", check=False).stdout
    return "\n".join(sorted(set(re.findall(r"host gpu1, user [^:]+: [^\n\\]*?fix: [^\n\\\"]*", out))))


def test_a_missing_service_user_is_named_with_the_fix(lab: Lab, tmp_path: Path) -> None:
    lines = _refused_in_preflight(lab, tmp_path, host_vars={"gpu1": {"service_user": "dsv4-nobody"}})
    assert "host gpu1, user dsv4-nobody: user dsv4-nobody does not exist" in lines
    assert "status=217/USER" in lines and "service_user_create: true" in lines
    assert len(lines.splitlines()) == 1, lines


def test_a_launcher_the_user_cannot_execute_is_named_with_the_fix(lab: Lab, tmp_path: Path) -> None:
    gpu1 = lab.hosts["gpu1"]
    gpu1.sh("install -d -m 0755 /opt/rootonly && install -m 0750 /usr/bin/python3 /opt/rootonly/python3")
    launcher = ["/opt/rootonly/python3", "-m", "dsv4deploy.sim.server"]
    lines = _refused_in_preflight(lab, tmp_path, group_vars={"server_launcher": launcher})
    assert ("host gpu1, user sglang: /opt/rootonly/python3 (server_launcher[0] of sglang-dsv4-decode, "
            "sglang-dsv4-prefill): user sglang cannot execute it (root:root 0750); "
            "fix: chmod o+rx /opt/rootonly/python3") in lines
    assert len(lines.splitlines()) == 1, lines


def test_a_launcher_under_tmp_is_invisible_to_the_unit(lab: Lab, tmp_path: Path) -> None:
    gpu1 = lab.hosts["gpu1"]
    gpu1.sh("install -m 0755 /usr/bin/python3 /tmp/python3")
    lines = _refused_in_preflight(lab, tmp_path, group_vars={"server_launcher": ["/tmp/python3", "-m",
                                                                                 "dsv4deploy.sim.server"]})
    assert "/tmp/python3 (server_launcher[0] of sglang-dsv4-decode, sglang-dsv4-prefill) is invisible to the " \
           "unit: PrivateTmp=yes" in lines
    assert "fix: install it outside that folder" in lines


KEY_PROBLEMS = {
    "owned by root": (["chown", "root:root", KEY_FILE], ["chown", "sglang:sglang", KEY_FILE],
                      f"host gpu1, user sglang: {KEY_FILE} (api_key.file of sglang-dsv4-decode, sglang-dsv4-prefill, "
                      f"sglang-dsv4-router): user sglang cannot read it (root:root 0400); "
                      f"fix: chown sglang {KEY_FILE} && chmod 0400 {KEY_FILE}"),
    "readable by all": (["chmod", "0644", KEY_FILE], ["chmod", "0400", KEY_FILE],
                        "readable by everyone, not only by sglang (sglang:sglang 0644)"),
}


@pytest.mark.parametrize("case", KEY_PROBLEMS)
def test_a_key_file_only_the_service_user_may_read_or_it_is_refused(lab: Lab, tmp_path: Path, case: str) -> None:
    gpu1 = lab.hosts["gpu1"]
    spoil, restore, expected = KEY_PROBLEMS[case]
    gpu1.exec(spoil)
    try:
        lines = _refused_in_preflight(lab, tmp_path)
    finally:
        gpu1.exec(restore)
    assert expected in lines
    assert len(lines.splitlines()) == 1, lines


def test_a_model_path_with_a_typo_stops_in_preflight_before_anything_stops(lab: Lab, tmp_path: Path) -> None:
    model = {"path": "/models/DeepSeek-V4-Flsh", "served_name": "deepseek-v4-flash"}
    lines = _refused_in_preflight(lab, tmp_path, group_vars={"model": model})
    assert ("host gpu1, user sglang: /models/DeepSeek-V4-Flsh (model.path of sglang-dsv4-decode, "
            "sglang-dsv4-prefill): No such file or directory; fix: install it, or correct the spec") in lines


def test_a_llama_checkpoint_under_the_deepseek_profile_stops_in_preflight(lab: Lab, tmp_path: Path) -> None:
    gpu1 = lab.hosts["gpu1"]
    gpu1.sh("cp -a /models/DeepSeek-V4-Flash-NVFP4 /models/llama && chmod -R o+rX /models/llama && printf "
            "'{\"architectures\": [\"LlamaForCausalLM\"], \"max_position_embeddings\": 2048}' "
            "> /models/llama/config.json")
    model = {"path": "/models/llama", "served_name": "deepseek-v4-flash"}
    lines = _refused_in_preflight(lab, tmp_path, group_vars={"model": model, "context_length": 4096})
    assert "config.json says architectures ['LlamaForCausalLM'], model profile deepseek-v4-flash is for " \
           "DeepseekV4ForCausalLM" in lines
    assert "context_length 4096 is above the model's max_position_embeddings 2048" in lines


def test_a_client_endpoint_on_a_remote_loopback_is_refused_before_anything_changes(lab: Lab, tmp_path: Path) -> None:
    """The example's combined server (-e topology=combined) listens where its workers do, 127.0.0.1:
    no client off gpu1, and no gate on the controller, could reach it."""
    gpu1 = lab.hosts["gpu1"]
    before = _state(gpu1)
    inventory = lab.write_inventory(tmp_path / "inventory", example="pd-single-host")
    proc = lab.playbook("deploy.yml", inventory, "-e", "topology=combined", reports=tmp_path / "reports")
    assert proc.returncode != 0
    assert "FAILED at plan, nothing was changed" in proc.stdout, proc.stdout[-4000:]
    assert ("listen (host gpu1): the endpoint http://127.0.0.1:30010 would listen on 127.0.0.1, a loopback "
            "address of gpu1") in proc.stdout
    assert "fix: set listen to 0.0.0.0 or gpu1's own address" in proc.stdout
    assert _state(gpu1) == before


def test_service_user_create_makes_the_missing_user_and_the_deploy_promotes(lab: Lab, tmp_path: Path) -> None:
    """Last in this module: it changes the host. The key comes from a vault variable (a key file
    could not belong to a user that does not exist yet; preflight says so, tested in tests/unit)."""
    gpu1 = lab.hosts["gpu1"]
    assert gpu1.exec(["getent", "passwd", "dsv4svc"], check=False).returncode != 0
    # The simulated GPUs' state folder is the kit's user's; the new user must be able to use it too.
    gpu1.exec(["chmod", "1777", "/var/lib/dsv4-sim"])
    inventory = lab.write_inventory(
        tmp_path / "inventory", example="pd-single-host",
        group_vars={"service_user_create": True, "api_key": {"vault_var": "dsv4_api_key"}, "dsv4_api_key": "sk-new",
                    "readiness_deadline_s": 120},
        host_vars={"gpu1": {"service_user": "dsv4svc"}})
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path / "reports")
    assert proc.returncode == 0, proc.stdout[-6000:]
    entry = gpu1.exec(["getent", "passwd", "dsv4svc"]).stdout.strip().split(":")
    assert entry[5] == "/var/lib/dsv4svc" and entry[6] == "/usr/sbin/nologin", entry
    for unit in ("sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"):
        assert gpu1.exec(["systemctl", "show", "-p", "User", "--value", unit]).stdout.strip() == "dsv4svc"
        assert gpu1.exec(["systemctl", "is-active", unit], check=False).stdout.strip() == "active", unit


def test_an_install_root_inside_a_folder_of_the_service_user_is_refused(lab: Lab, tmp_path: Path) -> None:
    # The service user could rename the root aside and recreate it with a program root's supervisord or units run.
    gpu1 = lab.hosts["gpu1"]
    gpu1.exec(["install", "-d", "-o", "sglang", "-g", "sglang", "-m", "0755", "/srv/theirs"])
    try:
        lines = _refused_in_preflight(lab, tmp_path, group_vars={"install_root": "/srv/theirs/dsv4"})
    finally:
        gpu1.exec(["rmdir", "/srv/theirs"])
    assert "root will not trust it: /srv/theirs is sglang:sglang 0755, the service user's" in lines, lines
    assert "fix: make it root's and writable by root only (chown root:root /srv/theirs" in lines
