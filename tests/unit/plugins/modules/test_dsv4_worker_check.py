"""dsv4_worker_check run as Ansible runs it: the paths the controller's readiness asks, server_info with its
secrets masked on the host, and the readiness wait's check mode."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact_body
from dsv4deploy.gates.readiness import worker_paths
from tests.unit.gates.stubs import after, always
from tests.unit.plugins.conftest import BIN_DIR, KEY, PROGRAM, supervisord_runs, write_release
from tests.unit.plugins.runner import run_module


def test_the_host_asks_what_the_controllers_readiness_asks(tmp_path: Path, stub) -> None:
    server = stub({"GET /health": always((200, "")), "GET /ready": after(2, (503, "loading"), (200, ""))})
    assert worker_paths("0.5.23") == ("/health", "/ready") and worker_paths("0.5.18") == ("/health",)
    out = run_module("dsv4_worker_check", tmp_path, mode="readiness", deadline_s=10, poll_interval_s=0.05,
                     checks=[{"name": "decode", "url": server.url, "paths": list(worker_paths("0.5.23"))}])
    checks = {ev["check"]: ev for ev in out["workers"]["decode"]["checks"]}
    assert set(checks) == {"decode /health", "decode /ready"}
    assert checks["decode /ready"]["ready"] and checks["decode /ready"]["attempts"] == 3
    assert not out["changed"]


def test_a_not_ready_ready_path_keeps_the_worker_not_ready(tmp_path: Path, stub) -> None:
    server = stub({"GET /health": always((200, "")), "GET /ready": always((503, "not yet"))})
    out = run_module("dsv4_worker_check", tmp_path, mode="readiness", deadline_s=0.5, poll_interval_s=0.05,
                     checks=[{"name": "decode", "url": server.url, "paths": ["/health", "/ready"]}])
    ready = {ev["check"]: ev["ready"] for ev in out["workers"]["decode"]["checks"]}
    assert ready == {"decode /health": True, "decode /ready": False}


def test_server_info_leaves_the_host_without_the_api_key(tmp_path: Path, stub) -> None:
    info = {"api_key": KEY, "admin_api_key": KEY + "-admin", "json_model_override_args": '{"index_topk": 1024}',
            "max_total_tokens": 123456, "context_length": 65536}
    server = stub({"GET /server_info": always((200, info))})
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    out = run_module("dsv4_worker_check", tmp_path, mode="config", api_key_file=str(key_file),
                     checks=[{"name": "decode", "url": server.url}])
    assert KEY not in json.dumps(out)
    (answer,) = out["workers"]["decode"]["server_info"]
    body = json.loads(answer["body"])
    assert body["api_key"] == "***" and body["admin_api_key"] == "***"
    # What the config gate compares is kept as it was.
    assert {k: body[k] for k in ("json_model_override_args", "max_total_tokens", "context_length")} == {
        k: info[k] for k in ("json_model_override_args", "max_total_tokens", "context_length")}
    assert server.auth_headers == [f"Bearer {KEY}"]


def test_a_body_that_is_not_json_is_masked_as_text() -> None:
    assert KEY not in redact_body(f"ServerArgs(api_key='{KEY}')")


def test_the_wait_in_check_mode_starts_nothing(tmp_path: Path, install_root: Path, dead_url: str) -> None:
    out = run_module("dsv4_worker_check", tmp_path, check_mode=True, mode="watch", deadline_s=0.3,
                     checks=[{"name": "w", "url": dead_url}],
                     services={"manager": "supervisor", "install_root": str(install_root),
                               "supervisor_bin_dir": BIN_DIR, "start_when_healthy": {PROGRAM: {}}})
    # Nothing runs (nothing was started): the wait says so, and starts neither the program nor supervisord.
    assert not out.get("failed") and not out["changed"] and out["started_later"] == {}, out
    assert out["died"]["name"] == PROGRAM and not supervisord_runs(install_root)


def test_the_wait_records_its_lock_phase_and_sees_a_program_die(tmp_path: Path, install_root: Path,
                                                                dead_url: str) -> None:
    started = run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(install_root),
                         supervisor_bin_dir=BIN_DIR, state="started")
    path = install_root / "deploy.lock"
    path.write_text(json.dumps({"run_id": "r1", "phase": "switch: started"}))
    run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(install_root),
               supervisor_bin_dir=BIN_DIR, state="stopped")  # the program ends during the wait
    out = run_module("dsv4_worker_check", tmp_path, mode="watch", deadline_s=10,
                     checks=[{"name": "w", "url": dead_url}],
                     services={"manager": "supervisor", "install_root": str(install_root),
                               "supervisor_bin_dir": BIN_DIR, "since": started["programs"],
                               "lock": {"path": str(path), "run_id": "r1", "target": "t", "before": "gates"}})
    assert out["died"]["name"] == PROGRAM and "stopped" in out["died"]["why"], out
    assert KEY not in out["died"]["log"]
    assert json.loads(path.read_text())["phase"] == "gates"


def test_the_wait_returns_the_config_gates_logs_as_the_logs_module_reads_them(tmp_path: Path, install_root: Path,
                                                                              stub) -> None:
    # The config gate's logs come back with the readiness wait (no module run of their own): the same text,
    # from the start's offsets, the key redacted on the host.
    server = stub({"GET /health": always((200, ""))})
    started = run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(install_root),
                         supervisor_bin_dir=BIN_DIR, state="started")
    services = {"manager": "supervisor", "install_root": str(install_root), "supervisor_bin_dir": BIN_DIR}
    deadline = time.monotonic() + 10
    while "server_args" not in (expected := run_module(
            "dsv4_service_state_info", tmp_path, **services, logs=True, only="workers",
            log_offsets=started["log_offsets"])["logs"][PROGRAM]):
        assert time.monotonic() < deadline, expected
        time.sleep(0.1)
    out = run_module("dsv4_worker_check", tmp_path, mode="watch", deadline_s=10,
                     checks=[{"name": PROGRAM, "url": server.url}],
                     services={**services, "since": started["programs"], "log_offsets": started["log_offsets"],
                               "logs": True})
    assert "died" not in out and out["healthy"].keys() == {PROGRAM}, out
    assert out["logs"] == {PROGRAM: expected}
    assert KEY not in json.dumps(out) and "api_key='***'" in out["logs"][PROGRAM]
    # Without asking, the wait reads no log.
    again = run_module("dsv4_worker_check", tmp_path, mode="watch", deadline_s=10,
                       checks=[{"name": PROGRAM, "url": server.url}],
                       services={**services, "since": started["programs"]})
    assert "logs" not in again


def started_release(tmp_path: Path, install_root: Path, script: str) -> dict:
    """A release r2 running `script`, started; the wait's `services` watching it from its start."""
    write_release(install_root, "r2", script)
    started = run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(install_root),
                         supervisor_bin_dir=BIN_DIR, state="started")
    return {"manager": "supervisor", "install_root": str(install_root), "supervisor_bin_dir": BIN_DIR,
            "since": started["programs"], "log_offsets": started["log_offsets"]}


