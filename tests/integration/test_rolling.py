"""rolling through the playbook on the embedded simulated host (one 2P2D host for the module, tp 2 per
worker on the 8 simulated GPUs, behind the real sglang-router 0.3.2).

The continuous client (dsv4deploy.rollout.downtime) asks the production router throughout. A release whose steps
pass their gates behind each step's preview router is promoted with no failed request; one whose second
step fails its readiness gate (a simulator fault on prefill[1] only, chosen by an inventory variable) stops
there and is put back step by step, again with no failed request, the report's table saying which worker
ran which release after each step. stop.yml then leaves nothing running.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from tests.integration.simhost import SimHost, assert_cause_named, assign_ports

# The same deadlines, continuous client and listener check as the blue_green tests.
from tests.integration.test_blue_green import FAST, _deploy_under_load, _listening
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

# Ports from the base: router, prefill[0], decode[0], its bootstrap, router metrics (assign_ports), then
# prefill[1], its bootstrap, decode[1]; the preview router on the router's port + PORT_OFFSET.
PORT_OFFSET = 8
WORKERS = ["sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-prefill-2", "sglang-dsv4-decode-2"]


def _worker(gpus: list[int], port: int, role: str, faults: str, **extra: object) -> dict:
    return {"host": "local", "gpus": gpus, "tp_size": 2, "port": port, "mem_fraction_static": 0.8,
            "env": {"DSV4_SIM_FAULTS": faults}, **extra}


@pytest.fixture(scope="module")
def roll_host(sim_host: SimHost) -> Iterator[SimHost]:
    """The module's simulated host as a 2P2D (inventory/rolling-local.yml's layout) with its own ports.
    prefill[1]'s faults come from sim_faults_by_role's key `prefill[1]`, so a run can fail step 2 alone."""
    base = sim_host.base_port = free_port_block(PORT_OFFSET + 5)
    assign_ports(sim_host.inventory, base, install_root=sim_host.install_root)
    dep_path = sim_host.inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())
    faults = "{{ sim_faults_by_role.%s | default(sim_faults) }}"
    dep["prefill"] = [
        _worker([0, 1], base + 1, "prefill", faults % "prefill", bootstrap_port=base + 3),
        _worker([2, 3], base + 5, "prefill", "{{ sim_faults_by_role['prefill[1]'] | default(sim_faults) }}",
                bootstrap_port=base + 6)]
    dep["decode"] = [_worker([4, 5], base + 2, "decode", faults % "decode"),
                     _worker([6, 7], base + 7, "decode", faults % "decode")]
    # tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
    dep.update(dsv4_rollout_strategy="rolling", dsv4_rollout_blue_green_port_offset=PORT_OFFSET, gpu_memory_gib=141)
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))
    # Nothing serves yet: the first release starts as recreate starts it (readiness alone: not the subject).
    sim_host.playbook("deploy.yml", *FAST, "-e", '{"dsv4_gates_names": ["readiness"]}', check=True)
    yield sim_host


def roll_under_load(host: SimHost, what: str, *extra: str, promoted: bool, says: str) -> str:
    """Deploy under the continuous client; the run promoted (or not) and said `says`, and no request
    failed. Returns the run's output; prints the client's figures as `what`."""
    proc, figures = _deploy_under_load(host, *extra)
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) == promoted and says in out, out[-6000:]
    print(f"{what} under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    return out


def assert_active(host: SimHost, release: str) -> None:
    """`release` is the host's active release (current and state.json)."""
    assert release and host.active_release() == release
    assert json.loads((host.install_root / "state.json").read_text())["active"] == release


PREVIEW = "sglang-dsv4-router-preview"


def assert_preview_gone(host: SimHost) -> None:
    """The step's preview router ran as a program of the deployment's supervisord (not a
    process of the module's, as root) and nothing of it is left: no program, no program file."""
    log = (host.install_root / "supervisor" / "supervisord.log").read_text()
    assert f"spawned: '{PREVIEW}'" in log
    assert PREVIEW not in host.supervisorctl("status")
    assert not (host.install_root / "supervisor" / "preview").exists()


