"""Two deployments on one host: each has unit names of its own, and installing, renaming
or removing one never touches the other's units. The host modules run as Ansible runs them, with a
stand-in `systemctl` (this machine has no systemd to give) that records what it was asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dsv4deploy.plan.render import render_release
from dsv4deploy.plan.services import build_services
from dsv4deploy.spec import Deployment

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import pd_spec

MODULES = Path(__file__).resolve().parents[3] / "plugins" / "modules"
# Answers as systemd would for units that are installed and not running; logs every call.
SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
case "$1" in
  is-enabled) echo disabled ;;
  show) echo ActiveState=inactive; echo SubState=dead; echo MainPID=0 ;;
esac
exit 0
"""


def module(tmp_path: Path, name: str, **args: object) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    # PYTHONPATH: the modules import their module_utils from the collection at the repository root.
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(MODULES.parents[1])}
    proc = subprocess.run([sys.executable, str(MODULES / f"{name}.py"), str(args_file)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def at_root(root: Path, **changes: object) -> Deployment:
    spec = pd_spec("systemd")
    hosts = {n: h.model_copy(update={"install_root": str(root)}) for n, h in spec.hosts.items()}
    return spec.model_copy(update={"hosts": hosts, **changes})


def deploy(tmp_path: Path, spec: Deployment, release_id: str, units: Path) -> dict:
    """Install and activate the release of gpu1, then make systemd see its units."""
    root = spec.hosts["gpu1"].install_root
    files = render_release(spec, "gpu1")
    assert not module(tmp_path, "dsv4_host_releases", install_root=root, state="present", release_id=release_id,
                      files=files).get("failed")
    module(tmp_path, "dsv4_host_releases", install_root=root, state="active", release_id=release_id)
    return module(tmp_path, "dsv4_service_state", manager="systemd", install_root=root, unit_dir=str(units),
                  state="installed")


def unit_files(units: Path) -> list[str]:
    return sorted(p.name for p in units.glob("*.service"))


def test_the_default_install_root_keeps_the_plain_unit_names() -> None:
    names = [s.name for s in build_services(pd_spec("systemd"))]
    assert names == ["sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"]


def test_two_deployments_on_one_host_keep_their_own_units(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    blue, green = at_root(tmp_path / "srv" / "blue"), at_root(tmp_path / "srv" / "green")
    assert not deploy(tmp_path, blue, "r1", units).get("failed")
    assert not deploy(tmp_path, green, "r1", units).get("failed")
    assert unit_files(units) == sorted(f"sglang-dsv4_{d}-{role}.service" for d in ("blue", "green")
                                       for role in ("prefill", "decode", "router"))
    blue_unit = (units / "sglang-dsv4_blue-decode.service").read_text()
    assert f"WorkingDirectory={tmp_path}/srv/blue/current" in blue_unit
    # Removing green (stop -e purge=true) takes out green's units only.
    out = module(tmp_path, "dsv4_service_state", manager="systemd", install_root=str(tmp_path / "srv" / "green"),
                 unit_dir=str(units), state="removed")
    assert not out.get("failed") and out["changed"]
    assert unit_files(units) == [f"sglang-dsv4_blue-{r}.service" for r in ("decode", "prefill", "router")]
    assert (units / "sglang-dsv4_blue-decode.service").read_text() == blue_unit
    calls = (tmp_path / "bin" / "calls").read_text()
    assert "disable --now sglang-dsv4_green-decode.service" in calls and "sglang-dsv4_blue" not in calls.split(
        "disable --now")[-1]


def test_the_same_deployment_name_on_another_root_is_refused_untouched(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    assert not deploy(tmp_path, at_root(tmp_path / "a" / "llm", deployment_name="prod"), "r1", units).get("failed")
    before = {p.name: p.read_text() for p in units.iterdir()}
    out = deploy(tmp_path, at_root(tmp_path / "b" / "llm", deployment_name="prod"), "r1", units)
    assert out["failed"] and "belong to another dsv4deploy deployment" in out["msg"] and "deployment_name" in out["msg"]
    assert {p.name: p.read_text() for p in units.iterdir()} == before


def test_an_upgraded_deployment_replaces_its_old_units_and_leaves_nobody_elses(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    root = tmp_path / "srv" / "llm-b"
    # As an older dsv4deploy left it: the plain names, run from this install root ...
    old = render_release(pd_spec("systemd"), "gpu1")
    for rel, text in old.items():
        if rel.startswith("units/"):
            (units / rel[len("units/"):]).write_text(text.replace("/opt/dsv4deploy", str(root)))
    # ... beside a unit of another deployment (the default install root) with the same plain name.
    other = tmp_path / "other.service"
    other.write_text(old["units/sglang-dsv4-router.service"])
    assert not deploy(tmp_path, at_root(root), "r2", units).get("failed")
    assert unit_files(units) == [f"sglang-dsv4_llmb-{r}.service" for r in ("decode", "prefill", "router")]
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    assert {c for c in calls if c.startswith("disable --now")} == {
        f"disable --now sglang-dsv4-{r}.service" for r in ("prefill", "decode", "router")}
    # The other deployment's unit, put back under its plain name, survives the next install.
    (units / "sglang-dsv4-router.service").write_text(other.read_text())
    assert not module(tmp_path, "dsv4_service_state", manager="systemd", install_root=str(root), unit_dir=str(units),
                      state="installed").get("failed")
    assert (units / "sglang-dsv4-router.service").read_text() == other.read_text()
