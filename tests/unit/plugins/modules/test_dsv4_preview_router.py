"""dsv4_preview_router: a rolling step's preview router runs under the host's service manager as the service
user with the router's env file (it ran as root, by Popen, outside any manager): a program of
the deployment's supervisord, loaded and removed alone, or a transient systemd unit with the router unit's
hardening. It is stopped with everything it spawned and leaves no program, file or unit; the API key is read
from its file at start, never written into a unit or program file."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import preview
from tests.unit.plugins.runner import MODULES, REPO

BIN = Path(sys.executable).parent  # the venv's supervisord and supervisorctl
# Listens, forks a child that keeps the socket, and renames itself as the real router does.
# One line: a supervisord program's command is one line.
SERVER = ("import os, socket, sys, time; "
          "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
          "open('/proc/self/comm', 'w').write('sglang::router'); "
          "os.fork(); time.sleep(300)")
# Prints who it runs as, its secret env value and the key it got, then stays up.
WHOAMI = ("import json, os, sys, time; "
          "print(json.dumps([os.getuid(), os.environ.get('HF_TOKEN'), sys.argv[1:]]), flush=True); "
          "time.sleep(300)")
NAME = "sglang-dsv4-router-preview"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def root() -> Iterator[Path]:
    """An install root with a short path (supervisord's socket path is limited), one the service user may
    enter; the supervisord the module starts there is shut down after the test."""
    path = Path(tempfile.mkdtemp(prefix="dsv4-pv-"))
    path.chmod(0o755)
    yield path
    conf = path / "supervisor" / "supervisord.conf"
    if conf.exists():
        subprocess.run([str(BIN / "supervisorctl"), "-c", str(conf), "shutdown"], capture_output=True, timeout=60,
                       check=False)
    pidfile = path / "supervisor" / "supervisord.pid"
    with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):  # last resort: the one we started
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def _run(tmp_path: Path, root: Path, **args: object) -> dict:
    # Not runner.run_module: its own first parameter is called `name`, as is this module's.
    path = tmp_path / "args.json"
    given = {"name": NAME, "install_root": str(root), "manager": "supervisor", "supervisor_bin_dir": str(BIN), **args}
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": given}))
    proc = subprocess.run([sys.executable, str(MODULES / "dsv4_preview_router.py"), str(path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def _programs(root: Path) -> str:
    return subprocess.run([str(BIN / "supervisorctl"), "-c", str(root / "supervisor" / "supervisord.conf"),
                           "status"], capture_output=True, text=True, timeout=60, check=False).stdout


def test_a_supervisord_program_started_then_stopped_with_its_children_and_removed(tmp_path: Path,
                                                                                  root: Path) -> None:
    port = _free_port()
    started = _run(tmp_path, root, argv=[sys.executable, "-c", SERVER, str(port)], settle_s=0.5)
    assert not started.get("failed") and started["pid"] > 0 and started["unit"] == NAME, started
    assert _listening(port)
    assert NAME in _programs(root)  # supervisord's own program, not a process of the module's
    assert (root / preview.PROGRAM_DIR / f"{NAME}.conf").exists()
    stopped = _run(tmp_path, root, state="absent")
    assert stopped["stopped"] is True, stopped
    deadline = time.monotonic() + 5
    while _listening(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _listening(port), "the preview router's child still listens"
    assert NAME not in _programs(root) and not (root / preview.PROGRAM_DIR).exists()
    assert _run(tmp_path, root, state="absent")["stopped"] is False  # again: nothing there, nothing stopped


def test_a_router_that_exits_at_once_fails_with_its_log_and_leaves_nothing(tmp_path: Path, root: Path) -> None:
    out = _run(tmp_path, root, argv=[sys.executable, "-c", "import sys; print('bad flag --nope'); sys.exit(2)"])
    assert out.get("failed") and "exited at once" in out["msg"] and "bad flag --nope" in out["msg"], out
    assert NAME not in _programs(root) and not (root / preview.PROGRAM_DIR).exists()


def test_it_runs_as_the_service_user_with_the_routers_env_file_and_key(tmp_path: Path, root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("supervisord switches to the service user only when it runs as root")
    nobody = pwd.getpwnam("nobody")
    secrets = root / "secrets"
    secrets.mkdir(mode=0o700)
    os.chown(secrets, nobody.pw_uid, nobody.pw_gid)
    env_file, key_file = secrets / "router.env", secrets / "api_key"
    env_file.write_text('HF_TOKEN="a \\"quoted\\" \\$secret"\n')
    key_file.write_text("sk-preview-key\n")
    for path in (env_file, key_file):
        path.chmod(0o400)
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    started = _run(tmp_path, root, argv=["/usr/bin/python3", "-c", WHOAMI], settle_s=0.5, user="nobody",
                   env_file=str(env_file), api_key_file=str(key_file))
    try:
        assert not started.get("failed"), started
        log = root / "logs" / f"{NAME}.log"
        deadline = time.monotonic() + 5
        while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        uid, token, args = json.loads(log.read_text().splitlines()[-1])
        assert uid == nobody.pw_uid and token == 'a "quoted" $secret' and args == ["--api-key", "sk-preview-key"]
        program = (root / preview.PROGRAM_DIR / f"{NAME}.conf").read_text()
        assert "sk-preview-key" not in program and "user=nobody\n" in program  # the key file is named, not copied
    finally:
        _run(tmp_path, root, state="absent")


def test_a_process_an_older_version_started_is_stopped_by_its_pid_file(tmp_path: Path, root: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[-1].split()
        (root / "run").mkdir()
        (root / "run" / "preview-router.pid").write_text(json.dumps({"pid": proc.pid, "start_time": stat[19]}))
        out = _run(tmp_path, root, state="absent", stop_s=5)
        assert out["stopped"] is True and proc.wait(timeout=10) is not None
        assert not (root / "run" / "preview-router.pid").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_the_transient_unit_carries_the_routers_hardening_and_names_the_key_file_only() -> None:
    # systemd hosts: what systemd-run is given (the systemd tier runs it: tests/systemd/test_three_hosts.py).
    props = ["User=sglang", "EnvironmentFile=/opt/d/secrets/sglang-dsv4-router.env", "NoNewPrivileges=yes",
             "CapabilityBoundingSet=", "ProtectSystem=strict", "ProtectProc=invisible", "PrivateDevices=yes"]
    argv = preview.systemd_run(NAME, ["/usr/bin/sglang-router", "--host", "127.0.0.1"], props, "/opt/d/secrets/api_key")
    assert argv[:5] == ["systemd-run", f"--unit={NAME}.service", "--collect", "--quiet", "--service-type=exec"]
    given = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    assert given == [f"SyslogIdentifier={NAME}", *props]
    assert "--setenv=DSV4_PREVIEW_KEY_FILE=/opt/d/secrets/api_key" in argv
    sep = argv.index("--")
    assert argv[sep + 1:sep + 3] == ["/bin/bash", "-c"] and argv[-3:] == ["/usr/bin/sglang-router", "--host",
                                                                          "127.0.0.1"]


def test_the_launcher_adds_the_key_from_its_file_and_refuses_an_empty_one(tmp_path: Path) -> None:
    key = tmp_path / "api_key"
    key.write_text("sk-1\n")
    env = {"PATH": os.environ["PATH"], **preview.environment(str(key), None)}
    out = subprocess.run(preview.command(NAME, ["printf", "%s|"]), capture_output=True, text=True, env=env,
                         timeout=10, check=False)
    assert out.stdout == "--api-key|sk-1|"
    key.write_text("")
    out = subprocess.run(preview.command(NAME, ["true"]), capture_output=True, text=True, env=env, timeout=10,
                         check=False)
    assert out.returncode == 1 and "is empty" in out.stderr
