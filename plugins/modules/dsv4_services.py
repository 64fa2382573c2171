#!/usr/bin/python
"""Run the services of the active release under systemd or supervisord, in a given order."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_services
short_description: Install, start, stop and inspect dsv4deploy services under systemd or supervisord
description:
  - The services are those of the active release C(install_root/current) (its C(bin/serve-NAME.sh)).
  - O(state=installed) makes the service manager see the active release's units or programs (systemd
    units copied to O(unit_dir) and a daemon-reload; supervisord started under the install root with
    its socket there, then reread and update).
  - O(state=stopped) stops O(names) (default all of ours) in the order given, else in drain order -
    routers first (a router stops taking new requests and lets those in flight finish within its stop
    timeout, the drain deadline), then decode workers, then prefill workers and the combined server (a
    decode still reading KV from a prefill that goes away fails its request). Returns how long each stop took.
  - O(state=started) first does what O(state=installed) does, then starts O(names) all at once (the
    service manager's own ordering still applies) and returns as soon as they are started, without a
    start wait. It fails only when the service manager refuses a start (a missing or non-executable
    script; under systemd a unit that cannot be executed, with systemd's reason from the journal).
    A service that exits later is caught by O(state=watched).
  - O(state=watched) waits while the services of this host come up, as the readiness gate does - until
    every worker of O(health_urls) answers C(/health) 200 (asked from this host) or O(timeout_s) passes
    - and watches O(names) meanwhile. The first that exits, or is restarted by its service manager, ends
    the wait at once; it is returned in RV(died) with its exit status and the end of its log, and left
    as it is (a deploy's rollback stops it, a verify run changes nothing). It never fails for a server;
    the readiness gate turns RV(died) into its verdict. Programs of O(start_when_healthy) are started during
    the wait, once their workers are healthy.
  - O(state=removed) stops everything and takes our units out of systemd, or shuts down our
    supervisord; the releases stay.
  - Our units are those run from O(install_root) (their C(WorkingDirectory)); another deployment's
    units on the same host are never changed or removed, and installing a unit whose name another
    deployment's unit has fails before anything changes.
  - O(state=status) and O(state=logs) change nothing.
options:
  manager:
    type: str
    choices: [systemd, supervisor]
    required: true
    description:
      - Service manager.
  install_root:
    type: path
    required: true
    description:
      - Root of the releases on this host.
  state:
    type: str
    choices: [installed, started, watched, stopped, status, logs, removed]
    default: status
    description:
      - What to do.
  names:
    type: list
    elements: str
    description:
      - Services to act on, in order (default all of the active release's).
  only:
    type: str
    choices: [all, router, workers, decode, prefill]
    default: all
    description:
      - Narrow O(names) by kind. V(decode) is the decode workers; V(prefill) the other workers (prefill
        and the combined server).
  unit_dir:
    type: path
    default: /etc/systemd/system
    description:
      - Where systemd units are installed.
  supervisor_bin_dir:
    type: path
    description:
      - Folder holding C(supervisord) and C(supervisorctl) (default the PATH).
  log_offsets:
    type: dict
    default: {}
    description:
      - Byte offsets per service, as O(state=started) returned them (O(state=logs) under supervisord).
  invocations:
    type: dict
    default: {}
    description:
      - systemd invocation ids per service, as O(state=started) returned them (O(state=logs) under systemd).
  health_urls:
    type: dict
    default: {}
    description:
      - O(state=watched) - worker name to its URL; the wait ends when each answers C(/health) 200. An address
        that is not this host's own (a wildcard listener reached at the inventory address) is asked on 127.0.0.1.
  since:
    type: dict
    default: {}
    description:
      - O(state=watched) - each service's life at its start, as O(state=started) returned it (RV(programs)); a
        service running under another pid or invocation since then has been restarted. Without it, the state
        at the first look counts.
  timeout_s:
    type: float
    default: 600
    description:
      - O(state=watched) - how long to wait for the workers at most.
  start_when_healthy:
    type: dict
    default: {}
    description:
      - O(state=watched) - programs to start during the wait, each once every worker URL it maps to (name to URL,
        asked as given) answers C(/health) 200; until then they are not watched. A router started this way
        registers its workers at its first probe, instead of re-probing them on its own back-off (sglang-router
        0.3.2 - after 1, 2, 3, 4 s, then every 5 s). One that is running already is watched like the others.
        Nothing is started in check mode.
  lock:
    type: dict
    description:
      - The deploy lock this run holds, to record its phase in (as M(dsv4.deploy.dsv4_lock) O(state=phase) does)
        with the work of this call rather than in a module run of its own - C(path), C(run_id), C(target),
        C(before) (the phase recorded before acting) and C(after) (the phase recorded once done). A lock
        this run no longer holds fails the call before anything is done. Nothing is written in check mode.
  enabled:
    type: bool
    description:
      - With O(state=stopped) and systemd, also disable (V(false)) the stopped units at boot, so a reboot
        does not start a deployment that was stopped on purpose. O(state=installed) always enables the
        active release's units.
attributes:
  check_mode:
    support: full
    description: Says what would be started, stopped or installed; touches no service.
  diff_mode:
    support: none
    description: Services have no file content to diff (the release's files are diffed by M(dsv4.deploy.dsv4_release)).
  platform:
    support: full
    platforms: posix
    description: A Linux host with systemd, or with supervisor installed.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Stop the router first
  dsv4.deploy.dsv4_services:
    manager: systemd
    install_root: /opt/dsv4deploy
    state: stopped
    only: router

- name: Start the workers of the active release
  dsv4.deploy.dsv4_services:
    manager: systemd
    install_root: /opt/dsv4deploy
    state: started
    only: workers
  register: started

- name: Which of our services run, with their PIDs
  dsv4.deploy.dsv4_services:
    manager: supervisor
    install_root: "{{ playbook_dir }}/.state"
    supervisor_bin_dir: "{{ ansible_playbook_python | dirname }}"
  register: status
"""

