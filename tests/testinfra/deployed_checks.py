"""What an operator checks on a deployed host, as functions that return the problems found.

Every check reads the target through a testinfra host (`host.file`, `host.run`, `host.socket`, ...),
so the same code runs against the embedded host (`local://`) and real hosts (`ssh://...`). The
expected state comes from the host itself: `{install_root}/current/spec.json` (the resolved spec the
release was rendered from, plus the inventory host name) and `manifest.json` (sha256 per file).
An empty list means the check passed; each problem names the service or file and what was seen.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Protocol

from dsv4deploy.gates.config import parse_logged_overrides
from dsv4deploy.plan.services import ServiceDefinition, api_key_file, build_services, prometheus_port
from dsv4deploy.spec import Deployment, WorkerSpec

WILDCARDS = {"0.0.0.0": "0.0.0.0", "::": "::", "[::]": "::"}
# The serve script's only legitimate use of --api-key: the value read from the key file at start.
API_KEY_FROM_FILE = re.compile(r'--api-key\s+"\$api_key"')
# The start-up line sglang (and the simulator) writes once per start: the override of *this* start.
STARTUP_MARK = "server_args"


class DeployedStateError(RuntimeError):
    """The host has no readable deployment under the install root."""


@dataclass(frozen=True)
class Deployed:
    """The active release of one host, and what its spec says should run there."""

    install_root: str
    release_dir: str  # resolved target of `current`
    host_name: str  # inventory host name the release was rendered for
    spec: Deployment
    manifest: dict[str, Any]
    services: list[ServiceDefinition]
    workers: dict[str, WorkerSpec]  # server service name -> its worker spec

    @property
    def current(self) -> str:
        """The active-release pointer."""
        return f"{self.install_root}/current"


class ServiceManager(Protocol):
    """How the checks ask a service manager about one service."""

    def status(self, name: str) -> tuple[bool, str]:
        """(running, what the manager said)."""

    def main_pid(self, name: str) -> int | None:
        """The service's main process, or None when it has none."""

    def startup_line(self, name: str) -> str:
        """The last start-up (`server_args`) line the service logged since it last started."""


# -- reading the deployment ------------------------------------------------------------------------

def read_json(host: Any, path: str) -> dict[str, Any]:
    """A JSON file on the target; DeployedStateError when missing or not JSON."""
    f = host.file(path)
    if not f.exists:
        raise DeployedStateError(f"{path} does not exist on the target")
    try:
        return json.loads(f.content_string)
    except ValueError as exc:
        raise DeployedStateError(f"{path} is not JSON: {exc}") from None


def read_deployed(host: Any, install_root: str) -> Deployed:
    """The active release under `install_root` on `host`, with its spec and manifest."""
    root = install_root.rstrip("/") or "/"
    resolved = host.run("readlink -f -- %s", f"{root}/current")
    if resolved.rc != 0 or not resolved.stdout.strip():
        raise DeployedStateError(f"{root}/current cannot be resolved on the target ({resolved.stderr.strip()})")
    release_dir = resolved.stdout.strip()
    data = read_json(host, f"{release_dir}/spec.json")
    if "deployment" not in data or "host" not in data:
        raise DeployedStateError(f"{release_dir}/spec.json lacks the keys 'deployment' and 'host'")
    spec = Deployment.model_validate(data["deployment"])
    host_name = str(data["host"])
    everything = build_services(spec)
    # build_services lists the servers in spec.workers() order, then the router.
    workers = {svc.name: worker for svc, (_, worker) in zip(everything, spec.workers(), strict=False)}
    services = sorted((s for s in everything if s.host == host_name), key=lambda s: (s.start_order, s.name))
    return Deployed(root, release_dir, host_name, spec, read_json(host, f"{release_dir}/manifest.json"),
                    services, {n: w for n, w in workers.items() if any(s.name == n for s in services)})


# -- releases --------------------------------------------------------------------------------------

