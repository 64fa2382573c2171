"""dsv4_service_state: the service state (installed, started, stopped, removed) under a real supervisord, with
honest check mode and the deploy lock's phases recorded by explicit calls."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsv4deploy.plan import render
from tests.unit.plugins.conftest import BIN_DIR, PROGRAM, supervisord_runs
from tests.unit.plugins.runner import run_module, take_lock


def services(tmp_path: Path, root: Path, state: str, check: bool = False, **args: object) -> dict:
    return run_module("dsv4_service_state", tmp_path, check_mode=check, manager="supervisor", install_root=str(root),
                      supervisor_bin_dir=BIN_DIR, state=state, **args)


def info(tmp_path: Path, root: Path) -> dict:
    return run_module("dsv4_service_state_info", tmp_path, manager="supervisor", install_root=str(root),
                      supervisor_bin_dir=BIN_DIR)


def test_check_mode_says_what_installed_and_started_would_do_and_does_nothing(tmp_path: Path,
                                                                              install_root: Path) -> None:
    installed = services(tmp_path, install_root, "installed", check=True)
    assert installed["changed"] and not installed.get("failed"), installed
    assert any("supervisord.conf" in step for step in installed["would"])
    assert f"load program {PROGRAM}" in installed["would"]
    started = services(tmp_path, install_root, "started", check=True)
    assert started["changed"] and f"start {PROGRAM}" in started["would"] and started["started"] == [PROGRAM]
    assert not (install_root / "supervisor").exists() and not supervisord_runs(install_root)


def test_started_then_stopped_each_idempotent_with_check_mode_telling_the_truth(tmp_path: Path,
                                                                                install_root: Path) -> None:
    first = services(tmp_path, install_root, "started")
    assert first["changed"] and first["started"] == [PROGRAM], first
    assert info(tmp_path, install_root)["services"][PROGRAM]["running"]
    again = services(tmp_path, install_root, "started", check=True)
    assert not again["changed"] and again["would"] == [], again
    assert not services(tmp_path, install_root, "started")["changed"]
    would_stop = services(tmp_path, install_root, "stopped", check=True)
    assert would_stop["changed"] and would_stop["would"] == [f"stop {PROGRAM}"]
    assert info(tmp_path, install_root)["services"][PROGRAM]["running"], "check mode stopped nothing"
    stopped = services(tmp_path, install_root, "stopped")
    assert stopped["changed"] and stopped["stopped"] == [PROGRAM]
    assert not services(tmp_path, install_root, "stopped", check=True)["changed"]
    assert services(tmp_path, install_root, "removed", check=True)["would"] == ["shut down supervisord"]
    assert supervisord_runs(install_root)
    assert services(tmp_path, install_root, "removed")["changed"] and not supervisord_runs(install_root)


def test_lock_phases_are_recorded_before_and_after_and_never_in_check_mode(tmp_path: Path,
                                                                           install_root: Path) -> None:
    path = install_root / "deploy.lock"
    path.write_text(json.dumps({"run_id": "r1", "phase": "preflight", "owner": "ops"}))
    lock = {"path": str(path), "run_id": "r1", "target": "rel-1", "before": "switch: switched",
            "after": "switch: started"}
    services(tmp_path, install_root, "started", check=True, lock=lock)
    assert json.loads(path.read_text())["phase"] == "preflight"
    assert not services(tmp_path, install_root, "started", lock=lock).get("failed")
    record = json.loads(path.read_text())
    assert (record["phase"], record["target"], record["owner"]) == ("switch: started", "rel-1", "ops")
    lost = services(tmp_path, install_root, "stopped", lock={**lock, "run_id": "r2"})
    assert lost["failed"] and "no longer holds" in lost["msg"]
    assert info(tmp_path, install_root)["services"][PROGRAM]["running"], "nothing done once the lock is lost"


def test_a_refused_start_fails_with_the_log_and_records_no_after_phase(tmp_path: Path, install_root: Path) -> None:
    (install_root / "current" / "bin" / f"serve-{PROGRAM}.sh").chmod(0o644)  # not executable
    path = install_root / "deploy.lock"
    path.write_text(json.dumps({"run_id": "r1", "phase": "preflight"}))
    out = services(tmp_path, install_root, "started",
                   lock={"path": str(path), "run_id": "r1", "before": "switched", "after": "started"})
    assert out["failed"] and f"{PROGRAM} did not start" in out["msg"], out
    assert json.loads(path.read_text())["phase"] == "switched"


def test_status_and_logs_are_not_states_of_this_module(tmp_path: Path, install_root: Path) -> None:
    out = services(tmp_path, install_root, "status")
    assert out["failed"] and "value of state must be one of" in out["msg"]


def _fake_smi(tmp_path: Path) -> tuple[Path, Path]:
    """An nvidia-smi stand-in whose GPU 0 uses the MiB written in a file (no compute apps listed)."""
    used = tmp_path / "used_mib"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncase "$1" in --query-gpu=*) echo "0, GPU-0, $(cat {used}), 81920";; esac\n')
    smi.chmod(0o755)
    return smi, used


def test_the_stop_waits_for_its_gpus_in_the_same_run_and_names_a_gpu_still_held(tmp_path: Path,
                                                                                 install_root: Path) -> None:
    smi, used = _fake_smi(tmp_path)
    wait = {"gpu_query_command": [str(smi)], "gpus": [0], "threshold_mib": 1024, "timeout_s": 0.5, "poll_s": 0.05}
    used.write_text("40000")
    assert services(tmp_path, install_root, "started")["started"] == [PROGRAM]
    # Check mode stops nothing, so it waits for nothing.
    planned = services(tmp_path, install_root, "stopped", check=True, gpus_released=wait)
    assert planned["would"] == [f"stop {PROGRAM}"] and "gpus_released" not in planned, planned
    held = services(tmp_path, install_root, "stopped", gpus_released=wait)
    assert held.get("failed") and "GPU 0 uses 40000 MiB" in held["msg"], held
    assert not info(tmp_path, install_root)["services"][PROGRAM]["running"], "stopped before the wait"
    used.write_text("12")
    done = services(tmp_path, install_root, "stopped", gpus_released=wait)
    assert not done.get("failed") and done["gpus_released"]["gpus"]["0"]["used"] == 12, done


def test_a_start_that_switches_the_pointer_refuses_a_missing_or_edited_release_and_starts_nothing(
        tmp_path: Path, install_root: Path) -> None:
    # r1 has no manifest.json: an edited (or foreign) release is never switched to, nor started.
    for release, why in (("r9", "release r9 is not installed"), ("r1", "release r1 was changed on this host")):
        out = services(tmp_path, install_root, "started", activate={"release_id": release})
        assert out["failed"] and why in out["msg"], out
        assert not (install_root / "supervisor").exists() and not supervisord_runs(install_root)
    assert services(tmp_path, install_root, "stopped", activate={"release_id": "r1"})["failed"]


def _release(root: Path, script: str) -> dict[str, str]:
    """The files of a release with one program running `script`, with its manifest."""
    conf = (f"[program:{PROGRAM}]\ncommand={root}/current/bin/serve-{PROGRAM}.sh\nautostart=false\n"
            f"autorestart=false\nstartsecs=0\nstopwaitsecs=5\nstdout_logfile={root}/logs/{PROGRAM}.log\n"
            "redirect_stderr=true\n")
    files = {f"bin/serve-{PROGRAM}.sh": f"#!/bin/sh\n{script}\n", f"supervisor/{PROGRAM}.conf": conf}
    return {**files, "manifest.json": render.manifest_json(files)}


@pytest.fixture
def two_releases(tmp_path: Path) -> Iterator[Path]:
    """An install root made by dsv4_host_releases: r1 active, r2 installed beside it (each one program that
    logs its name, then sleeps); its supervisord shut down at the end."""
    base = Path(tempfile.mkdtemp(prefix="dsv4u-", dir="/tmp"))  # short: supervisord's AF_UNIX socket path
    root = base / "root"
    try:
        for release in ("r1", "r2"):
            out = run_module("dsv4_host_releases", tmp_path, install_root=str(root), state="present",
                             release_id=release, files=_release(root, f"echo release-{release}\nexec sleep 300"))
            assert not out.get("failed"), out
        assert not run_module("dsv4_host_releases", tmp_path, install_root=str(root), state="active",
                              release_id="r1").get("failed")
        yield root
    finally:
        services(tmp_path, root, "removed")
        shutil.rmtree(base, ignore_errors=True)


def test_a_stop_then_start_switches_and_starts_the_new_release_in_the_same_run(tmp_path: Path,
                                                                              two_releases: Path) -> None:
    root = two_releases
    smi, used = _fake_smi(tmp_path)
    used.write_text("12")
    wait = {"gpu_query_command": [str(smi)], "gpus": [0], "timeout_s": 0.5, "poll_s": 0.05}
    old_pid = services(tmp_path, root, "started")["programs"][PROGRAM]["pid"]
    path = root / "deploy.lock"
    path.write_text(json.dumps({"run_id": "run1", "phase": "preflight"}))
    lock = {"path": str(path), "run_id": "run1", "target": "r2", "before": "switch: stopping",
            "after": "switch: stopped"}
    then = {"activate": {"release_id": "r2", "prune": False}, "lock_before": "switch: switched",
            "lock_after": "switch: started"}
    # Check mode says it would stop, then switch to r2, and changes nothing.
    planned = services(tmp_path, root, "stopped", check=True, lock=lock, gpus_released=wait, then_start=then)
    assert planned["changed"] and planned["would"][0] == f"stop {PROGRAM}", planned
    assert any("r2" in step for step in planned["would"][1:]), planned
    assert os.readlink(root / "current").endswith("r1") and json.loads(path.read_text())["phase"] == "preflight"
    out = services(tmp_path, root, "stopped", lock=lock, gpus_released=wait, then_start=then)
    assert not out.get("failed") and out["stopped"] == [PROGRAM] and out["started"] == [PROGRAM], out
    assert out["gpus_released"]["gpus"]["0"]["used"] == 12 and PROGRAM in out["stop_seconds"]
    assert os.readlink(root / "current").endswith("r2")
    assert out["programs"][PROGRAM]["pid"] not in (None, old_pid)
    assert json.loads(path.read_text())["phase"] == "switch: started"
    log = (root / "logs" / f"{PROGRAM}.log").read_text()
    deadline = time.monotonic() + 10
    while "release-r2" not in log[out["log_offsets"][PROGRAM]:] and time.monotonic() < deadline:
        time.sleep(0.05)
        log = (root / "logs" / f"{PROGRAM}.log").read_text()
    assert "release-r2" in log[out["log_offsets"][PROGRAM]:], log


def test_a_stop_whose_gpus_stay_held_neither_switches_nor_starts(tmp_path: Path, two_releases: Path) -> None:
    root = two_releases
    smi, used = _fake_smi(tmp_path)
    used.write_text("40000")
    services(tmp_path, root, "started")
    out = services(tmp_path, root, "stopped", then_start={"activate": {"release_id": "r2"}},
                   gpus_released={"gpu_query_command": [str(smi)], "gpus": [0], "timeout_s": 0.3, "poll_s": 0.05})
    assert out.get("failed") and "GPU 0 uses 40000 MiB" in out["msg"], out
    assert os.readlink(root / "current").endswith("r1")
    assert not info(tmp_path, root)["services"][PROGRAM]["running"]
    # then_start belongs to a stop, as activate belongs to a start.
    wrong = services(tmp_path, root, "started", then_start={"only": "all"})
    assert wrong.get("failed") and "then_start goes with state=stopped" in wrong["msg"], wrong
    assert not info(tmp_path, root)["services"][PROGRAM]["running"]


def test_a_service_call_records_the_lock_phase_with_its_own_run(tmp_path: Path) -> None:
    assert take_lock(tmp_path, "r1", phase="preflight")["changed"]
    path = tmp_path / "root" / "deploy.lock"

    def stop(run_id: str, **phases: str) -> dict:
        # Nothing runs under this root: the stop has nothing to do, and still records its phases.
        return run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(tmp_path / "root"),
                          state="stopped", lock={"path": str(path), "run_id": run_id, "target": "rel-2", **phases})

    assert not stop("r1", before="switch: stopping", after="switch: stopped").get("failed")
    record = json.loads(path.read_text())
    assert (record["phase"], record["target"], record["controller_pid"]) == ("switch: stopped", "rel-2", 4242)
    other = stop("r2", before="switch: stopping")
    assert other["failed"] and f"this run no longer holds {path}" in other["msg"]
    assert json.loads(path.read_text())["phase"] == "switch: stopped"