RETURN = r"""
services:
  description: Service name to C(name), C(running), C(active) and C(pid).
  returned: O(state=status) and O(state=logs)
  type: dict
pids:
  description: PIDs of our services and all their children.
  returned: O(state=status) and O(state=logs)
  type: list
  elements: int
started:
  description: Services started, in order.
  returned: O(state=started)
  type: list
  elements: str
stopped:
  description: Services stopped, in order.
  returned: O(state=stopped) and O(state=removed)
  type: list
  elements: str
stop_seconds:
  description: How long each service took to stop.
  returned: O(state=stopped) and O(state=removed)
  type: dict
log_offsets:
  description: Byte offset of each started service's log at its start (supervisord), for O(state=logs).
  returned: O(state=started)
  type: dict
invocations:
  description: systemd invocation id of each started service, for O(state=logs).
  returned: O(state=started)
  type: dict
programs:
  description: Each service's life right after the start (state, pid, start time or invocation, restarts),
    for O(since).
  returned: O(state=started)
  type: dict
died:
  description: The service that exited or was restarted during the wait - C(name), C(why) (exit status, and
    whether its manager started it again), C(seconds) after the wait began, C(log) (the end of its log).
  returned: O(state=watched), when one did
  type: dict
healthy:
  description: Seconds from the start of the wait until each worker answered C(/health) 200.
  returned: O(state=watched)
  type: dict
started_later:
  description: Seconds from the start of the wait until each program of O(start_when_healthy) was started.
  returned: O(state=watched)
  type: dict
not_started:
  description: Programs of O(start_when_healthy) still not started when the wait timed out (their workers never
    answered).
  returned: O(state=watched), when it timed out
  type: list
  elements: str
seconds:
  description: How long the wait took.
  returned: O(state=watched)
  type: float
logs:
  description: Service name to the text it logged since its start.
  returned: O(state=logs)
  type: dict
"""


import contextlib
import glob
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import xmlrpc.client
from urllib.parse import urlsplit, urlunsplit

from ansible.module_utils.basic import AnsibleModule

MANAGED_MARK = "Managed by dsv4deploy"
PREFIX = "serve-"
# install_root goes unquoted into supervisord.conf, which expands % and ends a value at " ;" or
# " #": the spec allows only these characters, and the module checks again (it may be called alone).
SAFE_ROOT = re.compile(r"/[A-Za-z0-9_.+@,=:/-]*\Z")
# A stop over the socket waits until the program has exited: up to its stopwaitsecs (a router's drain).
STOP_RPC_TIMEOUT_S = 900
# Logs hold the servers' start lines and prompts: group-readable at most, in a folder others cannot enter.
LOG_DIR_MODE = 0o750
SUPERVISOR_UMASK = "027"


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def kind_of(name: str) -> str:
    """router, decode or prefill (the combined server counts with prefill: it goes last)."""
    if name.endswith("router"):
        return "router"
    return "decode" if "-decode" in name else "prefill"


DRAIN_ORDER = {"router": 0, "decode": 1, "prefill": 2}


def release_services(root: str) -> list[str]:
    """Service names of the active release, from its serve scripts, in drain order."""
    base = os.path.join(root, "current", "bin")
    names = [os.path.basename(p)[len(PREFIX):-3] for p in glob.glob(os.path.join(base, f"{PREFIX}*.sh"))]
    return sorted(names, key=lambda n: (DRAIN_ORDER[kind_of(n)], n))


def _children(pid: int) -> list[int]:
    """All descendants of pid (via /proc), so a server's workers count as ours too."""
    by_parent: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        by_parent.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over supervisord's unix socket (what supervisorctl speaks, without starting a Python per call)."""

    def __init__(self, path: str, timeout: float = 30):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class _UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path: str, timeout: float = 30):
        super().__init__()
        self._path = path
        self._timeout = timeout

    def make_connection(self, host: str) -> http.client.HTTPConnection:
        return _UnixConnection(self._path, self._timeout)