def test_rolling_2p2d_promotes_with_no_failed_request(roll_host: SimHost) -> None:
    first = roll_host.active_release()
    out = roll_under_load(roll_host, "rolling 2P2D promotion", "-e", '{"server_env_extra": {"DSV4_ROLL_TEST": "2"}}',
                          promoted=True, says="PROMOTED")
    assert "Gates through the step's preview router: step 2" in out, out[-3000:]
    assert_preview_gone(roll_host)
    second = roll_host.active_release()
    assert second != first
    assert_active(roll_host, second)
    assert set(roll_host.pids()) >= {"sglang-dsv4-router", *WORKERS}
    assert not _listening(roll_host.base_port + PORT_OFFSET), "the preview router still listens"
    report = roll_host.report()
    assert report["verdict"] == "promoted"
    assert report["rolling_table"][-1] == f"| 2 | {second} | {second} | {second} | {second} |", report["rolling_table"]


def test_rolling_step_2_failure_rolls_back_step_by_step_with_no_failed_request(roll_host: SimHost) -> None:
    serving = roll_host.active_release()
    roll_under_load(roll_host, "rolling 2P2D, step 2 failed and rolled back",
                    "-e", '{"server_env_extra": {"DSV4_ROLL_TEST": "3"}}',
                    "-e", '{"sim_faults_by_role": {"prefill[1]": "crash_on_start"}}',
                    promoted=False, says="ROLLED BACK: rolling step 2: readiness failed")
    assert_preview_gone(roll_host)  # removed on the failure's path too (undo.yml)
    # Every worker runs the serving release again; the failed one is recorded as failed.
    assert_active(roll_host, serving)
    assert set(roll_host.pids()) >= {"sglang-dsv4-router", *WORKERS}
    assert not _listening(roll_host.base_port + PORT_OFFSET), "the preview router still listens"
    report = roll_host.report()
    failed = report["release"]
    assert report["verdict"] == "rolled_back" and failed != serving
    assert_cause_named(report, "readiness", "local", json.dumps(report))
    assert report["rolling_table"][2:] == [
        f"| start | {serving} | {serving} | {serving} | {serving} |",
        f"| 1 | {failed} | {failed} | {serving} | {serving} |",
        f"| 2 (failed) | {failed} | {failed} | stopped | stopped |",
        f"| rolled back | {serving} | {serving} | {serving} | {serving} |"], report["rolling_table"]


def test_a_bake_failing_after_the_last_step_puts_the_old_release_back_step_by_step(roll_host: SimHost) -> None:
    # The bake runs under every strategy once the new release serves (docs/bake.md). The new servers' /metrics
    # fail, so the bake cannot measure them: an error, never a pass, undone by the roll itself with no request
    # failed (no recreate behind it).
    serving = roll_host.active_release()
    bake = {"dsv4_bake_s": 2, "dsv4_bake_interval_s": 1, "dsv4_bake_error_limit": 2}
    out = roll_under_load(roll_host, "rolling 2P2D, bake failed after the last step and rolled back",
                          "-e", '{"server_env_extra": {"DSV4_ROLL_TEST": "4"}}', "-e", "sim_faults=metrics_error",
                          "-e", json.dumps(bake), promoted=False, says="ROLLED BACK: bake failed")
    assert "after the last step of the roll, release" in " ".join(out.split()), out[-3000:]
    report = roll_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "bake"), report["failed_gate"]
    assert next(g for g in report["gates"] if g["name"] == "bake")["status"] == "error"
    assert_preview_gone(roll_host)
    assert_active(roll_host, serving)
    assert set(roll_host.pids()) >= {"sglang-dsv4-router", *WORKERS}
    new = report["release"]
    assert report["rolling_table"][-2:] == [f"| 2 | {new} | {new} | {new} | {new} |",
                                            f"| rolled back | {serving} | {serving} | {serving} | {serving} |"], \
        report["rolling_table"]


def test_stop_leaves_nothing_running(roll_host: SimHost) -> None:
    roll_host.playbook("stop.yml", check=True)
    assert roll_host.pids() == {}
    assert not any(_listening(roll_host.base_port + i) for i in range(PORT_OFFSET + 5))
