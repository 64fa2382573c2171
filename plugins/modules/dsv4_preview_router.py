#!/usr/bin/python
"""Start or stop a roll step's preview router: a transient router process beside the production one."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_preview_router
short_description: Start or stop the preview router a rolling step gates its new workers behind
description:
  - A rolling rollout (C(dsv4_rollout_strategy=rolling)) gates each step's new workers through a router of
    their own before they join the production router. This module runs that router on the router's host, under
    the host's service manager, as the production router runs (as the service user, with its secret env file),
    for one step.
  - On systemd hosts it is a transient unit (C(systemd-run)) named O(name).service with O(properties), the
    production router unit's settings (C(User=), C(EnvironmentFile=) and its hardening); systemd removes it once
    it stops, after a failure too.
  - On supervisord hosts it is the program O(name) of the deployment's supervisord, its file in
    C(O(install_root)/supervisor/preview) (root's), its output in C(O(install_root)/logs/O(name).log), loaded
    and removed alone (no other program is reloaded).
  - The API key is read from O(api_key_file) by the router's command at start (C(--api-key), as the serve
    scripts do) - it is in no unit, program file or argument of this module.
  - O(state=present) stops and removes a preview router an earlier run left under O(name) (and the process an
    older version started, by its PID file), then starts O(argv). It fails, with the end of its log, when the
    router exits within O(settle_s). Readiness is the gates' job.
  - O(state=absent) stops and removes it; nothing else of the service manager is touched.
options:
  name:
    type: str
    required: true
    description:
      - Name of the preview router - its unit or program (the production router's name and C(-preview)).
  install_root:
    type: path
    required: true
    description:
      - The deployment's install root on this host.
  manager:
    type: str
    choices: [systemd, supervisor]
    default: supervisor
    description:
      - The host's service manager.
  argv:
    type: list
    elements: str
    default: []
    description:
      - The router's command (O(state=present)).
  api_key_file:
    type: path
    description:
      - A file holding the API key, appended as C(--api-key) at start (the production router's own key).
  user:
    type: str
    description:
      - The service user (supervisord; on systemd it is O(properties)' C(User=)). Unset - supervisord's own.
  env_file:
    type: path
    description:
      - The router's secret env file (C(NAME="value") lines), sourced at start (supervisord; on systemd it is
        O(properties)' C(EnvironmentFile=)).
  properties:
    type: list
    elements: str
    default: []
    description:
      - The transient unit's settings (C(Key=value)), the production router unit's (systemd).
  supervisor_bin_dir:
    type: path
    description:
      - Where supervisord and supervisorctl are, when not on C(PATH).
  state:
    type: str
    choices: [present, absent]
    default: present
    description:
      - Running or stopped and removed.
  settle_s:
    type: float
    default: 1
    description:
      - How long the router must stay alive for the start to count.
  stop_s:
    type: float
    default: 30
    description:
      - How long a stop of an older version's process waits after SIGTERM before SIGKILL.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  check_mode:
    support: full
    description: Says whether it would start or stop; starts and stops nothing.
  diff_mode:
    support: none
    description:
      - A process has no file content to diff.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Start step 1's preview router
  dsv4.deploy.dsv4_preview_router:
    name: sglang-dsv4-router-preview
    install_root: /opt/dsv4deploy
    manager: systemd
    argv: [python3, -m, sglang_router.launch_router, --pd-disaggregation, --host, 127.0.0.1, --port, "8100"]
    api_key_file: /etc/dsv4deploy/api_key
    properties: [User=sglang, NoNewPrivileges=yes, ProtectSystem=strict]

- name: Stop and remove it
  dsv4.deploy.dsv4_preview_router:
    name: sglang-dsv4-router-preview
    install_root: /opt/dsv4deploy
    manager: systemd
    state: absent
"""

RETURN = r"""
pid:
  description: The router's PID (O(state=present)).
  returned: success
  type: int
unit:
  description: The transient unit or the supervisord program it runs as.
  returned: always
  type: str
stopped:
  description: Whether a running preview router was stopped (or removed).
  returned: always
  type: bool
"""