class Supervisor:
    """supervisord under the install root: its XML-RPC socket for queries and starts, supervisorctl for the rest."""

    def __init__(self, module: AnsibleModule, root: str, bin_dir: str | None):
        self.module = module
        self.root = root
        self.dir = os.path.join(root, "supervisor")
        self.conf = os.path.join(self.dir, "supervisord.conf")
        self.bin_dir = bin_dir

    def _bin(self, name: str) -> str:
        if self.bin_dir:
            return os.path.join(self.bin_dir, name)
        found = shutil.which(name)
        if not found:
            self.module.fail_json(msg=f"{name} not found on PATH; install supervisor or set supervisor_bin_dir")
        return found

    def config_text(self) -> str:
        d, r = self.dir, self.root
        # umask 027: the program logs supervisord creates are 0640, its own log too.
        return (f"; {MANAGED_MARK}: supervisord for the services under {r}\n"
                f"[unix_http_server]\nfile={d}/supervisor.sock\nchmod=0700\n\n"
                f"[supervisord]\nlogfile={d}/supervisord.log\npidfile={d}/supervisord.pid\n"
                f"childlogdir={r}/logs\nnodaemon=false\numask={SUPERVISOR_UMASK}\n\n"
                "[rpcinterface:supervisor]\n"
                "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
                f"[supervisorctl]\nserverurl=unix://{d}/supervisor.sock\n\n"
                f"[include]\nfiles = {r}/current/supervisor/*.conf\n")

    def ctl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run([self._bin("supervisorctl"), "-c", self.conf, *args],
                              capture_output=True, text=True, timeout=600, check=False)
        if check and proc.returncode != 0:
            self.module.fail_json(msg=f"supervisorctl {' '.join(args)} failed: {proc.stdout}{proc.stderr}".strip())
        return proc

    def rpc(self, timeout: float = 30) -> xmlrpc.client.ServerProxy:
        return xmlrpc.client.ServerProxy(
            "http://localhost/RPC2", transport=_UnixTransport(os.path.join(self.dir, "supervisor.sock"), timeout))

    def running(self) -> bool:
        try:
            return self.rpc().supervisor.getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Error):
            return False

    def ensure(self) -> bool:
        """Write the config and start supervisord when it is not running; True when anything changed."""
        changed = False
        for path in (self.dir, os.path.join(self.root, "logs")):
            os.makedirs(path, mode=LOG_DIR_MODE, exist_ok=True)
            if os.stat(path).st_mode & 0o777 != LOG_DIR_MODE:
                os.chmod(path, LOG_DIR_MODE)  # folders made by an older version were 0755
                changed = True
        for log in glob.glob(os.path.join(self.root, "logs", "*")) + glob.glob(os.path.join(self.dir, "*.log")):
            if os.path.isfile(log) and os.stat(log).st_mode & 0o027:
                os.chmod(log, 0o640)
        text = self.config_text()
        if not os.path.exists(self.conf) or _read(self.conf) != text:
            with open(self.conf, "w", encoding="utf-8") as fh:
                fh.write(text)
            changed = True
        if not self.running():
            proc = subprocess.run([self._bin("supervisord"), "-c", self.conf], capture_output=True, text=True,
                                  check=False)
            if proc.returncode != 0:
                self.module.fail_json(msg=f"supervisord did not start: {proc.stdout}{proc.stderr}".strip())
            deadline = time.monotonic() + 15
            while not self.running():
                if time.monotonic() > deadline:
                    self.module.fail_json(msg=f"supervisord started but its socket in {self.dir} never answered")
                time.sleep(0.1)
            changed = True
        return changed

    def reload(self) -> bool:
        """What `supervisorctl update` does, over the socket: reread the programs, stop and drop those
        removed or changed, add those added or changed; True when any were."""
        rpc = self.rpc(timeout=STOP_RPC_TIMEOUT_S)
        try:
            added, changed, removed = rpc.supervisor.reloadConfig()[0]
            for group in [*removed, *changed]:
                with contextlib.suppress(xmlrpc.client.Fault):  # nothing of it running
                    rpc.supervisor.stopProcessGroup(group)
                rpc.supervisor.removeProcessGroup(group)
            for group in [*added, *changed]:
                rpc.supervisor.addProcessGroup(group)
        except (OSError, xmlrpc.client.Error) as exc:
            self.module.fail_json(msg=f"supervisord at {self.dir} could not load the programs of {self.root}/current: "
                                      f"{getattr(exc, 'faultString', exc)}")
        return bool(added or changed or removed)

    def status(self, name: str) -> dict:
        info: dict = {}
        try:
            info = self.rpc().supervisor.getProcessInfo(name)
            state, out = info["statename"], f"{info['statename']} {info['description']}".strip()
        except xmlrpc.client.Fault as exc:
            state, out = "UNKNOWN", f"{name}: {exc.faultString}"
        except OSError as exc:
            state, out = "UNKNOWN", f"supervisord at {self.dir} did not answer: {exc}"
        # A program still in its startsecs (STARTING) or stopping has a process too: it is ours.
        pid = (info.get("pid") or None) if state in ("RUNNING", "STARTING", "STOPPING") else None
        # STARTING/BACKOFF count as active: supervisord is (re)trying them and a stop must end that too.
        return {"name": name, "state": state, "running": state == "RUNNING",
                "active": state in ("RUNNING", "STARTING", "BACKOFF", "STOPPING"), "pid": pid, "detail": out}

    def lives(self, names: list[str]) -> dict[str, dict]:
        """Each program's life now: state, pid, start time, last exit status (one XML-RPC call)."""
        try:
            infos = {i["name"]: i for i in self.rpc().supervisor.getAllProcessInfo()}
        except (OSError, xmlrpc.client.Error) as exc:
            why = f"supervisord at {self.dir} did not answer: {exc}"
            return {n: {"state": "UNKNOWN", "detail": why} for n in names}
        return {n: {"name": n, "state": infos[n]["statename"], "pid": infos[n]["pid"], "since": infos[n]["start"],
                    "exit": infos[n]["exitstatus"], "detail": infos[n]["spawnerr"] or infos[n]["description"]}
                if n in infos else {"state": "UNKNOWN", "detail": "supervisord does not know it"} for n in names}

    def gone(self, now: dict, base: dict) -> str:
        """Why a program started as `base` no longer runs as started ('' while it does)."""
        state, name = now["state"], now.get("name", "")
        if state in ("STARTING", "RUNNING"):
            if base.get("since") is not None and (now["since"], now["pid"]) != (base.get("since"), base.get("pid")):
                return f"exited ({self.last_exit(name)}) and supervisord started it again"
            return ""
        return {"BACKOFF": f"exited ({self.last_exit(name)}) and supervisord is about to start it again",
                "EXITED": f"exited ({self.last_exit(name)})",
                "FATAL": f"exited and supervisord gave up starting it ({now.get('detail')})",
                "STOPPING": "was stopped", "STOPPED": "was stopped"}.get(
                    state, f"is {state} ({now.get('detail', '')})")

    def last_exit(self, name: str) -> str:
        """How `name` last exited, from supervisord's log ("exit status 1; not expected"): getProcessInfo
        forgets the exit status as soon as supervisord starts the program again."""
        try:
            with open(os.path.join(self.dir, "supervisord.log"), "rb") as fh:
                fh.seek(max(os.path.getsize(fh.name) - 65536, 0))
                text = fh.read().decode(errors="replace")
        except OSError:
            return "exit status unknown"
        found = re.findall(rf"exited: {re.escape(name)} \(([^)]*)\)", text)
        return found[-1] if found else "exit status unknown"

    def start_all(self, names: list[str]) -> dict[str, str]:
        """Ask supervisord to start every program without waiting; name -> error text for a refused start."""
        errors = {}
        for name in names:
            try:
                self.rpc().supervisor.startProcess(name, False)
            except xmlrpc.client.Fault as exc:
                if "ALREADY_STARTED" not in exc.faultString:
                    errors[name] = exc.faultString
            except OSError as exc:
                errors[name] = f"supervisord did not answer: {exc}"
        return errors

    def shutdown(self) -> bool:
        """Stop supervisord itself (it was started by us, under the install root)."""
        self.ctl("shutdown", check=True)
        deadline = time.monotonic() + 30
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        return True

    def log_path(self, name: str) -> str:
        conf = os.path.join(self.root, "current", "supervisor", f"{name}.conf")
        try:
            for line in _read(conf).splitlines():
                if line.startswith("stdout_logfile="):
                    return line.split("=", 1)[1].strip()
        except OSError:
            pass
        return os.path.join(self.root, "logs", f"{name}.log")

    def stop(self, name: str) -> tuple[bool, str]:
        """Stop `name` and wait until it has exited (a router: until its requests in flight are done)."""
        try:
            self.rpc(timeout=STOP_RPC_TIMEOUT_S).supervisor.stopProcess(name, True)
        except xmlrpc.client.Fault as exc:
            # Not running, or not known to supervisord: nothing of it to stop.
            return "NOT_RUNNING" in exc.faultString or "BAD_NAME" in exc.faultString, f"{name}: {exc.faultString}"
        except OSError as exc:
            return False, f"supervisord at {self.dir} did not answer: {exc}"
        return True, f"{name}: stopped"