def pointer_problems(host: Any, d: Deployed) -> list[str]:
    """`current` is a symlink to a directory directly under `releases/`."""
    link = host.file(d.current)
    if not link.is_symlink:
        return [f"{d.current} is not a symlink (the active release must be a pointer into releases/)"]
    releases = host.run("readlink -f -- %s", f"{d.install_root}/releases").stdout.strip()
    parent, _, release_id = d.release_dir.rpartition("/")
    problems = []
    if parent != releases or not release_id:
        problems.append(f"{d.current} resolves to {d.release_dir}, not a release in {releases}/")
    if not host.file(d.release_dir).is_directory:
        problems.append(f"{d.current} points to {d.release_dir}, which is not a directory")
    return problems


def manifest_problems(host: Any, d: Deployed) -> list[str]:
    """Every manifest file is in the release with its sha256, and the release holds no other file."""
    expected: dict[str, str] = d.manifest.get("files", {})
    if not expected:
        return [f"{d.release_dir}/manifest.json lists no files"]
    actual = release_hashes(host, d.release_dir)
    problems = []
    for path, digest in sorted(expected.items()):
        if path not in actual:
            problems.append(f"{path}: in the manifest but missing from {d.release_dir}")
        elif actual[path] != digest:
            problems.append(f"{path}: sha256 {actual[path]} on the host, {digest} in the manifest (changed by hand?)")
    for path in sorted(set(actual) - set(expected) - {"manifest.json"}):
        problems.append(f"{path}: in {d.release_dir} but not in its manifest")
    return problems


def release_hashes(host: Any, release_dir: str) -> dict[str, str]:
    """sha256 of every regular file of the release, relative path -> hex, computed on the host."""
    cmd = f"cd {shlex.quote(release_dir)} && find . -type f -print0 | sort -z | xargs -0 -r sha256sum --"
    out = host.check_output(cmd)
    hashes = {}
    for line in out.splitlines():
        digest, _, path = line.partition("  ")
        hashes[path.removeprefix("./")] = digest
    return hashes


def layout_problems(host: Any, d: Deployed) -> list[str]:
    """The release has a serve script for each service its spec puts on this host, and no other."""
    scripts = host.run("cd %s && ls bin", d.release_dir).stdout.split()
    found = {s.removeprefix("serve-").removesuffix(".sh") for s in scripts if s.startswith("serve-")}
    wanted = {s.name for s in d.services}
    problems = [f"bin/serve-{n}.sh: the spec runs {n} on {d.host_name} but the release has no script"
                for n in sorted(wanted - found)]
    problems += [f"bin/serve-{n}.sh: in the release but the spec has no such service on {d.host_name}"
                 for n in sorted(found - wanted)]
    return problems


# -- services --------------------------------------------------------------------------------------

class Supervisor:
    """Our supervisord under `{install_root}/supervisor/`, asked through supervisorctl."""

    def __init__(self, host: Any, install_root: str, supervisorctl: str):
        self.host = host
        self.install_root = install_root
        self.ctl = [supervisorctl, "-c", f"{install_root}/supervisor/supervisord.conf"]

    def _run(self, *args: str) -> Any:
        return self.host.run(" ".join(shlex.quote(a) for a in (*self.ctl, *args)))

    def status(self, name: str) -> tuple[bool, str]:
        """RUNNING per `supervisorctl status NAME`."""
        out = self._run("status", name)
        text = (out.stdout + out.stderr).strip()
        fields = text.split()
        return len(fields) > 1 and fields[0] == name and fields[1] == "RUNNING", text

    def main_pid(self, name: str) -> int | None:
        """`supervisorctl pid NAME` (0 when not running)."""
        text = self._run("pid", name).stdout.strip()
        return int(text) if text.isdigit() and int(text) > 0 else None

    def startup_line(self, name: str) -> str:
        """The last start-up line of the program's log file (supervisor appends one per start)."""
        path = f"{self.install_root}/logs/{name}.log"
        return self.host.run("grep -a -- %s %s | tail -n 1", STARTUP_MARK, path).stdout.strip()


