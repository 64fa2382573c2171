"""Run a module of the collection the way Ansible runs it on a host: a JSON args file in, JSON out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MODULES = REPO / "plugins" / "modules"


def run_module(name: str, tmp_path: Path, check_mode: bool = False, **args: object) -> dict:
    """Run plugins/modules/<name>.py with `args` (in check mode when asked); its JSON result."""
    args_file = tmp_path / f"args-{name}.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}))
    # The repository root holds ansible_collections/dsv4/deploy: the modules' module_utils import from there,
    # as AnsiballZ's bundle does on a host.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(MODULES / f"{name}.py"), str(args_file)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def take_lock(tmp_path: Path, run_id: str, **extra: object) -> dict:
    """dsv4_lock on {tmp_path}/root/deploy.lock for `run_id`, held by alice@ops on controller ctl, pid 4242."""
    return run_module("dsv4_lock", tmp_path, path=str(tmp_path / "root" / "deploy.lock"), run_id=run_id,
                      owner="alice@ops", controller="ctl", controller_pid=4242, **extra)