class Systemd:
    """systemd units copied from the active release."""

    def __init__(self, module: AnsibleModule, root: str, unit_dir: str):
        self.module = module
        self.root = root
        self.unit_dir = unit_dir

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=900, check=False)

    def ours(self, path: str) -> bool:
        """Whether the unit file at `path` is this deployment's: managed by us and run from this install root.

        Another deployment on the host (another install root) has units of its own, never touched here.
        """
        text = _read(path)
        return MANAGED_MARK in text and f"\nWorkingDirectory={self.root}/current\n" in text.replace("%%", "%")

    def install(self) -> bool:
        changed = False
        wanted = {os.path.basename(p): p for p in glob.glob(os.path.join(self.root, "current", "units", "*.service"))}
        clash = []
        for name in sorted(wanted):
            dst = os.path.join(self.unit_dir, name)
            if os.path.exists(dst) and MANAGED_MARK in _read(dst) and not self.ours(dst):
                clash.append(dst)
        if clash:
            self.module.fail_json(msg=f"{', '.join(clash)} belong to another dsv4deploy deployment on this host "
                                      "(another install_root); nothing was changed. Fix: set deployment_name to a "
                                      "name of this deployment's own")
        for name, src in wanted.items():
            dst = os.path.join(self.unit_dir, name)
            text = _read(src)
            if not os.path.exists(dst) or _read(dst) != text:
                with open(dst + ".tmp", "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(dst + ".tmp", dst)
                changed = True
        for path in glob.glob(os.path.join(self.unit_dir, "sglang-dsv4*.service")):
            name = os.path.basename(path)
            if name not in wanted and self.ours(path):  # e.g. this deployment's units before a rename
                self.run("disable", "--now", name)
                os.unlink(path)
                changed = True
        if changed:
            proc = self.run("daemon-reload")
            if proc.returncode != 0:
                self.module.fail_json(msg=f"systemctl daemon-reload failed: {proc.stderr.strip()}")
        # Enabled, so a rebooted host starts the active release again (WantedBy=multi-user.target).
        return self.set_enabled(sorted(n[:-len(".service")] for n in wanted), True) or changed

    def set_enabled(self, names: list[str], enabled: bool) -> bool:
        """Enable (or disable) the named services at boot; True when any changed."""
        state = "enabled" if enabled else "disabled"
        todo = [f"{n}.service" for n in names
                if (self.run("is-enabled", f"{n}.service").stdout.strip() == "enabled") != enabled]
        if todo:
            proc = self.run("enable" if enabled else "disable", *todo)
            if proc.returncode != 0:
                self.module.fail_json(msg=f"could not make {', '.join(todo)} {state}: {proc.stderr.strip()}")
        return bool(todo)

    def remove(self) -> bool:
        """Take every unit we manage out of systemd (the releases keep their copies)."""
        removed = False
        for path in glob.glob(os.path.join(self.unit_dir, "sglang-dsv4*.service")):
            if self.ours(path):
                self.run("disable", "--now", os.path.basename(path))
                os.unlink(path)
                removed = True
        if removed:
            self.run("daemon-reload")
        return removed

    def status(self, name: str) -> dict:
        proc = self.run("show", "-p", "ActiveState,SubState,MainPID,InvocationID", f"{name}.service")
        props = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        pid = int(props.get("MainPID", "0") or 0) or None
        running = props.get("ActiveState") == "active"
        return {"name": name, "state": props.get("ActiveState", "unknown"), "running": running, "pid": pid,
                "active": props.get("ActiveState") in ("active", "activating", "reloading", "deactivating"),
                "invocation": props.get("InvocationID", ""), "detail": f"{props.get('SubState', '')}"}

    def lives(self, names: list[str]) -> dict[str, dict]:
        """Each unit's life now: state, main pid, invocation, restarts, last exit (one systemctl call)."""
        props = "ActiveState,SubState,MainPID,NRestarts,InvocationID,ExecMainCode,ExecMainStatus,Result"
        out = self.run("show", "-p", props, *[f"{n}.service" for n in names]).stdout
        blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
                  for block in out.strip().split("\n\n")] if names else []
        lives = {}
        for name, b in zip(names, blocks + [{}] * (len(names) - len(blocks)), strict=False):
            code = EXIT_CODES.get(b.get("ExecMainCode", ""))
            lives[name] = {"state": b.get("ActiveState", "unknown"), "sub": b.get("SubState", ""),
                           "pid": int(b.get("MainPID") or 0), "invocation": b.get("InvocationID", ""),
                           "restarts": int(b.get("NRestarts") or 0), "result": b.get("Result", ""),
                           "exit": f"{code} {b.get('ExecMainStatus')}" if code else "no exit status"}
        return lives

    @staticmethod
    def gone(now: dict, base: dict) -> str:
        """Why a unit started as `base` no longer runs as started ('' while it does)."""
        state = now["state"]
        if state == "activating" and now["sub"] == "auto-restart":
            return f"exited ({now['result']}, {now['exit']}) and systemd is about to start it again"
        if state in ("active", "activating", "reloading"):
            if base.get("invocation") is not None and (
                    now["restarts"] > base.get("restarts", 0) or now["invocation"] != base.get("invocation")):
                return "exited and systemd started it again"
            return ""
        if state == "failed":
            return f"failed ({now['result']}, {now['exit']})"
        return f"was stopped ({state})"

    def start_all(self, names: list[str]) -> dict[str, str]:
        """One systemctl call for all units (systemd starts them in parallel, After= still ordering them);
        name -> error text for each unit that did not start."""
        if not names:
            return {}
        # A deliberate start clears the start limit: a release that crash-looped (StartLimitBurst) would
        # otherwise keep the same unit names refusing to start, the rollback's restored release included.
        self.run("reset-failed", *[f"{n}.service" for n in names])
        proc = self.run("start", *[f"{n}.service" for n in names])
        if proc.returncode == 0:
            return {}
        text = (proc.stdout + proc.stderr).strip()
        return {n: text for n in names if not self.status(n)["running"]} or dict.fromkeys(names, text)

    def stop(self, name: str) -> tuple[bool, str]:
        proc = self.run("stop", f"{name}.service")
        ok = proc.returncode == 0 or "not loaded" in proc.stderr
        return ok, (proc.stdout + proc.stderr).strip()

    def cursor(self) -> str:
        """The journal's position now, so a failed start can show everything logged since."""
        out = subprocess.run(["journalctl", "-n", "0", "--show-cursor", "--no-pager", "-q"],
                             capture_output=True, text=True, timeout=60, check=False).stdout
        return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("-- cursor:")), "")

    def journal_since(self, name: str, cursor: str, since: float) -> list[str]:
        """The unit's journal lines since `cursor` (else since the time `since`), systemd's own
        included ("Failed at step USER ...", "status=203/EXEC"), each as "IDENTIFIER: MESSAGE"."""
        # Not -u: systemd's forked child logs "Failed to determine user credentials" and "Failed at
        # step ..." with UNIT= from its own PID, which -u leaves out.
        args = ["journalctl", "--no-pager", "-o", "json", f"_SYSTEMD_UNIT={name}.service", "+", f"UNIT={name}.service"]
        args += [f"--after-cursor={cursor}"] if cursor else [f"--since=@{int(since) - 1}"]
        deadline = time.monotonic() + 3
        while True:
            lines = journal_lines(subprocess.run(args, capture_output=True, text=True, timeout=60, check=False).stdout)
            if any(SYSTEMD_VERDICT in line for line in lines) or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # journald may still be writing systemd's verdict on the start
        # The forked child's lines come through another socket and may trail the verdict a little.
        time.sleep(0.5)
        return journal_lines(subprocess.run(args, capture_output=True, text=True, timeout=60, check=False).stdout)

    def logs(self, name: str, invocation: str | None) -> str:
        args = ["journalctl", "--no-pager", "-o", "cat", "-u", f"{name}.service"]
        if invocation:
            args.append(f"_SYSTEMD_INVOCATION_ID={invocation}")
        return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False).stdout


