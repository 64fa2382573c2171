"""A private copy of the embedded simulated host for one test module: own ports, install root, reports.

The copy is the real `inventory/local` with only ports and paths changed, so the playbooks run
exactly as a user runs them; nothing in the tool knows it is under test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.ports import free_port_block

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("DSV4_VENV_BIN", REPO / ".venv" / "bin"))
# The soak gate at a size that shows it runs and passes, for tests whose subject is not the soak (its
# power to catch corruption is test_gate_promises' and test_fault_matrix's): a coarse design (clean at most
# 1 %, bad at least 30 %, risks 10 % (5 % a test) and 10 %) that passes a clean release after 7 sessions of
# 2 turns, about
# 1 s of a deploy instead of the default's 65 sessions of 4 turns (~25 s).
SMALL_SOAK_VARS = {"soak_sessions": 12, "soak_turns": 2, "soak_acceptable_rate": 0.01, "soak_max_corruption_rate": 0.3,
                   "soak_acceptable_mistake_rate": 0.01, "soak_max_mistake_rate": 0.3, "soak_alpha": 0.1,
                   "soak_beta": 0.1}
SMALL_SOAK = ["-e", json.dumps(SMALL_SOAK_VARS)]
# The needle grid at two cells, for tests whose subject is not the needle (the inventory's 18 cells up to
# 12K tokens, ~6 s of a deploy, are test_gate_promises' and test_fault_matrix's): the required 5.5K row
# stays, so index_topk 512 still fails it. A grid given after it replaces it (the last -e wins). The rule is
# 3 of 3 trials (docs/evidence.md, "Needle in the integration tier"): a clean simulated release passes after
# 3 requests a cell (the default schedule needs 4), a lost cell fails on its first miss; the run is WEAKENED.
SMALL_NEEDLE_RULE_VARS = {"needle_trials": 3, "needle_min_recalled": 3}
SMALL_NEEDLE_VARS = {"needle_lengths": [1000, 5500], "needle_depths": [0.5], **SMALL_NEEDLE_RULE_VARS}
SMALL_NEEDLE = ["-e", json.dumps(SMALL_NEEDLE_VARS)]
# The same rule alone, for tests with a grid of their own whose subject is not the needle.
SMALL_NEEDLE_RULE = ["-e", json.dumps(SMALL_NEEDLE_RULE_VARS)]
# Readiness alone, for a deploy whose gates are not its test's subject at all (one that only puts a release
# in place, a settle, a repair): gate names are not part of a release, so its release id is the same.
READINESS = ["-e", json.dumps({"dsv4_gates_names": ["readiness"]})]


@dataclass
class SimHost:
    """One simulated host: its inventory, install root and reports folder."""

    root: Path
    base_port: int

    @property
    def inventory(self) -> Path:
        return self.root / "inventory"

    @property
    def install_root(self) -> Path:
        return self.root / "install"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.base_port}"

    def playbook(self, name: str, *extra: str, check: bool = False,
                 timeout: float = 600) -> subprocess.CompletedProcess:
        """Run playbooks/<name> against this host; returns the finished process (output in .stdout)."""
        cmd = [str(VENV_BIN / "ansible-playbook"), f"playbooks/{name}", "-i", str(self.inventory),
               "-e", f"dsv4_report_dir={self.reports}", *extra]
        env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"{name} failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
        return proc

    @property
    def api_key(self) -> str:
        return (self.root / "api_key").read_text().strip()

    def report(self) -> dict[str, Any]:
        """The newest report.json."""
        return json.loads((self.reports / "latest" / "report.json").read_text())

    def active_release(self) -> str | None:
        link = self.install_root / "current"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def last_spawn(self, program: str) -> float | None:
        """When supervisord last spawned `program` (epoch, ms), from its log's local-time stamps
        (`2026-11-30 01:11:46,123 INFO spawned: 'NAME' with pid N`)."""
        path = self.install_root / "supervisor" / "supervisord.log"
        found = re.findall(rf"^(\S+ \S+),(\d+) INFO spawned: '{re.escape(program)}'",
                           path.read_text(errors="replace"), re.M) if path.exists() else []
        if not found:
            return None
        stamp, ms = found[-1]
        return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000

    def supervisorctl(self, *args: str) -> str:
        conf = self.install_root / "supervisor" / "supervisord.conf"
        return subprocess.run([str(VENV_BIN / "supervisorctl"), "-c", str(conf), *args],
                              capture_output=True, text=True, timeout=60).stdout

    def pids(self) -> dict[str, int]:
        """Live program -> pid, from supervisord: RUNNING, or STARTING (alive, within its startsecs: the
        deploy no longer waits them out, so a fast simulated load is served before supervisord says RUNNING)."""
        out = {}
        for line in self.supervisorctl("status").splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[1] == "RUNNING":
                out[parts[0]] = int(parts[3].rstrip(","))
            elif len(parts) > 1 and parts[1] == "STARTING":  # its status line shows no pid
                pid = self.supervisorctl("pid", parts[0]).strip()
                if pid.isdigit() and int(pid) > 0:
                    out[parts[0]] = int(pid)
        return out

    def teardown(self) -> None:
        """Stop everything this host started: every supervisord under its install root (the deployment's,
        and a blue_green or surge slot's under slot-b), each of which stops its programs before it exits.
        Not stop.yml, which tests of its own check: run on every module's host, it was a playbook run each
        (62 s of a 158 s module under load), on a host that is thrown away next."""
        for pidfile in sorted(self.install_root.glob("**/supervisor/supervisord.pid")):
            stop_supervisord(pidfile.parent.parent)


@dataclass
class HostPart(SimHost):
    """One inventory host of a module's simulated host split into several (split_hosts): its own install root."""

    name: str = ""

    @property
    def install_root(self) -> Path:
        return self.root / f"install-{self.name}"


def split_hosts(sim_host: SimHost, host_vars: dict[str, dict[str, Any]]) -> dict[str, HostPart]:
    """Make `sim_host`'s inventory several hosts (name -> host variables over the local host's), each with its
    own install root and supervisord. The simulated GPUs stay one ledger for all of them (the spec's
    server_env and gpu_query_command are one for all hosts), so each host's workers need GPUs of their own."""
    hosts_path = sim_host.inventory / "hosts.yml"
    inventory = yaml.safe_load(hosts_path.read_text())
    group = inventory["all"]["children"]["dsv4"]
    local = group["hosts"].pop("local")
    parts = {name: HostPart(root=sim_host.root, base_port=sim_host.base_port, name=name) for name in host_vars}
    group["hosts"] = {name: {**local, "install_root": str(part.install_root), **host_vars[name]}
                      for name, part in parts.items()}
    hosts_path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    (sim_host.inventory / "group_vars" / "all" / "zz_hosts.yml").write_text(
        yaml.safe_dump({"dsv4_sim_state_dir": str(sim_host.root / "sim-gpus")}))
    return parts


def node_hosts(sim_host: SimHost, addresses: dict[str, str]) -> dict[str, HostPart]:
    """`sim_host` split into inventory hosts (name -> loopback address each listens on) with GPUs of their own:
    each host's modules run under a Python that sets DSV4_SIM_NODE, which the supervisord they start and the
    simulated nvidia-smi inherit."""
    for name in addresses:
        python = sim_host.root / f"python-{name}"
        python.write_text(f'#!/bin/sh\nDSV4_SIM_NODE={name} exec {VENV_BIN / "python"} "$@"\n')
        python.chmod(0o755)
    return split_hosts(sim_host, {name: {"ansible_host": address, "listen": address,
                                         "ansible_python_interpreter": str(sim_host.root / f"python-{name}")}
                                  for name, address in addresses.items()})


def stop_parts(parts: dict[str, HostPart]) -> None:
    """Every supervisord of each host by its PID file: a slot's (under slot-b) first, then the home one."""
    for part in parts.values():
        for pidfile in sorted(part.install_root.glob("**/supervisor/supervisord.pid"), reverse=True):
            stop_supervisord(pidfile.parent.parent)


def stop_supervisord(install_root: Path, timeout_s: float = 180) -> None:
    """End the supervisord under `install_root` by its PID file and wait until it has exited: on SIGTERM it
    stops every program first (TERM, then KILL after the program's stopwaitsecs), as `supervisorctl shutdown`.
    A PID file whose process is not a supervisord (stale, its PID reused) is left alone."""
    pidfile = install_root / "supervisor" / "supervisord.pid"
    try:
        pid = int(pidfile.read_text().strip())
        if b"supervisord" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.1)
    except (OSError, ValueError):  # no PID file, or the process is gone (ProcessLookupError)
        pass


