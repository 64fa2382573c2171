#!/usr/bin/python
"""Start or stop a roll step's preview router: a transient router process beside the production one."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_preview_router
short_description: Start or stop the transient preview router a rolling step gates its new workers behind
description:
  - A rolling rollout (C(dsv4_rollout_strategy=rolling)) gates each step's new workers through a router of
    their own before they join the production router. This module runs that router on the router's host
    as a transient process, in its own session, outside the service manager (it lives for one step).
  - O(state=present) stops a preview router an earlier run left under O(name), then starts O(argv) (with
    C(--api-key) read from O(api_key_file) when given, as the production router's serve script does), its
    output in C(O(install_root)/logs/O(name).log) and its PID in C(O(install_root)/run/O(name).pid). It fails,
    with the end of its log, when the process exits within O(settle_s). Readiness is the gates' job.
  - O(state=absent) stops the process group of the PID file (SIGTERM, then SIGKILL after O(stop_s)), only
    when that PID is still the process started then (its start time), and removes the PID file.
options:
  name:
    type: str
    required: true
    description:
      - Name of the preview router (its log and PID file).
  install_root:
    type: path
    required: true
    description:
      - The deployment's install root on this host.
  argv:
    type: list
    elements: str
    default: []
    description:
      - The router's command (O(state=present)).
  api_key_file:
    type: path
    description:
      - A file holding the API key, appended as C(--api-key) (the production router's own key).
  user:
    type: str
    description:
      - Run the router as this user (the service user, as its unit does), not as the Ansible user; unset
        runs it as the Ansible user.
  env_file:
    type: path
    description:
      - The router's secret env file (C(NAME="value") lines, as its unit's C(EnvironmentFile=) reads it),
        whose variables the router gets.
  state:
    type: str
    choices: [present, absent]
    default: present
    description:
      - Running or stopped.
  settle_s:
    type: float
    default: 1
    description:
      - How long the new process must stay alive for the start to count.
  stop_s:
    type: float
    default: 30
    description:
      - How long a stop waits after SIGTERM before SIGKILL.
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
    name: preview-router
    install_root: /opt/dsv4deploy
    argv: [python3, -m, sglang_router.launch_router, --pd-disaggregation, --port, "8100"]
    api_key_file: /etc/dsv4deploy/api_key

- name: Stop it
  dsv4.deploy.dsv4_preview_router:
    name: preview-router
    install_root: /opt/dsv4deploy
    state: absent
"""

RETURN = r"""
pid:
  description: The started process's PID (O(state=present)).
  returned: success
  type: int
stopped:
  description: Whether a running preview router was stopped.
  returned: always
  type: bool
"""

import json
import os
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_text, write_atomic
from ansible_collections.dsv4.deploy.plugins.module_utils.run_as import environment, identity
from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact, tail


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


def stop(pidfile: str, stop_s: float, check: bool) -> bool:
    """Stop the process group `pidfile` records (SIGTERM, then SIGKILL after `stop_s`), if its leader is
    still the process started then; True when one was stopped."""
    if not os.path.exists(pidfile):
        return False
    record = json.loads(read_text(pidfile) or "{}")
    pid, started = int(record.get("pid", 0)), str(record.get("start_time", ""))
    running = pid > 0 and bool(started) and _start_time(pid) == started
    if check:
        return running
    if running:
        # Its own session and group (start_new_session): the router and any process it spawned.
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + stop_s
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    os.unlink(pidfile)
    return running


def start(argv: list[str], key_file: str | None, root: str, name: str, settle_s: float, user: str | None = None,
          env_file: str | None = None) -> int:
    """Start `argv` in its own session, as `user` with `env_file`'s variables (issue #37 item 6: not as root,
    not without the router's env); its PID, once it stayed alive `settle_s` (RuntimeError otherwise)."""
    full = list(argv)
    who = identity(user) if user else {}
    env = environment(who.pop("env", None), env_file)
    if key_file:
        key = read_text(key_file).strip()
        if not key:
            raise RuntimeError(f"the API key file {key_file} is empty")
        full += ["--api-key", key]
    log_path = os.path.join(root, "logs", f"{name}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab") as log:
        offset = log.tell()
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=root,
                                start_new_session=True, close_fds=True, env=env, umask=0o027, **who)
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    if proc.poll() is not None:
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
        raise RuntimeError(f"the preview router {name} exited at once (status {proc.returncode}): "
                           f"{tail(redact(text), lines=20)}")
    return proc.pid


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "install_root": {"type": "path", "required": True},
            "argv": {"type": "list", "elements": "str", "default": []},
            "api_key_file": {"type": "path"},
            "user": {"type": "str"},
            "env_file": {"type": "path"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "settle_s": {"type": "float", "default": 1},
            "stop_s": {"type": "float", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "present" and not p["argv"]:
        module.fail_json(msg="argv: the preview router's command is empty; fix: give argv with state=present")
    pidfile = os.path.join(p["install_root"], "run", f"{p['name']}.pid")
    try:
        stopped = stop(pidfile, p["stop_s"], module.check_mode)
        if p["state"] == "absent" or module.check_mode:
            module.exit_json(changed=stopped or p["state"] == "present", stopped=stopped)
        pid = start(p["argv"], p["api_key_file"], p["install_root"], p["name"], p["settle_s"], p["user"],
                    p["env_file"])
        os.makedirs(os.path.dirname(pidfile), exist_ok=True)
        # Its start time: a later stop acts only while that PID is still this process (no key written).
        write_atomic(pidfile, json.dumps({"pid": pid, "start_time": _start_time(pid)}), mode=0o600)
    except (OSError, RuntimeError, ValueError) as exc:
        module.fail_json(msg=f"preview router {p['name']} on {p['install_root']}: {exc}", stopped=False)
    module.exit_json(changed=True, pid=pid, stopped=stopped)


if __name__ == "__main__":
    main()