import contextlib
import json
import os
import signal
import subprocess
import time
import xmlrpc.client

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import preview
from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_from, read_text, write_atomic
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError
from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import Supervisor
from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact, tail

# systemd's states of a unit with a process (or about to have one).
UNIT_ALIVE = ("active", "activating", "deactivating", "reloading")
# supervisord's states of a program with a process (or about to have one).
PROGRAM_ALIVE = ("RUNNING", "STARTING", "BACKOFF", "STOPPING")


def _start_time(pid: int) -> str:
    """When `pid` started (clock ticks since boot, /proc/PID/stat field 22); '' when it runs nothing or is a
    zombie. It tells our process from a later one given the same PID (the router renames its own command
    line, "sglang::router", so the command cannot)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            fields = fh.read().rsplit(")", 1)[-1].split()
    except OSError:
        return ""
    return "" if fields[0] == "Z" else fields[19]


def _group_alive(pgid: int) -> bool:
    """Any process of the group (the preview router and whatever it spawned) still runs."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                    fields = fh.read().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


def stop_legacy(pidfile: str, stop_s: float, check: bool) -> bool:
    """Stop the process group an older version started outside the service manager, as `pidfile` records it
    (SIGTERM, then SIGKILL after `stop_s`), if its leader is still the process started then; True when one was."""
    if not os.path.exists(pidfile):
        return False
    record = json.loads(read_text(pidfile) or "{}")
    pid, started = int(record.get("pid", 0)), str(record.get("start_time", ""))
    running = pid > 0 and bool(started) and _start_time(pid) == started
    if check:
        return running
    if running:
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + stop_s
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    os.unlink(pidfile)
    return running


def _systemctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=120, check=False)


def _unit_state(name: str) -> str:
    return _systemctl("show", "-p", "ActiveState", "--value", preview.unit_name(name)).stdout.strip()


def stop_unit(name: str, check: bool) -> bool:
    """Stop the transient unit (systemd removes it: --collect); True when it ran."""
    alive = _unit_state(name) in UNIT_ALIVE
    if not check:
        _systemctl("stop", preview.unit_name(name))
        _systemctl("reset-failed", preview.unit_name(name))  # a unit that failed without --collect (none of ours)
    return alive