def assign_ports(inventory: Path, base: int, install_root: Path | None = None) -> None:
    """Give a copy of the embedded host's inventory the 5 ports from `base` (and an install root)."""
    dep_path = inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())
    dep["router"]["port"] = base
    dep["combined"]["port"] = base
    dep["prefill"][0]["port"] = base + 1
    dep["decode"][0]["port"] = base + 2
    dep["prefill"][0]["bootstrap_port"] = base + 3
    dep["router"]["prometheus_port"] = base + 4
    if install_root is not None:
        dep["install_root"] = str(install_root)
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))


def make_sim_host(root: Path) -> SimHost:
    """Copy inventory/local into `root` with fresh ports and paths under `root`."""
    host = SimHost(root=root, base_port=free_port_block(5))
    src = REPO / "inventory" / "local"
    shutil.copytree(src, host.inventory)
    assign_ports(host.inventory, host.base_port, install_root=host.install_root)
    # The copy lives outside the repository: point the smg launcher at the repository's .smg-venv.
    hosts = host.inventory / "hosts.yml"
    smg_python = REPO / ".smg-venv" / "bin" / "python"
    text, count = re.subn(r"(?m)^(\s*dsv4_smg_python:).*$", rf'\1 "{smg_python}"', hosts.read_text())
    assert count == 1, "inventory/local/hosts.yml no longer sets dsv4_smg_python"
    hosts.write_text(text)
    # An API key by file, as production uses it: the gates and the router must present it.
    key_file = root / "api_key"
    key_file.write_text("sk-integration-" + os.urandom(8).hex() + "\n")
    key_file.chmod(0o600)
    (host.inventory / "group_vars" / "all" / "zz_paths.yml").write_text(
        yaml.safe_dump({"dsv4_repo_root": str(REPO), "api_key": {"file": str(key_file)}}))
    return host