def test_a_fatal_log_line_ends_the_wait_at_once_with_the_line(tmp_path: Path, install_root: Path,
                                                               dead_url: str) -> None:
    # The server logs a CUDA error but keeps running (it would hang until the deadline): the model profile's
    # fatal patterns end the wait within one log scan (5 s), naming the line.
    services = started_release(tmp_path, install_root, 'echo "RuntimeError: CUDA error: an illegal memory access '
                                                         'was encountered"\nexec sleep 300')
    t0 = time.monotonic()
    out = run_module("dsv4_worker_check", tmp_path, mode="watch", deadline_s=60,
                     checks=[{"name": PROGRAM, "url": dead_url}],
                     services={**services, "fatal_log_patterns": ["CUDA error", "illegal memory access"]})
    assert out["died"]["why"] == "fatal log line: RuntimeError: CUDA error: an illegal memory access was encountered"
    assert time.monotonic() - t0 < 20, out


def test_the_wait_in_slices_says_each_programs_log_and_goes_on_where_it_stopped(tmp_path: Path, install_root: Path,
                                                                               dead_url: str) -> None:
    # A slice ends with the end of each program's log (its own probes' access lines left out) and what the wait
    # holds; the next goes on from there: its time counts from the first, and a program that died meanwhile ends it.
    services = started_release(tmp_path, install_root, 'echo "[TP0] Load weight begin. avail mem=93.10 GB"\n'
                               "echo 'INFO:     127.0.0.1:5 - \"GET /health HTTP/1.1\" 503'\n"
                               "echo 'INFO:     127.0.0.1:6 - \"PRI * HTTP/2.0\" 505'\nexec sleep 300")
    checks = [{"name": PROGRAM, "url": dead_url}]
    deadline = time.monotonic() + 10
    while True:
        first = run_module("dsv4_worker_check", tmp_path, mode="watch", deadline_s=30, slice_s=0.3, checks=checks,
                           services=services)
        if "Load weight begin" in first["progress"][PROGRAM] or time.monotonic() > deadline:
            break
    assert first["unfinished"] and "died" not in first, first
    assert first["progress"][PROGRAM].splitlines()[-1] == "[TP0] Load weight begin. avail mem=93.10 GB"
    assert first["resume"]["elapsed_s"] >= 0.3
    resumed = run_module("dsv4_worker_check", tmp_path, mode="watch", deadline_s=30, slice_s=0.3, checks=checks,
                         services=services, resume=first["resume"])
    assert resumed["unfinished"] and resumed["seconds"] >= first["seconds"] + 0.3, resumed
    run_module("dsv4_service_state", tmp_path, manager="supervisor", install_root=str(install_root),
               supervisor_bin_dir=BIN_DIR, state="stopped")
    ended = run_module("dsv4_worker_check", tmp_path, mode="watch", deadline_s=30, slice_s=0.3, checks=checks,
                       services=services, resume=resumed["resume"])
    assert ended["died"]["name"] == PROGRAM and not ended.get("unfinished"), ended
