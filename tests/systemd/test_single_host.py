"""The seeds' 8-GPU box over ssh: prefill, decode and router on one real systemd host.

The inventory is inventory/examples/pd-single-host as a user would copy it, with the lab's address,
the simulator standing in for sglang and nvidia-smi, and the operator's API key file on the host.
The tests run in order on one booted host, like an operator's day: promote, re-run, reboot,
switch to combined and back, stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.systemd import checks
from tests.systemd.checks import GATES, PD_UNITS, output
from tests.systemd.hostkit import Lab

COMBINED_UNITS = ["sglang-dsv4"]


@pytest.fixture(scope="module")
def lab(hostkit) -> Iterator[Lab]:
    with hostkit.lab(["gpu1"], routers=["gpu1"]) as booted:
        yield booted


@pytest.fixture(scope="module")
def inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    gpu1 = lab.hosts["gpu1"]
    # The operator's key file: readable by the service user only.
    gpu1.write_file("/etc/dsv4deploy/api_key", "sk-hostkit-single\n", owner="sglang", mode="0400")
    # Workers listen on the host's address: the gates (on the controller) reach them there.
    return lab.write_inventory(tmp_path_factory.mktemp("single") / "inventory", example="pd-single-host",
                               group_vars=GATES, host_vars={"gpu1": {"listen": "0.0.0.0"}})


@pytest.fixture(scope="module")
def state() -> dict[str, str]:
    """What earlier tests of the module found (the promoted release)."""
    return {}


def test_promote_over_ssh_runs_as_the_service_user_and_enables_the_units(
        lab: Lab, inventory: Path, tmp_path: Path, state: dict[str, str]) -> None:
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path)
    assert proc.returncode == 0, output(proc)
    report = checks.report(tmp_path)
    assert report["verdict"] == "promoted"
    gpu1 = lab.hosts["gpu1"]
    assert checks.active_release(gpu1) == report["release"]
    for unit in PD_UNITS:
        assert checks.unit_state(gpu1, unit) == ("active", "enabled"), unit
        assert gpu1.exec(["systemctl", "show", "-p", "User", "--value", unit]).stdout.strip() == "sglang", unit
    state["release"] = report["release"]


def test_unchanged_rerun_restarts_nothing(lab: Lab, inventory: Path, tmp_path: Path, state: dict[str, str]) -> None:
    gpu1 = lab.hosts["gpu1"]
    pids = {u: gpu1.exec(["systemctl", "show", "-p", "MainPID", "--value", u]).stdout.strip() for u in PD_UNITS}
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path)
    assert proc.returncode == 0, output(proc)
    assert checks.report(tmp_path)["verdict"] == "unchanged"
    assert {u: gpu1.exec(["systemctl", "show", "-p", "MainPID", "--value", u]).stdout.strip()
            for u in PD_UNITS} == pids


def test_reboot_brings_the_active_release_back_and_it_verifies(
        lab: Lab, inventory: Path, tmp_path: Path, state: dict[str, str]) -> None:
    gpu1 = lab.hosts["gpu1"]
    gpu1.reboot()
    checks.wait_active(gpu1, PD_UNITS)
    assert checks.active_release(gpu1) == state["release"]
    proc = lab.playbook("verify.yml", inventory, reports=tmp_path)
    assert proc.returncode == 0, output(proc)


def test_switch_to_combined_and_back(lab: Lab, inventory: Path, tmp_path: Path, state: dict[str, str]) -> None:
    gpu1 = lab.hosts["gpu1"]
    proc = lab.playbook("deploy.yml", inventory, "-e", "topology=combined", reports=tmp_path / "combined")
    assert proc.returncode == 0, output(proc)
    assert checks.report(tmp_path / "combined")["verdict"] == "promoted"
    # Only the combined unit is installed and enabled: the PD units are gone, so a reboot cannot start them.
    assert checks.unit_dir_entries(gpu1) == [f"{u}.service" for u in COMBINED_UNITS]
    assert checks.unit_state(gpu1, COMBINED_UNITS[0]) == ("active", "enabled")
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path / "pd")
    assert proc.returncode == 0, output(proc)
    report = checks.report(tmp_path / "pd")
    assert report["verdict"] == "promoted"
    assert checks.unit_dir_entries(gpu1) == sorted(f"{u}.service" for u in PD_UNITS)
    for unit in PD_UNITS:
        assert checks.unit_state(gpu1, unit) == ("active", "enabled"), unit
    state["release"] = report["release"]


def test_stop_keeps_the_deployment_stopped_across_a_reboot(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    gpu1 = lab.hosts["gpu1"]
    proc = lab.playbook("stop.yml", inventory)
    assert proc.returncode == 0, output(proc)
    for unit in PD_UNITS:
        assert checks.unit_state(gpu1, unit) == ("inactive", "disabled"), unit
    gpu1.reboot()
    for unit in PD_UNITS:
        assert checks.unit_state(gpu1, unit) == ("inactive", "disabled"), unit