# systemd's ExecMainCode (the si_code of the main process's end) in words.
EXIT_CODES = {"1": "exit status", "2": "killed by signal", "3": "dumped core, signal"}
# systemd's own last word on a failed start ("...: Failed with result 'exit-code'.").
SYSTEMD_VERDICT = "Failed with result"
# Lines of systemd's own that say why a unit did not start: exit statuses such as 217/USER or
# 203/EXEC, "Failed to ..." and "Failed at step ...".
SYSTEMD_REASON = re.compile(r"status=\d+/\w+|Failed to |Failed at step|code=(?:exited|killed|dumped)")


def journal_lines(json_lines: str) -> list[str]:
    """`journalctl -o json` output as "IDENTIFIER: MESSAGE" lines (systemd's marked "systemd")."""
    out = []
    for raw in json_lines.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        message = entry.get("MESSAGE", "")
        if isinstance(message, list):  # journald gives non-UTF-8 messages as byte arrays
            message = bytes(message).decode(errors="replace")
        # systemd's own lines come from PID 1, or from its forked child before exec (src/core code).
        ident = entry.get("SYSLOG_IDENTIFIER") or entry.get("_COMM") or "?"
        who = "systemd" if entry.get("_PID") == "1" or entry.get("CODE_FILE", "").startswith("src/core/") else ident
        out.append(f"{who}: {message}")
    return out


