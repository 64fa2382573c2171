"""The engine in the release, on the embedded host: `engine:` installs the server program into a venv per version
(from a wheelhouse, layered on a base environment), each release runs and records its own, an upgrade is a new
gated release that the plan line announces, a rollback brings the old engine back, and an engine that cannot be
installed is refused before anything stops.

The simulated host's "sglang" is dsv4deploy's simulator, which is installed as the package dsv4deploy; so its
wheelhouse holds the dsv4deploy wheel built from this checkout, and the venv's own copy is the one that serves.
The tests run in order on one module host: each starts from what the one before left.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.simhost import READINESS, REPO, VENV_BIN, SimHost

pytestmark = pytest.mark.integration
ENGINE_VARS = "zz_engine.yml"


def set_engine(sim_host: SimHost, version: str, wheelhouse: Path) -> None:
    """What an operator writes in the inventory: the engine, and the version the flags are rendered for."""
    engine = {"sglang": version, "wheelhouse": str(wheelhouse), "packages": ["dsv4deploy"],
              "base_python": str(VENV_BIN / "python")}
    (sim_host.inventory / "group_vars" / "all" / ENGINE_VARS).write_text(
        yaml.safe_dump({"engine": engine, "sglang_version": version}))


def serving_interpreters(sim_host: SimHost) -> set[str]:
    """The program each live simulated server runs (argv[0] of its process)."""
    out = set()
    for name, pid in sim_host.pids().items():
        if not name.endswith("router"):
            out.add(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode())
    return out


def recorded_engine(sim_host: SimHost) -> dict:
    return json.loads((sim_host.install_root / "current" / "engine.json").read_text())


def deploy_engine(sim_host: SimHost, version: str, wheelhouse: Path, change: str) -> dict:
    """Deploy with the engine `version`, gated; the plan line names `change`; the engine the release records."""
    set_engine(sim_host, version, wheelhouse)
    proc = sim_host.playbook("deploy.yml", *READINESS)
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 0, said[-4000:]
    assert f"engine {change} on local" in said, said[-4000:]
    return recorded_engine(sim_host)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout: how the simulated host's server program is installed."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([str(VENV_BIN / "pip"), "wheel", "-q", "--no-deps", "-w", str(folder), str(REPO)], check=True,
                   capture_output=True, timeout=300)
    return folder


def test_engine_is_installed_recorded_and_runs_the_servers(sim_host: SimHost, wheelhouse: Path) -> None:
    record = deploy_engine(sim_host, "0.5.23", wheelhouse, "host-provided -> 0.5.23")
    venv = record["venv"]
    assert venv.startswith(f"{sim_host.install_root}/engines/sglang-0.5.23-")
    assert serving_interpreters(sim_host) == {f"{venv}/bin/python"}
    # The venv's own copy of the server program serves, not the base's.
    found = subprocess.run([f"{venv}/bin/python", "-c", "import dsv4deploy.sim.server as s; print(s.__file__)"],
                           capture_output=True, text=True, cwd="/", check=True).stdout
    assert found.startswith(f"{venv}/lib/"), found
    status = subprocess.run([str(VENV_BIN / "dsv4deploy"), "status", "-i", str(sim_host.inventory)],
                            capture_output=True, text=True, timeout=300, cwd="/")
    assert f"engine: sglang 0.5.23 in {venv}" in status.stdout, status.stdout + status.stderr


def test_upgrade_is_a_new_release_and_rollback_restores_the_old_engine(sim_host: SimHost, wheelhouse: Path) -> None:
    old_release, old = sim_host.active_release(), recorded_engine(sim_host)
    # Check mode says what would change and builds nothing: preflight leaves out what needs the new interpreter.
    set_engine(sim_host, "0.5.23.post1", wheelhouse)
    preview = sim_host.playbook("deploy.yml", "--check", *READINESS)
    said = " ".join(preview.stdout.split())
    assert preview.returncode == 0, said[-4000:]
    assert "engine 0.5.23 -> 0.5.23.post1 on local" in said, said[-4000:]
    assert [p.name for p in (sim_host.install_root / "engines").iterdir()] == [Path(old["venv"]).name]
    new = deploy_engine(sim_host, "0.5.23.post1", wheelhouse, "0.5.23 -> 0.5.23.post1")
    assert sim_host.active_release() != old_release
    assert new["sglang"] == "0.5.23.post1" and new["venv"] != old["venv"]
    assert serving_interpreters(sim_host) == {new["python"]}
    # Back to the release before: its engine comes back with it, and both venvs stay while releases name them.
    back = sim_host.playbook("rollback.yml", "-e", f"release={old_release}", *READINESS)
    assert back.returncode == 0, " ".join(back.stdout.split())[-4000:]
    assert sim_host.active_release() == old_release
    assert serving_interpreters(sim_host) == {old["python"]}
    assert Path(old["python"]).exists() and Path(new["python"]).exists()


def test_an_engine_that_cannot_be_installed_is_refused_before_anything_stops(sim_host: SimHost,
                                                                              tmp_path: Path) -> None:
    release, pids = sim_host.active_release(), sim_host.pids()
    set_engine(sim_host, "0.5.23", tmp_path / "no-wheels-here")
    proc = sim_host.playbook("deploy.yml", *READINESS)
    said = " ".join(proc.stdout.split())
    assert proc.returncode != 0, said[-4000:]
    assert (f"engine.wheelhouse {tmp_path / 'no-wheels-here'} is not a folder on this host; fix: copy the wheels "
            "there") in said, said[-4000:]
    assert "local" in said
    assert sim_host.active_release() == release and sim_host.pids() == pids
    assert not any(name.endswith(".building") for name in os.listdir(sim_host.install_root / "engines"))
