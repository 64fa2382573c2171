"""The host side of the config gate reads /server_info, whose body holds the server's api_key.
Run as Ansible runs it (AnsiballZ, the collection's module_utils, the -vvv result printed), the key never
shows: it is masked on the host before the result leaves it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.integration.simhost import VENV_BIN
from tests.unit.gates.stubs import StubServer, always

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-never-printed-" + os.urandom(6).hex()


def test_the_api_key_in_server_info_is_not_in_the_vvv_output(tmp_path: Path) -> None:
    server = StubServer({"GET /server_info": always((200, {"api_key": KEY, "admin_api_key": None,
                                                             "json_model_override_args": '{"index_topk": 1024}'}))})
    try:
        key_file = tmp_path / "api_key"
        key_file.write_text(KEY)
        args = {"mode": "config", "api_key_file": str(key_file), "checks": [{"name": "decode", "url": server.url}]}
        proc = subprocess.run(
            [str(VENV_BIN / "ansible"), "localhost", "-vvv", "-c", "local", "-m", "dsv4.deploy.dsv4_worker_check",
             "-a", json.dumps(args)], cwd=REPO, capture_output=True, text=True, timeout=180,
            env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    finally:
        server.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "json_model_override_args" in out and "index_topk" in out, "the body the config gate needs is there"
    assert KEY not in out
    assert server.auth_headers == [f"Bearer {KEY}"], "the key was sent, and only to the server"
