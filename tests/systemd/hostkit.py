"""Throwaway hosts with real systemd, reached over ssh: the kit behind tests/systemd.

A *lab* is N hosts booted with ``systemd-nspawn -b`` from one cached Debian rootfs
(tests/systemd/rootfs.py), each with its own overlay (so it survives a reboot), its own network
namespace and address on a private bridge, its own cgroup and the lab's ssh key. The bridge and the
controller side live in a namespace of their own: nothing of a lab touches the machine's network.
Everything a lab creates is recorded under /var/tmp/dsv4deploy-hostkit/<lab id>/ and removed by
``Lab.close()``, or by the next kit run when the process that made it died (``sweep()``).

    python -m tests.systemd.hostkit build                 # build or find the rootfs
    python -m tests.systemd.hostkit up gpu1 [--router gpu1] --inventory DIR [--example pd-single-host]
    python -m tests.systemd.hostkit sweep                 # remove labs whose owner is gone

See tests/systemd/README.md for the fixtures built on it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.systemd import rootfs as rootfs_mod

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("DSV4_VENV_BIN", REPO / ".venv" / "bin"))
LABS = Path(os.environ.get("DSV4_HOSTKIT_LABS", "/var/tmp/dsv4deploy-hostkit"))
# A private /24 used only inside the lab's own namespaces (every lab has its own bridge, so two
# labs at once do not see each other).
NET = "10.213.9"
CONTROLLER_ADDRESS = f"{NET}.1"
FIRST_HOST = 11
SIM_ROOT = "/opt/dsv4sim"
# ServerAlive: a host that drops off the network ends its (multiplexed) connection within ~15 s
# instead of hanging on TCP retries.
SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            "-o", "BatchMode=yes"]
BOOT_TIMEOUT_S = 90


class KitError(RuntimeError):
    """A lab could not be built or torn down."""


APT_LOCK = "/run/lock/dsv4deploy-apt.lock"  # as scripts/setup.sh's apt_get


def missing_prerequisites() -> str | None:
    """Why this machine cannot run labs, or None when it can (tries apt-get for missing tools as root)."""
    if os.geteuid() != 0:
        return "the systemd tier needs root (network namespaces, mounts, systemd-nspawn)"
    if sys.platform != "linux":
        return "the systemd tier needs Linux"
    tools = {"systemd-nspawn": "systemd-container", "debootstrap": "debootstrap", "ip": "iproute2",
             "nsenter": "util-linux", "ssh": "openssh-client", "ssh-keygen": "openssh-client"}
    missing = sorted({pkg for tool, pkg in tools.items() if not shutil.which(tool)})
    if missing and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        # scripts/setup.sh's parts may run apt-get beside this (CI builds them in the background), and a
        # second `apt-get update` fails at once on apt's lock: both take this lock file first.
        with open(APT_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=600)
            subprocess.run(["apt-get", "install", "-y", "-qq", *missing], capture_output=True, env=env, timeout=900)
        missing = sorted({pkg for tool, pkg in tools.items() if not shutil.which(tool)})
    if missing:
        return f"the systemd tier needs {', '.join(missing)} (apt-get install {' '.join(missing)})"
    if not Path("/sys/fs/cgroup").is_dir():
        return "the systemd tier needs a cgroup file system at /sys/fs/cgroup"
    return None


def _sh(argv: Sequence[str], *, check: bool = True, timeout: float = 120,
        **kw: Any) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise KitError(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stdout}{proc.stderr}".strip())
    return proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cgroup_roots() -> list[Path]:
    """Where a launcher's own cgroup goes: the named systemd and unified hierarchies of a hybrid
    setup, or the cgroup2 root."""
    base = Path("/sys/fs/cgroup")
    hybrid = [base / "systemd", base / "unified"]
    found = [p for p in hybrid if (p / "cgroup.procs").exists()]
    return found or [base]


def _rmdir_tree(path: Path) -> None:
    """Remove a cgroup and the ones nspawn made below it (cgroups are removed with rmdir, leaves first)."""
    if not path.is_dir():
        return
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with suppress(OSError):
            sub.rmdir()
    with suppress(OSError):
        path.rmdir()


@dataclass
class Host:
    """One booted host of a lab."""

    lab: Lab
    name: str
    address: str
    index: int
    router: bool = False
    launcher: subprocess.Popen | None = None
    boots: int = 0

    @property
    def netns(self) -> str:
        return f"{self.lab.id}-{self.index}"

    @property
    def dir(self) -> Path:
        return self.lab.dir / "hosts" / self.name

    @property
    def merged(self) -> Path:
        return self.dir / "merged"

    @property
    def cgroup(self) -> str:
        return f"{self.lab.id}-{self.name}"

    @property
    def init_pid(self) -> int:
        """PID (on this machine) of the host's systemd."""
        if self.launcher is None or self.launcher.poll() is not None:
            raise KitError(f"host {self.name} is not running")
        for pid in _descendants(self.launcher.pid):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
            if len(nspid) > 1 and nspid[-1] == "1":
                return pid
        raise KitError(f"host {self.name}: its systemd is not up yet")

    def exec(self, argv: Sequence[str], *, check: bool = True, timeout: float = 120,
             input: str | None = None) -> subprocess.CompletedProcess:
        """Run a command inside the host (all its namespaces), as root."""
        return _sh(["nsenter", "-t", str(self.init_pid), "-a", *argv], check=check, timeout=timeout, input=input)

    def sh(self, script: str, *, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run a shell snippet inside the host."""
        return self.exec(["/bin/sh", "-c", script], check=check, timeout=timeout)

    def ssh_argv(self, *argv: str) -> list[str]:
        """An ssh command line to this host, run on the lab's controller side."""
        return self.lab.controller_argv(["ssh", *SSH_OPTS, "-i", str(self.lab.key), f"root@{self.address}", *argv])

    def _prepare(self) -> None:
        """Network namespace, veth into the lab bridge, overlay root and what this host needs installed."""
        lab = self.lab
        _sh(["ip", "netns", "add", self.netns])
        _sh(["ip", "-n", lab.ctl_ns, "link", "add", f"vh{self.index}", "type", "veth", "peer", "name", "eth0",
             "netns", self.netns])
        _sh(["ip", "-n", lab.ctl_ns, "link", "set", f"vh{self.index}", "master", "br0", "up"])
        _sh(["ip", "-n", self.netns, "addr", "add", f"{self.address}/24", "dev", "eth0"])
        _sh(["ip", "-n", self.netns, "link", "set", "eth0", "up"])
        _sh(["ip", "-n", self.netns, "link", "set", "lo", "up"])
        for sub in ("upper", "work", "merged"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        upper = self.dir / "upper"
        # The simulated SGLang and nvidia-smi (standard library only), installed as a site would
        # install its server: a copy of this checkout's package, in the host's own layer.
        dest = upper / SIM_ROOT.lstrip("/") / "dsv4deploy"
        shutil.copytree(REPO / "dsv4deploy", dest, ignore=shutil.ignore_patterns("__pycache__", "ansible"),
                        dirs_exist_ok=True)
        (upper / "root" / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
        keys = upper / "root" / ".ssh" / "authorized_keys"
        keys.write_text(Path(f"{lab.key}.pub").read_text())
        keys.chmod(0o600)
        (upper / "etc").mkdir(exist_ok=True)
        (upper / "etc" / "hostname").write_text(self.name + "\n")
        _sh(["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={lab.rootfs.path},upperdir={upper},workdir={self.dir / 'work'}", str(self.merged)])

    def boot(self) -> None:
        """Start the host's systemd and wait until it runs and answers ssh."""
        if self.launcher is not None and self.launcher.poll() is None:
            raise KitError(f"host {self.name} is already running")
        argv = ["systemd-nspawn", "-D", str(self.merged), "-b", "--register=no", "--keep-unit",
                "--console=passive", "-M", self.name, f"--network-namespace-path=/run/netns/{self.netns}",
                "--resolv-conf=off", "--timezone=off", "--link-journal=no"]
        if self.router:
            argv.append(f"--bind-ro={self.lab.rootfs.router}:{rootfs_mod.ROUTER_DIR}")
        argv += [f"--bind-ro={source}:{dest}" for source, dest in self.lab.binds]
        cgroups = [root / self.cgroup for root in _cgroup_roots()]
        for cg in cgroups:
            cg.mkdir(exist_ok=True)

        def own_cgroup() -> None:
            # Each launcher in its own cgroup, or a second host comes up degraded.
            for cg in cgroups:
                (cg / "cgroup.procs").write_text(str(os.getpid()))

        log = open(self.dir / f"console-{self.boots}.log", "w")  # noqa: SIM115 (the launcher keeps it)
        started = time.monotonic()
        self.launcher = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=own_cgroup, start_new_session=True)
        log.close()
        self.boots += 1
        self.lab.save()
        self.wait_running()
        rootfs_mod.log(f"host {self.name} ({self.address}) up in {time.monotonic() - started:.1f} s")

    def wait_running(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            if self.launcher is None or self.launcher.poll() is not None:
                raise KitError(f"host {self.name} exited while booting:\n{self.console()}")
            with suppress(KitError):
                state = self.exec(["systemctl", "is-system-running", "--wait"], check=False, timeout=60).stdout.strip()
                if state in ("running", "degraded"):
                    break
            time.sleep(0.2)
        if state != "running":
            failed = self.exec(["systemctl", "--failed", "--no-legend"], check=False).stdout
            raise KitError(f"host {self.name} did not come up ({state or 'no answer'}): {failed}")
        while time.monotonic() < deadline:
            if _sh(self.ssh_argv("true"), check=False, timeout=30).returncode == 0:
                return
            time.sleep(0.2)
        raise KitError(f"host {self.name} runs but does not answer ssh on {self.address}")

    def console(self) -> str:
        path = self.dir / f"console-{self.boots - 1}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def request_poweroff(self) -> None:
        """Ask the host's systemd to shut down (systemctl poweroff inside), without waiting for it."""
        if self.launcher is None or self.launcher.poll() is not None:
            return
        with suppress(KitError, subprocess.TimeoutExpired):
            self.exec(["systemctl", "poweroff", "--no-block"], check=False, timeout=30)

    def poweroff(self, timeout: float = 60, *, requested: bool = False) -> None:
        """Shut the host down cleanly and wait for its launcher to end (`requested`: request_poweroff was
        called already)."""
        if self.launcher is None or self.launcher.poll() is not None:
            return
        if not requested:
            self.request_poweroff()
        try:
            self.launcher.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """End the host at once (its launcher and everything in it)."""
        if self.launcher is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.launcher.poll() is not None:
                break
            with suppress(ProcessLookupError):
                self.launcher.send_signal(sig)
            with suppress(subprocess.TimeoutExpired):
                self.launcher.wait(20)

    def reboot(self) -> None:
        """Power the host off and boot it again, with its disk (the overlay's upper layer) kept."""
        self.poweroff()
        self.boot()

    def link(self, up: bool) -> None:
        """Take the host's network link down (it drops off the network) or bring it back."""
        _sh(["ip", "-n", self.netns, "link", "set", "eth0", "up" if up else "down"])

    def write_file(self, path: str, content: str, *, owner: str = "root", mode: str = "0600") -> None:
        """Put a file on the host, as an operator would before a deploy."""
        self.exec(["install", "-D", "-o", owner, "-g", owner, "-m", mode, "/dev/stdin", path], input=content)

    def teardown(self) -> None:
        self.poweroff(timeout=30)
        _umount(self.merged)
        for root in _cgroup_roots():
            _rmdir_tree(root / self.cgroup)
        _sh(["ip", "netns", "del", self.netns], check=False)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from the kernel's per-task children lists."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with suppress(OSError, ValueError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                out += kids
                todo += kids
    return out


def _umount(path: Path) -> None:
    if os.path.ismount(path) and _sh(["umount", str(path)], check=False).returncode != 0:
        _sh(["umount", "-l", str(path)], check=False)


@dataclass
class Lab:
    """N hosts on one private bridge; ``controller_argv`` runs a command on the bridge's side."""

    names: Sequence[str]
    routers: Sequence[str] = ()
    rootfs: rootfs_mod.Rootfs | None = None  # type: ignore[assignment]
    # Read-only binds (this machine's path, the hosts' path) on every host: what a test puts there
    # that is too big to copy, e.g. the real engine's venv (tests/real_engine/test_combined_on_systemd.py).
    binds: Sequence[tuple[str, str]] = ()
    id: str = field(default_factory=lambda: f"dsv4hk{secrets.token_hex(3)}")
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return LABS / self.id

    @property
    def ctl_ns(self) -> str:
        return f"{self.id}-ctl"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    def save(self) -> None:
        """Record what exists, so sweep() can remove it when this process dies before close()."""
        state = {"owner": os.getpid(), "ctl_ns": self.ctl_ns,
                 "hosts": {h.name: {"netns": h.netns, "cgroup": h.cgroup, "merged": str(h.merged),
                                    "launcher": h.launcher.pid if h.launcher else None}
                           for h in self.hosts.values()}}
        (self.dir / "state.json").write_text(json.dumps(state, indent=1))

    def start(self) -> Lab:
        """Create the bridge, the hosts' namespaces and overlays, boot them all; tears down on failure."""
        sweep()
        if self.rootfs is None:
            self.rootfs = rootfs_mod.ensure_rootfs()
        self.dir.mkdir(parents=True)
        for i, name in enumerate(self.names):
            self.hosts[name] = Host(self, name, f"{NET}.{FIRST_HOST + i}", i, router=name in self.routers)
        try:
            self.save()
            _sh(["ip", "netns", "add", self.ctl_ns])
            _sh(["ip", "-n", self.ctl_ns, "link", "set", "lo", "up"])
            _sh(["ip", "-n", self.ctl_ns, "link", "add", "br0", "type", "bridge"])
            _sh(["ip", "-n", self.ctl_ns, "addr", "add", f"{CONTROLLER_ADDRESS}/24", "dev", "br0"])
            _sh(["ip", "-n", self.ctl_ns, "link", "set", "br0", "up"])
            _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hostkit-{self.id}", "-f", str(self.key)])
            (self.dir / "cp").mkdir()
            for host in self.hosts.values():
                host._prepare()
            for host in self.hosts.values():
                host.boot()
        except BaseException:
            self.close()
            raise
        return self

    def reboot(self) -> None:
        """Reboot every host, their disks kept: all shut down side by side (a rack's power cycle), then each
        boots again (one by one, as start does: each launcher moves itself into its own cgroup)."""
        for host in self.hosts.values():
            host.request_poweroff()
        for host in self.hosts.values():
            host.poweroff(requested=True)
        for host in self.hosts.values():
            host.boot()

    def close(self) -> None:
        """Power every host off and remove everything the lab made."""
        for host in self.hosts.values():
            with suppress(Exception):
                host.poweroff(timeout=30)
        _remove_lab(self.dir, self.ctl_ns, {h.name: {"netns": h.netns, "cgroup": h.cgroup, "merged": str(h.merged),
                                                     "launcher": h.launcher.pid if h.launcher else None}
                                            for h in self.hosts.values()})

    def controller_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` run in the lab's controller namespace (the only place the hosts can be reached from)."""
        return ["ip", "netns", "exec", self.ctl_ns, *argv]

    def env(self) -> dict[str, str]:
        """Environment for Ansible on the controller side (its ssh sockets kept inside the lab)."""
        # The venv's tools first: testinfra's ansible:// backend runs ansible-inventory by name.
        return {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.dir / "cp"), "ANSIBLE_HOST_KEY_CHECKING": "False"}

    def run(self, argv: Sequence[str], *, timeout: float = 900, cwd: Path = REPO) -> subprocess.CompletedProcess:
        """Run a controller command (ansible-playbook, pytest) where it reaches the hosts."""
        return subprocess.run(self.controller_argv(argv), capture_output=True, text=True, timeout=timeout,
                              cwd=cwd, env=self.env())

    def ssh_config(self) -> Path:
        """An ssh_config naming the lab's hosts (by name and address): root, the lab's key, no host-key
        pinning (the hosts are new every run). For `ssh -F` and testinfra's `--ssh-config`."""
        path = self.dir / "ssh_config"
        lines = []
        for h in self.hosts.values():
            lines += [f"Host {h.name} {h.address}", f"  HostName {h.address}", "  User root",
                      f"  IdentityFile {self.key}", "  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                      "  LogLevel ERROR", "  BatchMode yes", "  ConnectTimeout 5", "  ServerAliveInterval 5",
                      "  ServerAliveCountMax 3", ""]
        path.write_text("\n".join(lines))
        return path

    def connection_vars(self) -> dict[str, Any]:
        """Ansible connection variables for the lab's hosts (root over ssh with the lab's key)."""
        return {"ansible_user": "root", "ansible_ssh_private_key_file": str(self.key),
                "ansible_ssh_common_args": " ".join(SSH_OPTS[:-2]),
                "ansible_control_path_dir": str(self.dir / "cp"),
                "ansible_python_interpreter": "/usr/bin/python3"}

    def sim_vars(self) -> dict[str, Any]:
        """What makes these hosts simulated GPU hosts (like inventory/local's sim.yml): the programs
        that stand in for sglang and nvidia-smi, and the real sglang-router in its own environment."""
        state = rootfs_mod.SIM_STATE_DIR
        return {
            "server_launcher": ["/usr/bin/python3", "-m", "dsv4deploy.sim.server"],
            "router_launcher": [f"{rootfs_mod.ROUTER_DIR}/bin/python", "-m", "sglang_router.launch_router"],
            "gpu_query_command": ["env", f"DSV4_SIM_STATE_DIR={state}", f"PYTHONPATH={SIM_ROOT}",
                                  "/usr/bin/python3", "-m", "dsv4deploy.sim.smi"],
            "dsv4_hostkit_sim_env": {
                "PYTHONPATH": SIM_ROOT, "DSV4_SIM_STATE_DIR": state,
                "DSV4_SIM_SGLANG_VERSION": "{{ sglang_version }}",
                "DSV4_SIM_GPU_COUNT": "{{ gpu_count | default(0) }}",
                "DSV4_SIM_GPU_MEMORY_GIB": "{{ gpu_memory_gib | default(0) }}",
                # Faults of the simulated servers: -e sim_faults=crash_on_start (dsv4deploy/sim/README.md).
                "DSV4_SIM_FAULTS": "{{ sim_faults | default('') }}"},
        }

    def write_inventory(self, dest: Path, example: str | Path | None = None,
                        group_vars: dict[str, Any] | None = None,
                        host_vars: dict[str, dict[str, Any]] | None = None, only: Sequence[str] = ()) -> Path:
        """An inventory for this lab at `dest`: the example's (inventory/examples/<example>) group and
        host variables with the lab's hosts (`only` these, when given) and addresses, the simulator standing in
        for sglang and nvidia-smi, and `group_vars`/`host_vars` merged over it (last wins). Returns `dest`."""
        if dest.exists():
            shutil.rmtree(dest)
        if example is not None:
            src = Path(example) if Path(example).is_dir() else REPO / "inventory" / "examples" / str(example)
            shutil.copytree(src, dest)
        (dest / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
        (dest / "host_vars").mkdir(exist_ok=True)
        hosts = {h.name: {"ansible_host": h.address} for h in self.hosts.values() if h.name in (only or self.hosts)}
        (dest / "hosts.yml").write_text("# Written by tests/systemd/hostkit.py for lab " + self.id + "\n" +
                                        yaml.safe_dump({"all": {"children": {"dsv4": {"hosts": hosts}}}}))
        sim = self.sim_vars()
        base_env = _read_var(dest / "group_vars" / "all", "server_env") or {}
        sim["server_env"] = {**base_env, **sim.pop("dsv4_hostkit_sim_env")}
        all_vars = {**self.connection_vars(), **sim, **(group_vars or {})}
        (dest / "group_vars" / "all" / "zz_hostkit.yml").write_text(
            "# The lab's connection and simulator settings (tests/systemd/hostkit.py).\n" +
            yaml.safe_dump(all_vars, sort_keys=False))
        for name, extra in (host_vars or {}).items():
            path = dest / "host_vars" / f"{name}.yml"
            current = yaml.safe_load(path.read_text()) if path.exists() else {}
            path.write_text(yaml.safe_dump({**(current or {}), **extra}, sort_keys=False))
        return dest

    def playbook(self, name: str, inventory: Path, *extra: str, reports: Path | None = None,
                 timeout: float = 900) -> subprocess.CompletedProcess:
        """ansible-playbook playbooks/<name> -i inventory [extra], from the controller side."""
        argv = [str(VENV_BIN / "ansible-playbook"), f"playbooks/{name}", "-i", str(inventory), *extra]
        if reports is not None:
            argv += ["-e", f"dsv4_report_dir={reports}"]
        return self.run(argv, timeout=timeout)


def _read_var(folder: Path, name: str) -> Any:
    for path in sorted(folder.glob("*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        if name in data:
            return data[name]
    return None


def _remove_lab(lab_dir: Path, ctl_ns: str, hosts: dict[str, dict[str, Any]]) -> None:
    """Remove a lab's launchers, mounts, cgroups, namespaces and files (idempotent)."""
    for info in hosts.values():
        pid = info.get("launcher")
        if pid and _alive(pid) and "systemd-nspawn" in _cmdline(pid) and lab_dir.name in _cmdline(pid):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with suppress(ProcessLookupError):
                    os.kill(pid, sig)
                for _ in range(100):
                    if not _alive(pid) or _zombie(pid):
                        break
                    time.sleep(0.1)
    for info in hosts.values():
        _umount(Path(info["merged"]))
        for root in _cgroup_roots():
            _rmdir_tree(root / info["cgroup"])
        _sh(["ip", "netns", "del", info["netns"]], check=False)
    _sh(["ip", "netns", "del", ctl_ns], check=False)
    if not any(os.path.ismount(info["merged"]) for info in hosts.values()):
        shutil.rmtree(lab_dir, ignore_errors=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def sweep() -> list[str]:
    """Remove labs whose owning process is gone (a test run that was killed); returns their ids."""
    removed = []
    for state_file in sorted(LABS.glob("*/state.json")):
        with suppress(OSError, ValueError):
            state = json.loads(state_file.read_text())
            if _alive(int(state["owner"])):
                continue
            _remove_lab(state_file.parent, state["ctl_ns"], state["hosts"])
            removed.append(state_file.parent.name)
    return removed


@contextmanager
def lab(names: Sequence[str], routers: Sequence[str] = ()) -> Iterator[Lab]:
    """Boot a lab of `names` (the router's sglang-router environment on `routers`); always torn down."""
    booted = Lab(names=list(names), routers=list(routers)).start()
    try:
        yield booted
    finally:
        booted.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.systemd.hostkit", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build (or find) the cached rootfs and print its path")
    sub.add_parser("sweep", help="remove labs whose owning process is gone")
    sub.add_parser("prune", help="delete cached rootfs builds of other recipes")
    up = sub.add_parser("up", help="boot hosts, write an inventory, wait for Ctrl-C, tear down")
    up.add_argument("names", nargs="+")
    up.add_argument("--router", action="append", default=[], help="host that gets sglang-router")
    up.add_argument("--inventory", type=Path, required=True)
    up.add_argument("--example", default=None, help="inventory/examples/<name> to start from")
    args = parser.parse_args(argv)
    reason = missing_prerequisites()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    if args.cmd == "build":
        print(rootfs_mod.ensure_rootfs().path)
    elif args.cmd == "sweep":
        print("\n".join(sweep()))
    elif args.cmd == "prune":
        print("\n".join(str(p) for p in rootfs_mod.prune()))
    else:
        with lab(args.names, args.router) as booted:
            inv = booted.write_inventory(args.inventory.resolve(), args.example)
            print(f"lab {booted.id} up; inventory {inv}; run controller commands with:\n"
                  f"  ip netns exec {booted.ctl_ns} <command>\nCtrl-C tears it down.", flush=True)
            with suppress(KeyboardInterrupt):
                signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
