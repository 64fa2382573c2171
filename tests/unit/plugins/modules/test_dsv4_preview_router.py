"""dsv4_preview_router: a rolling step's transient preview router is started in its own process group and
stopped with everything it spawned, even when it renames its own command line (sglang-router shows as
"sglang::router"); a PID file whose process is gone stops nothing."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
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