def start_unit(name: str, argv: list[str], properties: list[str], key_file: str | None, settle_s: float) -> int:
    """Start the transient unit; its main PID once it stayed active `settle_s` (RuntimeError otherwise)."""
    proc = subprocess.run(preview.systemd_run(name, argv, properties, key_file), capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip()
        raise RuntimeError(f"systemd-run could not start {preview.unit_name(name)}: {why}")
    since = time.monotonic()
    while time.monotonic() - since < settle_s and _unit_state(name) == "active":
        time.sleep(0.1)
    pid = _systemctl("show", "-p", "MainPID", "--value", preview.unit_name(name)).stdout.strip()
    if _unit_state(name) != "active" or pid in ("", "0"):
        log = subprocess.run(["journalctl", "--no-pager", "-o", "cat", "-n", "40", "-u", preview.unit_name(name)],
                             capture_output=True, text=True, timeout=60, check=False).stdout
        stop_unit(name, False)
        raise RuntimeError(f"the preview router {name} exited at once: {tail(redact(log), lines=20)}")
    return int(pid)


def _program_file(root: str, name: str) -> str:
    return os.path.join(root, preview.PROGRAM_DIR, f"{name}.conf")


def stop_program(root: str, bin_dir: str | None, name: str, check: bool) -> bool:
    """Stop the supervisord program and remove it and its file; True when it ran or was there."""
    path = _program_file(root, name)
    sup = Supervisor(root, bin_dir)
    state = sup.status(name)["state"] if sup.running() else "UNKNOWN"
    there = state != "UNKNOWN" or os.path.exists(path)
    if check:
        return there
    if state != "UNKNOWN":
        sup.stop(name)
        with contextlib.suppress(xmlrpc.client.Fault):
            sup.rpc().supervisor.removeProcessGroup(name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with contextlib.suppress(OSError):  # only when empty
        os.rmdir(os.path.dirname(path))
    return there


def start_program(root: str, bin_dir: str | None, name: str, argv: list[str], user: str | None,
                  key_file: str | None, env_file: str | None, settle_s: float) -> int:
    """Load the program alone and start it; its PID once it stayed running `settle_s` (RuntimeError otherwise)."""
    sup = Supervisor(root, bin_dir)
    sup.ensure()  # its config includes supervisor/preview (a deployment made before it did not)
    log_path = os.path.join(root, "logs", f"{name}.log")
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    path = _program_file(root, name)
    os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
    write_atomic(path, preview.program_text(name, argv, user, key_file, env_file, log_path, root), mode=0o640)
    rpc = sup.rpc()
    try:
        rpc.supervisor.reloadConfig()  # reads the files; changes no program until one is added or removed
        rpc.supervisor.addProcessGroup(name)
        rpc.supervisor.startProcess(name, False)
    except xmlrpc.client.Fault as exc:
        stop_program(root, bin_dir, name, False)
        raise RuntimeError(f"supervisord did not start the preview router {name}: {exc.faultString}") from exc
    since = time.monotonic()
    status = sup.status(name)
    while time.monotonic() - since < settle_s and status["state"] in ("RUNNING", "STARTING"):
        time.sleep(0.1)
        status = sup.status(name)
    if status["state"] != "RUNNING" or not status["pid"]:
        time.sleep(0.2)  # the last lines of its log
        log = read_from(log_path, offset)
        stop_program(root, bin_dir, name, False)
        raise RuntimeError(f"the preview router {name} exited at once ({status['detail']}): "
                           f"{tail(redact(log), lines=20)}")
    return int(status["pid"])


def main() -> None:
    """Run the module."""
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "install_root": {"type": "path", "required": True},
            "manager": {"type": "str", "choices": ["systemd", "supervisor"], "default": "supervisor"},
            "argv": {"type": "list", "elements": "str", "default": []},
            "api_key_file": {"type": "path"},
            "user": {"type": "str"},
            "env_file": {"type": "path"},
            "properties": {"type": "list", "elements": "str", "default": []},
            "supervisor_bin_dir": {"type": "path"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "settle_s": {"type": "float", "default": 1},
            "stop_s": {"type": "float", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    name, root, check = p["name"], p["install_root"], module.check_mode
    unit = preview.unit_name(name) if p["manager"] == "systemd" else name
    if p["state"] == "present" and not p["argv"]:
        module.fail_json(msg="argv: the preview router's command is empty; fix: give argv with state=present")
    # What an older version left: a process outside the service manager, recorded by its PID file.
    pidfile = os.path.join(root, "run", "preview-router.pid")
    try:
        stopped = stop_legacy(pidfile, p["stop_s"], check)
        if p["manager"] == "systemd":
            stopped = stop_unit(name, check) or stopped
        else:
            stopped = stop_program(root, p["supervisor_bin_dir"], name, check) or stopped
        if p["state"] == "absent" or check:
            module.exit_json(changed=stopped or p["state"] == "present", stopped=stopped, unit=unit)
        if p["manager"] == "systemd":
            pid = start_unit(name, p["argv"], p["properties"], p["api_key_file"], p["settle_s"])
        else:
            pid = start_program(root, p["supervisor_bin_dir"], name, p["argv"], p["user"], p["api_key_file"],
                                p["env_file"], p["settle_s"])
    except (OSError, RuntimeError, ValueError, ServiceError, xmlrpc.client.Error) as exc:
        module.fail_json(msg=f"preview router {name} on {root}: {exc}", stopped=False, unit=unit)
    module.exit_json(changed=True, pid=pid, stopped=stopped, unit=unit)


if __name__ == "__main__":
    main()