class Systemd:
    """systemd units, asked through testinfra's service module, systemctl and journalctl."""

    def __init__(self, host: Any):
        self.host = host

    def status(self, name: str) -> tuple[bool, str]:
        """`host.service(name).is_running`."""
        running = self.host.service(name).is_running
        state = self.host.run("systemctl show -p ActiveState -p SubState --value %s", name).stdout.split()
        return running, f"{name} {'/'.join(state) or 'unknown'}"

    def main_pid(self, name: str) -> int | None:
        """The unit's MainPID (0 when not running)."""
        text = self.host.run("systemctl show -p MainPID --value %s", name).stdout.strip()
        return int(text) if text.isdigit() and int(text) > 0 else None

    def startup_line(self, name: str) -> str:
        """The last start-up line in the journal of the unit's current invocation (this start only)."""
        invocation = self.host.run("systemctl show -p InvocationID --value %s", name).stdout.strip()
        if not invocation:
            return ""
        return self.host.run("journalctl %s -o cat --no-pager | grep -a -- %s | tail -n 1",
                             f"_SYSTEMD_INVOCATION_ID={invocation}", STARTUP_MARK).stdout.strip()


def manager_for(host: Any, d: Deployed, supervisorctl: str) -> ServiceManager:
    """The service manager the host's spec names."""
    if d.spec.host(d.host_name).service_manager == "systemd":
        return Systemd(host)
    return Supervisor(host, d.install_root, supervisorctl)


def running_problems(manager: ServiceManager, d: Deployed) -> list[str]:
    """Each service of the release is running under its manager."""
    problems = []
    for svc in d.services:
        running, said = manager.status(svc.name)
        if not running:
            problems.append(f"{svc.name}: not running under {svc.service_manager} ({said or 'no answer'})")
    return problems


def enabled_problems(host: Any, d: Deployed) -> list[str]:
    """Each systemd unit of the release starts at boot (enabled), so a rebooted host serves again."""
    return [f"{svc.name}: not enabled at boot (systemctl is-enabled: "
            f"{host.run('systemctl is-enabled %s', svc.name).stdout.strip() or 'no answer'})"
            for svc in d.services if not host.service(svc.name).is_enabled]


def process_tree(host: Any, pid: int) -> list[int]:
    """`pid` and all its descendants, from `ps` on the host."""
    children: dict[int, list[int]] = {}
    for line in host.check_output("ps -e -o pid=,ppid=").splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(fields[0]))
    tree, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            tree.append(child)
            todo.append(child)
    return tree


def process_cwds(host: Any, pids: list[int]) -> dict[int, str]:
    """`/proc/PID/cwd` of each process still alive ('' when it cannot be read)."""
    script = 'for p in "$@"; do [ -d /proc/$p ] && printf "%s %s\\n" "$p" "$(readlink /proc/$p/cwd)"; done; true'
    out = host.check_output(f"sh -c {shlex.quote(script)} sh {' '.join(map(str, pids))}")
    cwds = {}
    for line in out.splitlines():
        pid, _, cwd = line.partition(" ")
        cwds[int(pid)] = cwd
    return cwds


def cwd_problems(host: Any, manager: ServiceManager, d: Deployed) -> list[str]:
    """Each service's process, and every child of it, runs in the active release directory."""
    problems = []
    for svc in d.services:
        pid = manager.main_pid(svc.name)
        if pid is None:
            problems.append(f"{svc.name}: has no main process")
            continue
        for child, cwd in sorted(process_cwds(host, process_tree(host, pid)).items()):
            if cwd != d.release_dir:
                what = "its main process" if child == pid else f"its child {child}"
                problems.append(f"{svc.name}: {what} (pid {child}) runs in {cwd or '(unreadable)'}, "
                                f"not the active release {d.release_dir}")
    return problems


def listen_address(d: Deployed, svc: ServiceDefinition, port: int | None = None) -> str:
    """The address the service's `port` is bound to, per its spec (the router's metrics have their own)."""
    if svc.role == "router" and d.spec.router is not None:
        if port is not None and port == prometheus_port(d.spec.router):
            return d.spec.router.prometheus_listen
        return d.spec.router.listen
    return d.spec.host(svc.host).listen


