"""systemd units copied from the active release, and the journal (standard library only)."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import time

from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_text
from ansible_collections.dsv4.deploy.plugins.module_utils.layout import MANAGED_MARK
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError


class Systemd:
    """systemd units copied from the active release."""

    def __init__(self, root: str, unit_dir: str):
        self.root = root
        self.unit_dir = unit_dir

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=900, check=False)

    def ours(self, path: str) -> bool:
        """Whether the unit file at `path` is this deployment's: managed by us and run from this install root.

        Another deployment on the host (another install root) has units of its own, never touched here.
        """
        text = read_text(path)
        return MANAGED_MARK in text and f"\nWorkingDirectory={self.root}/current\n" in text.replace("%%", "%")

    def _unit_changes(self) -> tuple[dict[str, str], dict[str, str], list[str]]:
        """The active release's units (file name -> source), those to write, and ours to take out."""
        wanted = {os.path.basename(p): p for p in glob.glob(os.path.join(self.root, "current", "units", "*.service"))}
        clash = [os.path.join(self.unit_dir, n) for n in sorted(wanted)
                 if os.path.exists(os.path.join(self.unit_dir, n))
                 and MANAGED_MARK in read_text(os.path.join(self.unit_dir, n))
                 and not self.ours(os.path.join(self.unit_dir, n))]
        if clash:
            raise ServiceError(f"{', '.join(clash)} belong to another dsv4deploy deployment on this host (another "
                               "install_root); nothing was changed. Fix: set deployment_name to a name of this "
                               "deployment's own")
        write = {name: src for name, src in wanted.items()
                 if not os.path.exists(os.path.join(self.unit_dir, name))
                 or read_text(os.path.join(self.unit_dir, name)) != read_text(src)}
        # Ours the release no longer has: units of an older release, or named as before a rename.
        drop = [os.path.basename(path) for path in glob.glob(os.path.join(self.unit_dir, "sglang-dsv4*.service"))
                if os.path.basename(path) not in wanted and self.ours(path)]
        return wanted, write, drop

    def pending(self) -> list[str]:
        """What install() would do now, each step in words; nothing is changed."""
        wanted, write, drop = self._unit_changes()
        todo = [f"install {self.unit_dir}/{n}" for n in sorted(write)]
        todo += [f"disable and remove {self.unit_dir}/{n}" for n in drop]
        todo += [f"enable {n}" for n in sorted(wanted) if n in write or not self._enabled(n)]
        return todo

    def install(self) -> bool:
        """Copy the active release's units in, take out ours it no longer has, enable them; True when any changed."""
        wanted, write, drop = self._unit_changes()
        for name, src in write.items():
            dst = os.path.join(self.unit_dir, name)
            with open(dst + ".tmp", "w", encoding="utf-8") as fh:
                fh.write(read_text(src))
            os.replace(dst + ".tmp", dst)
        for name in drop:
            self.run("disable", "--now", name)
            os.unlink(os.path.join(self.unit_dir, name))
        changed = bool(write or drop)
        if changed:
            proc = self.run("daemon-reload")
            if proc.returncode != 0:
                raise ServiceError(f"systemctl daemon-reload failed: {proc.stderr.strip()}")
        # Enabled, so a rebooted host starts the active release again (WantedBy=multi-user.target).
        return self.set_enabled(sorted(n[:-len(".service")] for n in wanted), True) or changed

    def _enabled(self, unit: str) -> bool:
        return self.run("is-enabled", unit).stdout.strip() == "enabled"

    def removable(self) -> list[str]:
        """The units of ours remove() would take out."""
        return [os.path.basename(path) for path in glob.glob(os.path.join(self.unit_dir, "sglang-dsv4*.service"))
                if self.ours(path)]

    def set_enabled(self, names: list[str], enabled: bool) -> bool:
        """Enable (or disable) the named services at boot; True when any changed."""
        state = "enabled" if enabled else "disabled"
        todo = self.to_enable(names, enabled)
        if todo:
            proc = self.run("enable" if enabled else "disable", *todo)
            if proc.returncode != 0:
                raise ServiceError(f"could not make {', '.join(todo)} {state}: {proc.stderr.strip()}")
        return bool(todo)

    def to_enable(self, names: list[str], enabled: bool = True) -> list[str]:
        """The units of `names` whose enablement set_enabled() would change."""
        return [f"{n}.service" for n in names if self._enabled(f"{n}.service") != enabled]

    def remove(self) -> bool:
        """Take every unit we manage out of systemd (the releases keep their copies)."""
        removed = self.removable()
        for name in removed:
            self.run("disable", "--now", name)
            os.unlink(os.path.join(self.unit_dir, name))
        if removed:
            self.run("daemon-reload")
        return bool(removed)

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
        if state == "deactivating" and now["result"] not in ("", "success"):
            # The main process ended on its own (a stop asked for keeps Result=success); systemd is ending the
            # rest of the unit (KillMode=mixed) on its way to failed or auto-restart. Seen with the real sglang.
            return f"exited ({now['result']}, {now['exit']}) and systemd is stopping what is left of it"
        return f"was stopped ({state})"

    def start_all(self, names: list[str]) -> dict[str, str]:
        """One systemctl call for all units (systemd starts them in parallel, After= still ordering them);
        name -> error text for each unit that did not start."""
        if not names:
            return {}
        self.finish_stops()
        # A deliberate start clears the start limit: a release that crash-looped (StartLimitBurst) would
        # otherwise keep the same unit names refusing to start, the rollback's restored release included.
        self.run("reset-failed", *[f"{n}.service" for n in names])
        proc = self.run("start", *[f"{n}.service" for n in names])
        if proc.returncode == 0:
            return {}
        text = (proc.stdout + proc.stderr).strip()
        return {n: text for n in names if not self.status(n)["running"]} or dict.fromkeys(names, text)

    def stop(self, name: str, wait: bool = True) -> tuple[bool, str]:
        """`systemctl stop`: returns once the unit is stopped (a stop already under way is joined, not
        repeated); with `wait` false only queue the stop job (--no-block): systemd sends the TERM, and the
        KILL after TimeoutStopSec."""
        proc = self.run("stop", *([] if wait else ["--no-block"]), f"{name}.service")
        ok = proc.returncode == 0 or "not loaded" in proc.stderr
        return ok, (proc.stdout + proc.stderr).strip()

    def finish_stops(self, names: list[str] | None = None) -> bool:
        """Wait until no unit of `names` (default all of ours) is still stopping (a stop queued without
        waiting), so an old process is gone before anything starts (it may hold the port a new one binds):
        `systemctl stop` joins the stop job under way."""
        names = [u[:-len(".service")] for u in self.removable()] if names is None else names
        lives = self.lives(names)
        return all(self.stop(n)[0] for n in names if lives[n]["state"] == "deactivating")

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
