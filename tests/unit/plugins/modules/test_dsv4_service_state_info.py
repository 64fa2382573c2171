"""dsv4_service_state_info: status and logs of our services, read-only, API keys redacted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.unit.plugins.conftest import BIN_DIR, KEY, PROGRAM
from tests.unit.plugins.runner import run_module


def info(tmp_path: Path, root: Path, **args: object) -> dict:
    return run_module("dsv4_service_state_info", tmp_path, manager="supervisor", install_root=str(root),
                      supervisor_bin_dir=BIN_DIR, **args)


def test_nothing_runs_where_no_supervisord_of_ours_does(tmp_path: Path, install_root: Path) -> None:
    out = info(tmp_path, install_root, logs=True)
    assert not out["changed"] and out["pids"] == [] and not out["services"][PROGRAM]["running"]
    assert not (install_root / "supervisor").exists(), "reading set nothing up"


def test_status_names_the_pids_and_logs_come_redacted(tmp_path: Path, install_root: Path) -> None:
    started = run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(install_root),
                         supervisor_bin_dir=BIN_DIR, state="started")
    assert started["started"] == [PROGRAM], started
    out = info(tmp_path, install_root)
    pid = out["services"][PROGRAM]["pid"]
    assert out["services"][PROGRAM]["running"] and pid in out["pids"] and "logs" not in out
    deadline = time.monotonic() + 10
    while "server_args" not in (logs := info(tmp_path, install_root, logs=True,
                                             log_offsets=started["log_offsets"])["logs"][PROGRAM]):
        assert time.monotonic() < deadline, logs
        time.sleep(0.1)
    assert KEY not in logs and "api_key='***'" in logs
    # A failed run's cause shows the last lines of each service, named by it.
    tail = info(tmp_path, install_root, logs=True, tail=1, log_offsets=started["log_offsets"])
    assert tail["lines"] == [f"{PROGRAM}: server_args=ServerArgs(api_key='***', port=30000)"], tail


def test_a_root_supervisord_would_misread_is_refused(tmp_path: Path) -> None:
    out = info(tmp_path, Path("/opt/a ;b"))
    assert out["failed"] and "install_root" in out["msg"]


@pytest.mark.parametrize("root", ["/opt/x%(here)s", "/opt/a ;b", "/opt/a\nb", "/opt/a #b"])
def test_services_module_refuses_roots_supervisord_would_misread(tmp_path: Path, root: str) -> None:
    out = run_module("dsv4_service_state_info", tmp_path, manager="supervisor", install_root=root)
    assert out["failed"] and "install_root" in out["msg"]