def start_failure_reason(lines: list[str]) -> str:
    """systemd's reasons among the journal lines, each once, joined; '' when it gave none."""
    reasons: list[str] = []
    for line in lines:
        text = line.split(": ", 1)[1] if line.startswith("systemd: ") else line
        # "Failed to start <description>" says that, not why.
        if SYSTEMD_REASON.search(text) and "Failed to start " not in text and text not in reasons:
            reasons.append(text)
    return "; ".join(reasons)


# sglang prints its server_args (api_key included) at start, and the key is in the server's argv.
_SECRET = re.compile(r"""(api[_-]key['"]?\s*[:=]\s*['"]?|--api-key[ =]['"]?)[^'"\s,)]+""", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with API key values replaced by ***."""
    return _SECRET.sub(r"\1***", text)


def _tail(text: str, lines: int = 12, width: int = 300) -> str:
    """The last lines of a log, each cut to `width` (sglang's server_args line is kilobytes long)."""
    return "\n".join(line if len(line) <= width else line[:width] + "..." for line in text.splitlines()[-lines:])


def _read_from(path: str, offset: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            fh.seek(offset if offset <= os.path.getsize(path) else 0)
            return fh.read()
    except OSError:
        return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "manager": {"type": "str", "choices": ["systemd", "supervisor"], "required": True},
            "install_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["installed", "started", "watched", "stopped", "status", "logs",
                                                 "removed"], "default": "status"},
            "names": {"type": "list", "elements": "str"},
            "only": {"type": "str", "choices": ["all", "router", "workers", "decode", "prefill"], "default": "all"},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "supervisor_bin_dir": {"type": "path"},
            "log_offsets": {"type": "dict", "default": {}},
            "invocations": {"type": "dict", "default": {}},
            "enabled": {"type": "bool"},
            "health_urls": {"type": "dict", "default": {}},
            "since": {"type": "dict", "default": {}},
            "timeout_s": {"type": "float", "default": 600},
            "lock": {"type": "dict"},
            "start_when_healthy": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["install_root"]
    if not SAFE_ROOT.match(root):
        module.fail_json(msg=f"install_root {root!r} has characters supervisord and unit files cannot take "
                             "safely; use letters, digits and . _ - + @ , = : / only")
    is_sup = p["manager"] == "supervisor"
    mgr = Supervisor(module, root, p["supervisor_bin_dir"]) if is_sup else Systemd(module, root, p["unit_dir"])
    names = p["names"] if p["names"] is not None else release_services(root)
    if p["only"] == "workers":
        names = [n for n in names if kind_of(n) != "router"]
    elif p["only"] != "all":
        names = [n for n in names if kind_of(n) == p["only"]]
    state = p["state"]
    lock = p["lock"] if p["lock"] and not module.check_mode else None
    if lock and lock.get("before"):
        record_phase(module, lock, lock["before"])
    if lock and lock.get("after"):
        # Every way out of a call that did its work records the phase it reached.
        done = module.exit_json

        def exit_json(**kwargs: object) -> None:
            record_phase(module, lock, lock["after"])
            done(**kwargs)

        module.exit_json = exit_json  # type: ignore[method-assign]

    idle = {n: {"name": n, "running": False, "active": False, "pid": None} for n in names}
    if is_sup and (state in ("status", "logs", "stopped", "removed") and not os.path.exists(mgr.conf)):
        # No supervisord was ever set up here: nothing of ours runs.
        module.exit_json(changed=False, services=idle, pids=[])
    if is_sup and state in ("status", "stopped", "removed") and not mgr.running():
        module.exit_json(changed=False, services=idle, pids=[])
    if state == "watched":
        module.exit_json(**watch(mgr, names, p["health_urls"], p["since"], p["timeout_s"], p["log_offsets"],
                                 {} if module.check_mode else p["start_when_healthy"]))

    if state == "installed":
        if module.check_mode:
            module.exit_json(changed=True)
        if is_sup:
            changed = mgr.ensure()
            changed = mgr.reload() or changed
        else:
            changed = mgr.install()
        module.exit_json(changed=changed)

    if state in ("status", "logs"):
        services = {n: mgr.status(n) for n in names}
        pids = []
        for svc in services.values():
            if svc["pid"]:
                pids += [svc["pid"], *_children(svc["pid"])]
        if is_sup and mgr.running():
            pids.append(int(mgr.rpc().supervisor.getPID()))
        result = {"changed": False, "services": services, "pids": sorted(set(pids))}
        if state == "logs":
            # The start line carries the API key: it never leaves the host (the config gate needs the rest).
            result["logs"] = {
                n: redact(_read_from(mgr.log_path(n), int(p["log_offsets"].get(n, 0))) if is_sup
                          else mgr.logs(n, p["invocations"].get(n) or services[n].get("invocation")))
                for n in names
            }
        module.exit_json(**result)

    if state in ("stopped", "removed"):
        stopped, seconds = [], {}
        for name in names:
            if not mgr.status(name)["active"]:
                continue
            if module.check_mode:
                stopped.append(name)
                continue
            # Blocks until the process has exited: for a router, until its in-flight requests are done.
            t0 = time.monotonic()
            ok, text = mgr.stop(name)
            seconds[name] = round(time.monotonic() - t0, 2)
            if not ok:
                module.fail_json(msg=f"could not stop {name}: {text}", stopped=stopped)
            stopped.append(name)
        removed = False
        if state == "stopped" and p["enabled"] is False and not is_sup and not module.check_mode:
            removed = mgr.set_enabled(names, False)
        if state == "removed" and not module.check_mode:
            removed = mgr.shutdown() if is_sup else mgr.remove()
        module.exit_json(changed=bool(stopped) or removed, stopped=stopped, stop_seconds=seconds)

    # started: every program at once, no start wait; only a start the service manager refuses fails here
    # (a program that exits later is the readiness wait's to catch: state=watched).
    if module.check_mode:
        module.exit_json(changed=True)
    installed = (mgr.ensure() | mgr.reload()) if is_sup else mgr.install()
    todo = [n for n in names if not _started(mgr.status(n))]
    offsets: dict[str, int] = {}
    for name in todo if is_sup else []:
        path = mgr.log_path(name)
        offsets[name] = os.path.getsize(path) if os.path.exists(path) else 0
    cursor, since = "" if is_sup else mgr.cursor(), time.time()
    errors = mgr.start_all(todo)
    if errors:
        lines, journal = [], []
        for name in errors:
            after = mgr.status(name)
            if is_sup:
                log, reason = redact(_read_from(mgr.log_path(name), offsets.get(name, 0))), ""
            else:
                entries = [redact(line) for line in mgr.journal_since(name, cursor, since)]
                log, reason = "\n".join(entries), start_failure_reason(entries)
                journal += entries[-40:]
            # systemd's reason first (the one-line summary of a failed deploy keeps the head).
            lines.append(f"{name} did not start ({after['state']}): "
                         f"{reason or errors.get(name) or after.get('detail', '')}\n"
                         f"--- {'last log lines' if is_sup else 'journal since this start'} ---\n"
                         f"{_tail(log, lines=20)}")
        # Do not leave the service manager retrying a server that cannot start.
        for name in errors:
            mgr.stop(name)
        module.fail_json(msg="\n".join(lines), started=[n for n in todo if n not in errors], log_offsets=offsets,
                         journal=journal[-40:])
    lives = mgr.lives(names)
    invocations = {} if is_sup else {n: lives[n]["invocation"] for n in todo}
    module.exit_json(changed=bool(todo) or installed, started=todo, log_offsets=offsets, invocations=invocations,
                     programs=lives, started_at=time.time())


def record_phase(module: AnsibleModule, lock: dict, phase: str) -> None:
    """Record `phase` (and the target release) in the deploy lock this run holds, atomically; fail when
    another run holds it now. The record's layout is dsv4_lock's (state=phase); the few lines of the atomic
    write are repeated here because a module runs alone on the host and cannot import another."""
    path = lock["path"]
    try:
        with open(path, encoding="utf-8") as fh:
            held = json.load(fh)
    except (OSError, ValueError):
        held = None
    if not isinstance(held, dict) or held.get("run_id") != lock["run_id"]:
        module.fail_json(msg=f"this run no longer holds {path} (now: {held or 'no lock'}); stopping here")
    held.update(phase=phase, target=lock.get("target", ""), phase_since=time.time())
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".deploy.lock-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(held, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _started(status: dict) -> bool:
    """Running, or being started by supervisord (STARTING): either way not to be started again."""
    return status["running"] or status["state"] == "STARTING"


def local_url(url: str) -> str:
    """`url` as this host asks it: its address when that is one of this host's own, else 127.0.0.1 (a
    server listening on every address, reached from elsewhere at an address this host may not have)."""
    parts = urlsplit(url)
    address = parts.hostname or ""
    try:
        info = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0]
        family, sockaddr = info[0], info[4]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((sockaddr[0], 0))
        return url
    except OSError:
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{parts.port}"))


