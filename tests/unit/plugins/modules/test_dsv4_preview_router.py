"""dsv4_preview_router: a rolling step's transient preview router is started in its own process group and
stopped with everything it spawned, even when it renames its own command line (sglang-router shows as
"sglang::router"); a PID file whose process is gone stops nothing."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "plugins" / "modules" / "dsv4_preview_router.py"
# Listens, forks a child that keeps the socket, and renames itself as the real router does.
SERVER = ("import os, socket, sys, time\n"
          "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
          "open('/proc/self/comm', 'w').write('sglang::router')\n"
          "os.fork(); time.sleep(300)\n")


def _module(tmp_path: Path, **args: object) -> dict:
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(proc.stdout)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_started_then_stopped_with_its_children(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = {"name": "preview-router", "install_root": str(tmp_path)}
    started = _module(tmp_path, **common, argv=[sys.executable, "-c", SERVER, str(port)], settle_s=0.5)
    try:
        assert not started.get("failed") and started["pid"] > 0, started
        assert _listening(port)
        stopped = _module(tmp_path, **common, state="absent", stop_s=5)
        assert stopped["stopped"] is True, stopped
        deadline = time.monotonic() + 5
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _listening(port), "the preview router's child still listens"
        assert not (tmp_path / "run" / "preview-router.pid").exists()
        # Again: nothing recorded, nothing stopped.
        assert _module(tmp_path, **common, state="absent")["stopped"] is False
    finally:
        # Last resort, the group this test started, by its own PID.
        if started.get("pid"):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started["pid"], 9)


def test_a_process_that_exits_at_once_fails_the_start_with_its_log(tmp_path: Path) -> None:
    out = _module(tmp_path, name="preview-router", install_root=str(tmp_path),
                  argv=[sys.executable, "-c", "import sys; print('bad flag --nope'); sys.exit(2)"])
    assert out.get("failed") and "exited at once (status 2)" in out["msg"] and "bad flag --nope" in out["msg"], out


# Prints who it runs as and two variables, then stays up (the module wants it alive for settle_s).
WHOAMI = ("import json, os, sys, time\n"
          "print(json.dumps([os.getuid(), os.getgid(), os.environ.get('HF_TOKEN'), os.environ.get('HOME')]),"
          " flush=True)\n"
          "time.sleep(300)\n")


def test_it_runs_as_the_service_user_with_the_routers_env_file(tmp_path: Path) -> None:
    # Issue #37 item 6: it ran as the Ansible user (root), without the router's secret env file.
    import pwd

    if os.geteuid() != 0:
        import pytest
        pytest.skip("switching to the service user needs root")
    nobody = pwd.getpwnam("nobody")
    # An install root the service user may enter (pytest's tmp_path is root's alone), and a system python.
    root = Path(tempfile.mkdtemp(prefix="dsv4-preview-"))
    root.chmod(0o755)
    env_file = root / "router.env"
    env_file.write_text('HF_TOKEN="a \\"quoted\\" \\$secret"\n')
    common = {"name": "preview-router", "install_root": str(root)}
    started = _module(tmp_path, **common, argv=["/usr/bin/python3", "-c", WHOAMI], settle_s=0.5, user="nobody",
                      env_file=str(env_file))
    try:
        assert not started.get("failed"), started
        deadline = time.monotonic() + 5
        log = root / "logs" / "preview-router.log"
        while not log.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        uid, gid, token, home = json.loads(log.read_text().splitlines()[-1])
        assert (uid, gid, home) == (nobody.pw_uid, nobody.pw_gid, nobody.pw_dir)
        assert token == 'a "quoted" $secret'
    finally:
        _module(tmp_path, **common, state="absent", stop_s=5)
        shutil.rmtree(root, ignore_errors=True)


def test_an_unknown_service_user_fails_naming_it_and_starts_nothing(tmp_path: Path) -> None:
    out = _module(tmp_path, name="preview-router", install_root=str(tmp_path), argv=[sys.executable, "-c", WHOAMI],
                  user="dsv4-no-such-user")
    assert out["failed"] and "no user 'dsv4-no-such-user'" in out["msg"], out
    assert not (tmp_path / "run" / "preview-router.pid").exists()