def verify_timer_args(textfile_dir: Path) -> list[str]:
    """The verify timer on the embedded host, publishing into `textfile_dir`, with the test's own Python."""
    return ["-e", "dsv4_verify_timer_host=local", "-e", f"dsv4_verify_timer_textfile_dir={textfile_dir}",
            "-e", f"dsv4_verify_timer_python={VENV_BIN / 'python'}", "-e", "dsv4_verify_timer_interval_s=30",
            "-e", "dsv4_verify_timer_canary_tokens=500", "-e", "dsv4_verify_timer_probe_sessions=1"]


def shared_base(prefix: str) -> Path:
    """/tmp/<prefix>-<pid>, a folder every user may enter (pytest's own is root's 0700): for tests whose attacker
    is another user."""
    base = Path("/tmp") / f"{prefix}-{os.getpid()}"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    return base


@contextmanager
def sim_host_at(root: Path) -> Iterator[SimHost]:
    """A host made in `root`; its supervisords stopped and `root` removed after, even when the test failed."""
    host = make_sim_host(root)
    try:
        yield host
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)


def assert_cause_named(report: dict[str, Any], gate: str, host: str, out: str) -> None:
    """A failed gate's run names its cause as data (report.json's `cause`: the gate, the hosts it names, their
    log lines) and in the run's one line (`gate NAME failed on HOST`)."""
    cause = report.get("cause") or {}
    assert cause.get("gate") == gate and host in cause.get("hosts", []), cause
    assert cause.get("fix") and cause.get("logs", {}).get(host), cause
    assert f"gate {gate} failed on {host}" in out, out[-3000:]
