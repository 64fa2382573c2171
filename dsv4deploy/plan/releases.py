"""What each host of a deployment has installed: its releases, when, verified or failed, which is active.

Read from the hosts themselves, the way the playbooks read them: one ad-hoc, check-mode run of the
`dsv4_host_releases` module (state=query, read-only) over the inventory's own connections (the embedded
host's local connection, ssh for real hosts). Nothing on a host changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dsv4deploy import PACKAGE_DIR

MODULE = "dsv4_host_releases"
# Seconds the whole query may take (ssh to every host, one module run each).
QUERY_TIMEOUT_S = 300


class ReleasesError(Exception):
    """The hosts could not be asked at all (no ansible, no module): a message with the fix."""


@dataclass(frozen=True)
class HostReleases:
    """One host's answer: its releases (oldest first), or why it gave none."""

    host: str
    install_root: str
    releases: list[dict] = field(default_factory=list)
    active: str | None = None
    error: str | None = None


def collections_root() -> Path:
    """The folder holding ansible_collections/dsv4/deploy with the dsv4_host_releases module: the clone's
    root (its ansible_collections link), else the installed wheel's site-packages. The module imports the
    collection's module_utils, so it runs as the collection's module, never as a loose library file."""
    package = PACKAGE_DIR
    candidates = [package.parent] + [Path(p) for p in sys.path if p]
    for folder in candidates:
        if (folder / "ansible_collections" / "dsv4" / "deploy" / "plugins" / "modules" / f"{MODULE}.py").is_file():
            return folder
    raise ReleasesError(f"the {MODULE} module is not found beside dsv4deploy nor in an installed collection "
                        "dsv4.deploy; fix: reinstall dsv4deploy (pip install dsv4deploy)")


def ansible_bin() -> str:
    """The `ansible` command of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).parent / "ansible"
    found = str(beside) if beside.is_file() else shutil.which("ansible")
    if not found:
        raise ReleasesError("the `ansible` command is not found; fix: install ansible-core in this environment")
    return found


def run_module(module: str, args: str, inventories: list[str], extra_vars: list[str],
               roots: dict[str, str], needs: str) -> dict[str, dict | str]:
    """Run the collection's `module` with `args` (k=v, templated per host; `dsv4_releases_roots[inventory_hostname]`
    is the host's install root) on every host in `roots`, read-only, in one ad-hoc run: host -> its result (which
    has the key `needs`), or a string saying why there is none."""
    with tempfile.TemporaryDirectory(prefix="dsv4deploy-releases-") as tmp:
        tree = Path(tmp) / "tree"
        roots_file = Path(tmp) / "roots.json"
        roots_file.write_text(json.dumps({"dsv4_releases_roots": roots}))
        argv = [ansible_bin(), ",".join(sorted(roots)), "--check", "-m", f"dsv4.deploy.{module}",
                "-a", args, "--tree", str(tree)]
        for inventory in inventories:
            argv += ["-i", inventory]
        for value in extra_vars:
            argv += ["-e", value]
        argv += ["-e", f"@{roots_file}"]
        inherited = os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep)
        paths = [str(collections_root()), *(p for p in inherited if p)]
        env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(paths), "ANSIBLE_STDOUT_CALLBACK": "oneline",
               "ANSIBLE_DEPRECATION_WARNINGS": "false"}
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=QUERY_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise ReleasesError(f"the hosts did not all answer within {QUERY_TIMEOUT_S} s") from None
        return {host: _result(tree / host, proc, needs) for host in sorted(roots)}


def _result(result_file: Path, proc: subprocess.CompletedProcess, needs: str) -> dict | str:
    try:
        result = json.loads(result_file.read_text())
    except (OSError, ValueError):
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return "no answer: " + (" ".join(tail) or f"ansible exited {proc.returncode}")
    if result.get("unreachable"):
        return "unreachable: " + " ".join(str(result.get("msg", "")).split())
    # A task that failed before the module ran (e.g. a module_util not found) has a msg but no `failed`
    # key in --tree output: no `needs` is a failure too, never an empty answer.
    if result.get("failed") or needs not in result:
        return f"failed: {result.get('msg', '')}".strip()
    return result


def query(inventories: list[str], extra_vars: list[str], roots: dict[str, str]) -> list[HostReleases]:
    """Ask every host in `roots` (host -> install_root) for its releases, in one ad-hoc module run."""
    answers = run_module(MODULE, "install_root={{ dsv4_releases_roots[inventory_hostname] }} state=query",
                         inventories, extra_vars, roots, needs="details")
    return [_host_releases(host, root, answers[host]) for host, root in sorted(roots.items())]


def _host_releases(host: str, root: str, answer: dict | str) -> HostReleases:
    if isinstance(answer, str):
        return HostReleases(host, root, error=answer)
    return HostReleases(host, root, releases=list(answer.get("details") or []), active=answer.get("active"))


def format_created(epoch: float | None) -> str:
    """A release's install time in UTC, to the second ('?' when unknown)."""
    if epoch is None:
        return "?"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_releases(answers: list[HostReleases]) -> list[str]:
    """One block per host: a header, then one line per release, the active one marked with '*'."""
    lines: list[str] = []
    for answer in answers:
        lines.append(f"{answer.host} ({answer.install_root})")
        if answer.error:
            lines.append(f"  {answer.error}")
        elif not answer.releases:
            lines.append("  no releases installed")
        else:
            width = max(len("RELEASE"), *(len(r["id"]) for r in answer.releases))
            lines.append(f"    {'RELEASE'.ljust(width)}  {'CREATED'.ljust(23)}  STATUS")
            for r in answer.releases:
                mark = "*" if r.get("active") else " "
                status = r["status"] + ("  (active)" if r.get("active") else "")
                lines.append(f"  {mark} {r['id'].ljust(width)}  {format_created(r.get('created')).ljust(23)}  {status}")
    return lines


def as_json(answers: list[HostReleases]) -> str:
    """The answers as one JSON document (host -> install_root, active, releases or error)."""
    return json.dumps({a.host: {"install_root": a.install_root, "active": a.active, "releases": a.releases,
                                "error": a.error} for a in answers}, indent=2, sort_keys=True)
