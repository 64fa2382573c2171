"""Run a module of the collection the way Ansible runs it on a host (a JSON args file in, JSON out), and the
collection's action plugins the way a playbook runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.dsv4.deploy.plugins.action.dsv4_lock import boot_identity

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


def run_play(tmp_path: Path, tasks: list[dict], extra_vars: dict | None = None) -> list[dict]:
    """Run `tasks` as one play on localhost (local connection) with ansible-playbook, as a user's playbook runs
    the collection's action plugins; each task's registered result, in order. Task i is registered as `r{i}`
    (a later task may use `{{ r0.client }}`); a failing task does not end the play. `extra_vars` go in by -e."""
    registered = [{**task, "register": f"r{i}", "ignore_errors": True} for i, task in enumerate(tasks)]
    # Shown by debug (no module run, so no second of python start-up per result), read back from the console.
    keep = {"name": "Keep the results", "ansible.builtin.debug": {
        "msg": "{{ [" + ", ".join(f"r{i}" for i in range(len(tasks))) + "] }}"}}
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "connection": "local",
                                         "tasks": [*registered, keep]}]))
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **(extra_vars or {})}))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_STDOUT_CALLBACK": "default",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    run = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(playbook),
                          "-e", f"@{vars_file}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    _, found, shown = run.stdout.partition("TASK [Keep the results]")
    assert found and "=> {" in shown, run.stdout + run.stderr
    return json.JSONDecoder().raw_decode(shown[shown.index("=> {") + 3:])[0]["msg"]


def dead_runs_lock(tmp_path: Path, path: Path, run_id: str) -> int:
    """The deploy lock at `path` held by run `run_id` of alice@ops on this controller (its host name, boot and
    namespace), in phase switch, whose ansible-playbook (a process that has exited) is gone; that pid."""
    child = subprocess.Popen(["true"])
    child.wait()
    taken = run_module("dsv4_lock", tmp_path, path=str(path), run_id=run_id, owner="alice@ops", phase="switch",
                       controller=socket.gethostname(), controller_boot=boot_identity(), controller_pid=child.pid)
    assert taken["changed"], taken
    return child.pid
