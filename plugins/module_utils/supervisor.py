"""supervisord under an install root: its XML-RPC socket for queries, starts and stops, supervisorctl for
the rest (standard library only)."""

from __future__ import annotations

import contextlib
import glob
import http.client
import os
import re
import shutil
import socket
import subprocess
import time
import xmlrpc.client

from ansible_collections.dsv4.deploy.plugins.module_utils import release_store as store
from ansible_collections.dsv4.deploy.plugins.module_utils import trust
from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_text
from ansible_collections.dsv4.deploy.plugins.module_utils.layout import MANAGED_MARK
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError

# A stop over the socket waits until the program has exited: up to its stopwaitsecs (a router's drain).
STOP_RPC_TIMEOUT_S = 900
# Logs hold the servers' start lines and prompts: group-readable at most, in a folder others cannot enter.
LOG_DIR_MODE = 0o750
SUPERVISOR_UMASK = "027"
# Where supervisord reads its programs, under the install root: the active release's, the continuous
# verification's (role dsv4_verify_timer), which serves whichever release is active and so outlives a switch,
# and a rolling step's preview router (module_utils/preview.py), there only while the step runs.
PROGRAM_DIRS = ("current/supervisor", "verify-timer/supervisor", "supervisor/preview")


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

    def __init__(self, root: str, bin_dir: str | None):
        self.root = root
        self.dir = os.path.join(root, "supervisor")
        self.conf = os.path.join(self.dir, "supervisord.conf")
        self.bin_dir = bin_dir

    def _bin(self, name: str) -> str:
        if self.bin_dir:
            return os.path.join(self.bin_dir, name)
        found = shutil.which(name)
        if not found:
            raise ServiceError(f"{name} not found on PATH; install supervisor or set supervisor_bin_dir")
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
                f"[include]\nfiles = {' '.join(f'{r}/{d}/*.conf' for d in PROGRAM_DIRS)}\n")

    def ctl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run([self._bin("supervisorctl"), "-c", self.conf, *args],
                              capture_output=True, text=True, timeout=600, check=False)
        if check and proc.returncode != 0:
            raise ServiceError(f"supervisorctl {' '.join(args)} failed: {proc.stdout}{proc.stderr}".strip())
        return proc

    def rpc(self, timeout: float = 30) -> xmlrpc.client.ServerProxy:
        return xmlrpc.client.ServerProxy(
            "http://localhost/RPC2", transport=_UnixTransport(os.path.join(self.dir, "supervisor.sock"), timeout))

    def running(self) -> bool:
        try:
            return self.rpc().supervisor.getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Error):
            return False

    def trusted(self) -> None:
        """Refuse (ServiceError) an install root whose folders another user could swap: root's supervisord
        would run the programs found there, and one without `user=` as root."""
        problem = trust.walk_all([self.root, *(os.path.join(self.root, d) for d in PROGRAM_DIRS)])
        if problem:
            raise ServiceError(f"refusing to run supervisord for {self.root}: {problem}")

    def ensure(self) -> bool:
        """Write the config and start supervisord when it is not running; True when anything changed."""
        self.trusted()
        changed = False
        for path in (self.dir, os.path.join(self.root, "logs")):
            if not os.path.isdir(path):
                os.makedirs(path, mode=LOG_DIR_MODE)
                store.note_created(self.root, os.path.basename(path))
            if os.stat(path).st_mode & 0o777 != LOG_DIR_MODE:
                os.chmod(path, LOG_DIR_MODE)  # folders made by an older version were 0755
                changed = True
        for log in glob.glob(os.path.join(self.root, "logs", "*")) + glob.glob(os.path.join(self.dir, "*.log")):
            if os.path.isfile(log) and os.stat(log).st_mode & 0o027:
                os.chmod(log, 0o640)
        text = self.config_text()
        if not os.path.exists(self.conf) or read_text(self.conf) != text:
            with open(self.conf, "w", encoding="utf-8") as fh:
                fh.write(text)
            changed = True
        if not self.running():
            proc = subprocess.run([self._bin("supervisord"), "-c", self.conf], capture_output=True, text=True,
                                  check=False)
            if proc.returncode != 0:
                raise ServiceError(f"supervisord did not start: {proc.stdout}{proc.stderr}".strip())
            deadline = time.monotonic() + 15
            while not self.running():
                if time.monotonic() > deadline:
                    raise ServiceError(f"supervisord started but its socket in {self.dir} never answered")
                time.sleep(0.1)
            changed = True
        return changed

    def pending(self) -> list[str]:
        """What ensure() and reload() would do now, each step in words; nothing is changed. A program whose
        name stays but whose file changed is reloaded by a real run but not named here: supervisord tells
        that only by rereading, which a check run does not do."""
        todo = []
        if not os.path.exists(self.conf) or read_text(self.conf) != self.config_text():
            todo.append(f"write {self.conf}")
        wanted = {os.path.basename(p)[:-len(".conf")]
                  for d in PROGRAM_DIRS for p in glob.glob(os.path.join(self.root, d, "*.conf"))}
        if not self.running():
            todo.append(f"start supervisord ({self.conf})")
            known: set[str] = set()
        else:
            known = {i["name"] for i in self.rpc().supervisor.getAllProcessInfo()}
        todo += [f"load program {n}" for n in sorted(wanted - known)]
        todo += [f"drop program {n}" for n in sorted(known - wanted)]
        return todo

    def reload(self, keep: frozenset[str] = frozenset()) -> bool:
        """What `supervisorctl update` does, over the socket: reread the programs, stop and drop those
        removed or changed, add those added or changed; True when any were. A changed program named in
        `keep` is left running as it is (supervisord names it changed again until it is stopped): a start
        of other programs must not restart it."""
        self.trusted()
        rpc = self.rpc(timeout=STOP_RPC_TIMEOUT_S)
        try:
            added, changed, removed = rpc.supervisor.reloadConfig()[0]
            changed = [group for group in changed if group not in keep]
            # A group still stopping cannot be removed (STILL_RUNNING): its stop is finished first.
            self.finish_stops([*removed, *changed])
            for group in [*removed, *changed]:
                with contextlib.suppress(xmlrpc.client.Fault):  # nothing of it running
                    rpc.supervisor.stopProcessGroup(group)
                rpc.supervisor.removeProcessGroup(group)
            for group in [*added, *changed]:
                rpc.supervisor.addProcessGroup(group)
        except (OSError, xmlrpc.client.Error) as exc:
            raise ServiceError(f"supervisord at {self.dir} could not load the programs of {self.root}/current: "
                               f"{getattr(exc, 'faultString', exc)}") from exc
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
        # Any stop under way first: the old process may hold the port a new one binds (a router's).
        self.finish_stops()
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
            for line in read_text(conf).splitlines():
                if line.startswith("stdout_logfile="):
                    return line.split("=", 1)[1].strip()
        except OSError:
            pass
        return os.path.join(self.root, "logs", f"{name}.log")

    def stop(self, name: str, wait: bool = True) -> tuple[bool, str]:
        """Stop `name` and wait until it has exited (a router: until its requests in flight are done); with
        `wait` false only ask supervisord to (it sends the TERM, and the KILL after stopwaitsecs). A stop
        already under way is waited for (supervisorctl stop would answer NOT_RUNNING at once)."""
        try:
            self.rpc(timeout=STOP_RPC_TIMEOUT_S).supervisor.stopProcess(name, wait)
        except xmlrpc.client.Fault as exc:
            # Not running, or not known to supervisord: nothing of it to stop.
            ok = "NOT_RUNNING" in exc.faultString or "BAD_NAME" in exc.faultString
            if ok and wait:
                return self.finish_stops([name]), f"{name}: stopped"
            return ok, f"{name}: {exc.faultString}"
        except OSError as exc:
            return False, f"supervisord at {self.dir} did not answer: {exc}"
        return True, f"{name}: stopped"

    def finish_stops(self, names: list[str] | None = None) -> bool:
        """Wait until no program of `names` (default all) is STOPPING: a stop asked for without waiting is
        over before the program is started again, reloaded or removed (its old process holds its port).
        supervisord ends it by itself (KILL after stopwaitsecs); False if it never did."""
        deadline = time.monotonic() + STOP_RPC_TIMEOUT_S
        while True:
            try:
                infos = self.rpc().supervisor.getAllProcessInfo()
            except (OSError, xmlrpc.client.Error):
                return True  # no supervisord: nothing of it runs
            if not [i for i in infos if i["statename"] == "STOPPING" and (names is None or i["name"] in names)]:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
