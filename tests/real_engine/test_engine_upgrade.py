"""The engine in the release on the real sglang 0.5.23 (CPU): `engine:` installs sglang's own wheel from a
wheelhouse into a venv layered on the tier's environment (its torch and every dependency), the release runs
it, and a rollback to the release before brings back the host's own sglang.

On the tier's combined host (the session's, after test_combined): one engine deploy, one rollback.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.simhost import REPO, SimHost
from tests.real_engine.enginehost import engine_python

pytestmark = pytest.mark.real_engine
SERVER = "sglang-dsv4"
WHEELHOUSE = REPO / ".engine-wheelhouse"


def server_program(host: SimHost) -> str:
    """argv[0] of the live combined server."""
    pid = host.pids()[SERVER]
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()


def served_version(host: SimHost) -> str:
    return httpx.get(f"{host.endpoint}/server_info", timeout=30,
                     headers={"Authorization": f"Bearer {host.api_key}"}).json()["version"]


def test_engine_upgrade_and_rollback_on_the_real_sglang(combined_first_deploy: tuple[SimHost, dict]) -> None:
    host = combined_first_deploy[0]
    if not any(WHEELHOUSE.glob("sglang-0.5.23-*.whl")):
        pytest.skip(f"no sglang wheel in {WHEELHOUSE}: run ./scripts/setup.sh engine")
    before = host.active_release()
    engine = {"sglang": "0.5.23", "wheelhouse": str(WHEELHOUSE.resolve()), "base_python": str(engine_python())}
    (host.inventory / "group_vars" / "all" / "zz_engine.yml").write_text(yaml.safe_dump({"engine": engine}))
    proc = host.playbook("deploy.yml", timeout=900)
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 0, said[-6000:]
    assert "engine host-provided -> 0.5.23 on local" in said, said[-6000:]
    record = json.loads((host.install_root / "current" / "engine.json").read_text())
    assert server_program(host) == record["python"]
    assert served_version(host) == "0.5.23"
    # The venv's own sglang (the wheel's), over the tier's torch.
    found = subprocess.run([record["python"], "-c", "import sglang, torch; print(sglang.__file__, torch.__file__)"],
                           capture_output=True, text=True, cwd="/", timeout=300, check=True).stdout.split()
    assert found[0].startswith(record["venv"] + "/") and not found[1].startswith(record["venv"] + "/"), found
    back = host.playbook("rollback.yml", "-e", f"release={before}", timeout=900)
    assert back.returncode == 0, " ".join(back.stdout.split())[-6000:]
    assert host.active_release() == before
    assert server_program(host) == str(engine_python())
    assert Path(record["python"]).exists()  # the engine's release is kept, so is its venv
    (host.inventory / "group_vars" / "all" / "zz_engine.yml").unlink()
