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

from tests.systemd import checks, example_site
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
    # The operator's key file (readable by the service user only) and the model folder.
    example_site.prepare(gpu1, "sk-hostkit-single")
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


def test_the_verification_timer_runs_on_the_host_writes_its_textfile_and_is_removed(
        lab: Lab, inventory: Path, tmp_path: Path, state: dict[str, str]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    gpu1 = lab.hosts["gpu1"]
    textfile_dir = "/var/lib/prometheus/node-exporter"  # the role's default, Debian's node_exporter's
    args = ["-e", "dsv4_verify_timer_host=gpu1", "-e", f"dsv4_verify_timer_python={checks.install_watch_env(gpu1)}",
            "-e", "dsv4_verify_timer_canary_tokens=500", "-e", "dsv4_verify_timer_probe_sessions=1"]
    # node_exporter's package made its folder, with another collector's file: both stay as they are.
    gpu1.sh(f"mkdir -p {textfile_dir} && chmod 0755 {textfile_dir} && echo 'node_custom 1' > {textfile_dir}/node.prom")
    try:
        proc = lab.playbook("verify_timer.yml", inventory, *args, reports=tmp_path)
        assert proc.returncode == 0, output(proc)
        unit = gpu1.sh("cd /etc/systemd/system && ls dsv4-verify-*.timer").stdout.strip()[:-len(".timer")]
        vt = f"{checks.INSTALL_ROOT}/verify-timer"
        # As the real service user: nothing of root's to rename, rewrite or add to.
        for attack in (f"mv {vt} {vt}-away", f"echo '{{}}' > {vt}/watch.json", f"echo '{{}}' > {vt}/installed.json",
                       f"echo evil 1 > {textfile_dir}/evil.prom", f"rm -f {textfile_dir}/node.prom"):
            tried = gpu1.exec(["runuser", "-u", "sglang", "--", "sh", "-c", attack], check=False)
            assert tried.returncode != 0, attack
        scored = gpu1.exec(["systemd-analyze", "security", "--offline=true", "--no-pager",
                            f"/etc/systemd/system/{unit}.service"], check=False).stdout
        assert float(scored.rsplit(f"{unit}.service:", 1)[1].split()[0]) <= 1.5, scored[-2000:]
        assert checks.unit_state(gpu1, f"{unit}.timer") == ("active", "enabled")
        # Triggered by hand (what the timer does every interval): the oneshot runs as the service user.
        started = gpu1.exec(["systemctl", "start", f"{unit}.service"], check=False, timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr + gpu1.exec(
            ["journalctl", "-u", f"{unit}.service", "--no-pager", "-n", "40"], check=False).stdout
        deployment = unit[len("dsv4-verify-"):]
        prom = gpu1.exec(["cat", f"{textfile_dir}/dsv4deploy-{deployment}.prom"]).stdout
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(prom) for s in f.samples}
        labels = (("deployment", deployment),)
        assert samples[("dsv4deploy_release_info", (*labels, ("release", state["release"])))] == 1
        for gate in ("canary_needle", "tool_calls"):
            assert samples[("dsv4deploy_gate_passed", (*labels, ("gate", gate)))] == 1
        assert samples[("dsv4deploy_last_verification_timestamp_seconds", labels)] > 0
        # Written by the service user in its own folder; node_exporter reads root's own copy, which the unit's
        # ExecStopPost (+: as root) published from it: a regular file, never a link into the service user's folder.
        published, source = f"{textfile_dir}/dsv4deploy-{deployment}.prom", f"{vt}/metrics/dsv4deploy-{deployment}.prom"
        assert gpu1.exec(["stat", "-c", "%U %a", source]).stdout.split() == ["sglang", "644"]
        assert gpu1.exec(["stat", "-c", "%F|%U %a", published]).stdout.split("|") == ["regular file", "root 644\n"]
        assert prom.startswith(f"# Published by dsv4deploy from {source}\n"), prom[:200]
        # The service user swaps its file for a FIFO, a link to a root-only file, then to a root-only folder: the
        # publish step, run as the unit runs it, refuses each at once and leaves the published file and the
        # canaries as they were.
        publish = gpu1.sh(f"sed -n 's/^ExecStopPost=+//p' /etc/systemd/system/{unit}.service").stdout.strip()
        # Every path root touches that the service user owns or can write, as the kernel says: its metrics folder
        # and file, and the operator's key file it owns (in root's folder: it cannot swap it); nothing under
        # secrets/ (the EnvironmentFile= systemd reads as root), nothing of node_exporter's.
        found = gpu1.exec(["runuser", "-u", "sglang", "--", "find", checks.INSTALL_ROOT, example_site.KEY_FILE,
                           textfile_dir, "(", "-writable", "-o", "-user", "sglang", ")"], check=False).stdout.split()
        assert sorted(found) == [example_site.KEY_FILE, f"{vt}/metrics", source], found
        swapped = gpu1.exec(["runuser", "-u", "sglang", "--", "ln", "-sf", "/etc/shadow", example_site.KEY_FILE],
                            check=False)
        assert swapped.returncode != 0, "the service user replaced its key file"
        for plant, why in ((f"mkfifo {source}", "is a FIFO"), (f"ln -s /etc/shadow {source}", "is a symbolic link"),
                           (f"ln -s /root {source}", "is a symbolic link")):
            canaries = gpu1.exec(["stat", "-c", "%u %g %a %Y %Z %s", "/etc/shadow", "/root"]).stdout
            gpu1.exec(["runuser", "-u", "sglang", "--", "sh", "-c", f"rm -f {source} && {plant}"])
            ran = gpu1.exec(["sh", "-c", publish], check=False, timeout=30)
            assert ran.returncode == 1 and why in ran.stdout, (publish, ran.stdout, ran.stderr)
            assert gpu1.exec(["cat", published]).stdout == prom
            assert gpu1.exec(["stat", "-c", "%u %g %a %Y %Z %s", "/etc/shadow", "/root"]).stdout == canaries
        assert gpu1.exec(["stat", "-c", "%U %a", textfile_dir]).stdout.split() == ["root", "755"]
    finally:
        removed = lab.playbook("verify_timer.yml", inventory, *args, "-e", "dsv4_verify_timer_state=absent",
                               reports=tmp_path)
    assert removed.returncode == 0, output(removed)
    left = gpu1.sh(f"ls /etc/systemd/system/{unit}.* {checks.INSTALL_ROOT}/verify-timer "
                   f"{textfile_dir}/dsv4deploy-{deployment}.prom 2>/dev/null || true").stdout
    assert left == "", left
    assert gpu1.exec(["systemctl", "is-active", f"{unit}.timer"], check=False).stdout.strip() == "inactive"
    # node_exporter's folder and the other collector's file stay.
    assert gpu1.exec(["cat", f"{textfile_dir}/node.prom"], check=False).stdout == "node_custom 1\n"


def test_stop_keeps_the_deployment_stopped_across_a_reboot(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    gpu1 = lab.hosts["gpu1"]
    proc = lab.playbook("stop.yml", inventory)
    assert proc.returncode == 0, output(proc)
    for unit in PD_UNITS:
        assert checks.unit_state(gpu1, unit) == ("inactive", "disabled"), unit
    gpu1.reboot()
    for unit in PD_UNITS:
        assert checks.unit_state(gpu1, unit) == ("inactive", "disabled"), unit
