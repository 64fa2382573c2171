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