def _healthy(url: str) -> bool:
    try:
        with _OPENER.open(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


# No environment proxies: the addresses asked are this host's own.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
WATCH_POLL_S = 0.1


def watch(mgr: Supervisor | Systemd, names: list[str], urls: dict[str, str], since: dict[str, dict],
          timeout_s: float, offsets: dict[str, int], later: dict[str, dict[str, str]] | None = None) -> dict:
    """Wait until every worker of `urls` is healthy, or `timeout_s`, or the first of `names` exits or is
    restarted (then returned as `died` with its log); the module's result. Each program of `later` that is
    not running yet is started as soon as every worker URL it names answers /health 200, and watched from
    then on (a router started once its workers are healthy registers them at its first probe)."""
    t0 = time.monotonic()
    urls = {n: local_url(u) for n, u in urls.items()}
    first = mgr.lives(names)
    base = {n: since.get(n) or first[n] for n in names}
    # A program of `later` already running (started with the others) is simply watched.
    pending = {n: u for n, u in (later or {}).items() if n in names and mgr.gone(first[n], first[n])}
    healthy: dict[str, float] = {}
    up: dict[str, bool] = {}  # URL -> answered /health 200 (each URL asked once per round)
    started_later: dict[str, float] = {}
    lives = first
    while True:
        for name in names:
            why = "" if name in pending else mgr.gone(lives[name], base[name])
            if why:
                return {"changed": True, "died": _died(mgr, name, why, base[name], offsets, t0),
                        "healthy": healthy, "started_later": started_later,
                        "seconds": round(time.monotonic() - t0, 3)}
        for url in {*urls.values(), *(u for w in pending.values() for u in w.values())}:
            if not up.get(url):
                up[url] = _healthy(url)
        for name, url in urls.items():
            if name not in healthy and up[url]:
                healthy[name] = round(time.monotonic() - t0, 3)
        for name in [n for n, workers in pending.items() if all(up[u] for u in workers.values())]:
            refused = mgr.start_all([name])
            del pending[name]
            if refused:
                return {"changed": True, "healthy": healthy, "started_later": started_later,
                        "seconds": round(time.monotonic() - t0, 3),
                        "died": _died(mgr, name, f"did not start: {refused[name]}", {}, offsets, t0)}
            started_later[name] = round(time.monotonic() - t0, 3)
            base[name] = mgr.lives([name])[name]
        elapsed = time.monotonic() - t0
        if (len(healthy) == len(urls) and not pending) or elapsed >= timeout_s:
            return {"changed": bool(started_later), "healthy": healthy, "seconds": round(elapsed, 3),
                    "started_later": started_later,
                    "waiting": sorted(set(urls) - set(healthy)), "not_started": sorted(pending)}
        time.sleep(min(WATCH_POLL_S, max(timeout_s - elapsed, 0)))
        lives = mgr.lives(names)


def _died(mgr: Supervisor | Systemd, name: str, why: str, base: dict, offsets: dict[str, int], t0: float) -> dict:
    """What the wait returns for a service that exited: why, when, the end of its log. It is left to the
    caller (a deploy's rollback stops it; a verify run changes nothing)."""
    seconds = round(time.monotonic() - t0, 2)
    if isinstance(mgr, Supervisor):
        log = _read_from(mgr.log_path(name), int(offsets.get(name, 0)))
    else:
        log = mgr.logs(name, base.get("invocation") or None)
    return {"name": name, "why": why, "seconds": seconds, "log": _tail(redact(log), lines=20),
            "log_source": "last log lines" if isinstance(mgr, Supervisor) else "its journal"}


if __name__ == "__main__":
    main()