def listening(host: Any, address: str, port: int) -> bool:
    """Listening on `address` (or on the wildcard of its family, which includes it)."""
    family_wildcard = "::" if ":" in address.strip("[]") else "0.0.0.0"
    address = WILDCARDS.get(address, address.strip("[]"))
    return any(host.socket(f"tcp://{a}:{port}").is_listening for a in dict.fromkeys([address, family_wildcard]))


def port_problems(host: Any, d: Deployed) -> list[str]:
    """Every port of every service of the release is listening where the spec binds it."""
    problems = []
    for svc in d.services:
        for port in svc.ports:
            address = listen_address(d, svc, port)
            if not listening(host, address, port):
                problems.append(f"{svc.name}: nothing listens on {address}:{port}")
    return problems


def override_problems(manager: ServiceManager, d: Deployed) -> list[str]:
    """Each server logged, at its last start, exactly the override its spec asks for."""
    problems = []
    for name, worker in d.workers.items():
        expected = d.spec.model_override_args(worker)
        line = manager.startup_line(name)
        if not line:
            problems.append(f"{name}: no start-up ({STARTUP_MARK}) line in its log since it started")
            continue
        logged = parse_logged_overrides(line)
        if not logged:
            problems.append(f"{name}: its start-up line has no json_model_override_args: {line[:300]}")
            continue
        try:
            value = json.loads(logged[-1] or "{}")
        except ValueError:
            problems.append(f"{name}: logged json_model_override_args {logged[-1]!r} is not JSON")
            continue
        if value != expected:
            problems.append(f"{name}: logged json_model_override_args {json.dumps(value, sort_keys=True)}, "
                            f"expected {json.dumps(expected, sort_keys=True)} (index_topk + model_overrides)")
    return problems


# -- secrets ---------------------------------------------------------------------------------------

def key_file(d: Deployed) -> str | None:
    """The file the host's services read the API key from, None without a key."""
    return api_key_file(d.spec, d.spec.host(d.host_name))


def key_file_problems(host: Any, path: str) -> list[str]:
    """The key file exists, is a regular file, not readable or writable by others, and not empty."""
    f = host.file(path)
    if not f.exists:
        return [f"{path}: the API key file does not exist"]
    if not f.is_file:
        return [f"{path}: the API key file is not a regular file"]
    problems = []
    if f.mode & 0o007:
        problems.append(f"{path}: the API key file has mode {f.mode:04o}; others may read it (want 0600 or 0640)")
    if not f.content_string.strip():
        problems.append(f"{path}: the API key file is empty")
    return problems


def release_files(d: Deployed) -> list[str]:
    """Relative paths of every file the release should hold (manifest entries and the manifest)."""
    return [*sorted(d.manifest.get("files", {})), "manifest.json"]


def leaked_key_problems(host: Any, d: Deployed, key: str) -> list[str]:
    """No release file contains the key text."""
    if not key:
        return []
    return [f"{rel}: contains the API key text" for rel in release_files(d)
            if host.file(f"{d.release_dir}/{rel}").exists and key in host.file(f"{d.release_dir}/{rel}").content_string]


def literal_key_problems(host: Any, d: Deployed) -> list[str]:
    """Serve scripts pass only `--api-key "$api_key"` (read from the key file), never a literal."""
    path = key_file(d)
    problems = []
    for svc in d.services:
        rel = f"bin/serve-{svc.name}.sh"
        text = host.file(f"{d.release_dir}/{rel}").content_string
        code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        for line in code:
            if "--api-key" in line and not API_KEY_FROM_FILE.search(line):
                problems.append(f"{rel}: passes --api-key other than from the key file: {line.strip()[:120]}")
        uses_key = any(API_KEY_FROM_FILE.search(line) for line in code)
        if path is None and uses_key:
            problems.append(f"{rel}: passes an API key but the spec has no api_key")
        if path is not None and (not uses_key or f"api_key_file={shlex.quote(path)}" not in code):
            problems.append(f"{rel}: does not read the API key from {path}")
    return problems
