"""Engine venvs under a host's install root (`engines/sglang-<version>-<digest>/`): built as the service user under a
temporary name and renamed once complete, reused when complete, pruned when no kept release names them (standard
library only)."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess

from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_json

ENGINES_DIR = "engines"
ENGINE_FILE = "engine.json"
# Written last into a venv we built, before the rename: a venv without it is not ours, or not complete.
MARKER = ".dsv4deploy-engine.json"
PIP_TIMEOUT_S = 3600
# pip's words for a version the index or wheelhouse does not have, and for an index it cannot reach.
NOT_FOUND = re.compile(r"No matching distribution found for (\S+)|Could not find a version that satisfies the "
                       r"requirement (\S+)")
UNREACHABLE = re.compile(r"NewConnectionError|Failed to establish a new connection|Name or service not known|"
                         r"Max retries exceeded|Could not fetch URL|Connection refused|ConnectionError")


class EngineError(Exception):
    """An engine that cannot be installed on this host: the message names the field and the fix."""


def complete(venv: str, record: dict) -> bool:
    """Whether `venv` is a venv we built for exactly this record's requirements (its marker says so)."""
    mark = read_json(os.path.join(venv, MARKER))
    return mark.get("requirements") == record["requirements"] and mark.get("base_python") == record["base_python"]


def source_problem(record: dict) -> str | None:
    """Why pip could not find the engine here before trying it (a wheelhouse that is not a folder), else None."""
    house = record.get("wheelhouse")
    if house and not os.path.isdir(house):
        return (f"engine.wheelhouse {house} is not a folder on this host; fix: copy the wheels there (pip download "
                f"-d {house} {' '.join(record['requirements'])}) or give engine.index")
    return None


def change_line(before: dict | None, after: dict | None) -> str | None:
    """`engine 0.5.23 -> 0.5.23.post1` when a deploy changes a host's engine, else None."""
    def name(rec: dict | None) -> str:
        if not rec:
            return "host-provided"
        return str(rec.get("sglang"))
    if (before or {}).get("venv") == (after or {}).get("venv"):
        return None
    same = name(before) == name(after)
    return (f"engine {name(before)} -> {name(after)}"
            + (f" (same version, another venv: {after['venv'] if after else 'none'})" if same else ""))


def _as_user(user: str) -> None:
    entry = pwd.getpwnam(user)
    if entry.pw_uid != os.geteuid():
        os.setgroups(os.getgrouplist(entry.pw_name, entry.pw_gid))
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    os.environ.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)


def _in_child(user: str, work) -> tuple[int, str]:
    """Run `work()` in a child process as `user`; its exit code (0, or 3 for pip's failure) and its output."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        code, text = 1, ""
        try:
            _as_user(user)
            code, text = work()
        except BaseException as exc:  # whatever it is, the parent reports it
            text = f"{type(exc).__name__}: {exc}"
        with os.fdopen(write_fd, "w", encoding="utf-8") as out:
            out.write(text)
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, encoding="utf-8") as inp:
        text = inp.read()
    status = os.waitpid(pid, 0)[1]
    return os.waitstatus_to_exitcode(status), text


def _pip_problem(record: dict, output: str) -> str:
    where = " and ".join(filter(None, [f"index {record['index']}" if record.get("index") else "",
                                       f"wheelhouse {record['wheelhouse']}" if record.get("wheelhouse") else ""]))
    missing = NOT_FOUND.search(output)
    if record.get("index") and UNREACHABLE.search(output):
        return f"engine.index {record['index']} cannot be reached from this host; fix: check the URL and the " \
               "host's network to it, or give engine.wheelhouse"
    if missing:
        return (f"engine: {missing.group(1) or missing.group(2)} is not in the {where}; fix: put its wheel there "
                f"(pip download -d WHEELHOUSE {' '.join(record['requirements'])}) or set engine.sglang to a "
                "version it has")
    tail = "\n".join(output.strip().splitlines()[-8:])
    return f"engine: pip could not install {' '.join(record['requirements'])} from the {where}: {tail}"


def install(root: str, record: dict, user: str, creator: str = "python3") -> bool:
    """Build the engine's venv as `user` unless a complete one is there; True when built. Raises EngineError."""
    venv = record["venv"]
    if complete(venv, record):
        return False
    problem = source_problem(record)
    if problem:
        raise EngineError(problem)
    parent = os.path.join(root, ENGINES_DIR)
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise EngineError(f"service_user: no user {user!r} on this host to install the engine as; fix: create it "
                          "(or set service_user_create: true)") from None
    if not os.path.isdir(parent):
        # The first thing a deploy writes under a new install root: claim it first (its ownership marker), so
        # that a purge knows the engines folder as ours.
        from ansible_collections.dsv4.deploy.plugins.module_utils import ownership, release_store
        try:
            ownership.claim(root)
        except ownership.Refused as exc:
            raise EngineError(str(exc)) from None
        os.mkdir(parent, 0o755)
        os.chown(parent, entry.pw_uid, entry.pw_gid)
        release_store.note_created(root, ENGINES_DIR)
    code, output = _in_child(user, lambda: build(record, creator))
    if code == 0:
        return True
    if code == 3:  # pip failed: say why in the operator's words
        raise EngineError(_pip_problem(record, output))
    raise EngineError(f"engine: building {venv} failed: {output.strip()[-2000:]}")


def _cmd(argv: list) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)


def build(record: dict, creator: str) -> tuple[int, str]:
    """As the service user: a venv under a temporary name, the engine's requirements, the base environment beneath
    it, the marker, then the rename; (exit code, output)."""
    venv = record["venv"]
    tmp = os.path.join(os.path.dirname(venv), f".{os.path.basename(venv)}.building-{os.getpid()}")
    _remove_dead_builds(os.path.dirname(venv), os.path.basename(venv))
    base = record.get("base_python") or creator
    made = _cmd([base, "-m", "venv", "--without-pip", tmp])
    if made.returncode != 0:
        return 1, f"{base} -m venv failed: {made.stderr.strip()}"
    python = os.path.join(tmp, "bin", "python")
    if record.get("base_python"):
        # The base's packages (torch, the CUDA stack) beneath the venv's own: site-packages first, then these.
        found = _cmd([base, "-c", "import sysconfig, json; p = sysconfig.get_paths(); "
                                  "print(json.dumps(sorted({p['purelib'], p['platlib']})))"])
        own = _cmd([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        if found.returncode != 0 or own.returncode != 0:
            return 1, f"cannot read the site-packages of {base}: {found.stderr.strip()}{own.stderr.strip()}"
        lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in json.loads(found.stdout))
        with open(os.path.join(own.stdout.strip(), "dsv4deploy-engine-base.pth"), "w", encoding="utf-8") as fh:
            fh.write(lines)
    # --isolated: pip's config files and PIP_* do not add sources; the engine comes from the spec's alone.
    args = [base, "-m", "pip", "--isolated", "--python", python, "install", "--no-input", "--disable-pip-version-check"]
    args += ["--index-url", record["index"]] if record.get("index") else ["--no-index"]
    args += ["--find-links", record["wheelhouse"]] if record.get("wheelhouse") else []
    # On a base, exactly the named wheels go into the venv, beside (not over) the base's copies: the base brings
    # every dependency, so a new sglang costs its own wheel, not a new torch.
    args += ["--no-deps", "--ignore-installed"] if record.get("base_python") else []
    pip = _cmd([*args, *record["requirements"]])
    if pip.returncode != 0:
        shutil.rmtree(tmp)
        return 3, pip.stdout + pip.stderr
    _fix_shebangs(tmp, venv)
    with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2, sort_keys=True)
    try:
        os.rename(tmp, venv)
    except OSError:
        if not complete(venv, record):  # another run built it meanwhile: use that one
            raise
        shutil.rmtree(tmp)
    return 0, pip.stdout


def _remove_dead_builds(parent: str, name: str) -> None:
    # A build left by a run that died: ours by its name, in the folder only the service user writes; one whose
    # process still runs (a second deploy at the same moment) is left alone.
    prefix = f".{name}.building-"
    for entry in os.listdir(parent):
        pid = entry[len(prefix):]
        if not entry.startswith(prefix) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, entry))
        except PermissionError:
            continue


def _fix_shebangs(tmp: str, venv: str) -> None:
    # pip wrote the temporary path into the console scripts' first line: the final one, as if built there.
    bindir = os.path.join(tmp, "bin")
    old, new = f"#!{tmp}/bin/".encode(), f"#!{venv}/bin/".encode()
    for name in os.listdir(bindir):
        path = os.path.join(bindir, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if data.startswith(old):
            with open(path, "wb") as fh:
                fh.write(new + data[len(old):])


def referenced(root: str) -> set:
    """The venvs the releases under `root` record (engine.json)."""
    out = set()
    releases = os.path.join(root, "releases")
    for name in os.listdir(releases) if os.path.isdir(releases) else []:
        venv = read_json(os.path.join(releases, name, ENGINE_FILE)).get("venv")
        if venv:
            out.add(venv)
    return out


def prune(root: str, keep: frozenset = frozenset()) -> list:
    """Remove the venvs we built under `root` that no release there records nor `keep` names; their paths."""
    parent = os.path.join(root, ENGINES_DIR)
    if not os.path.isdir(parent) or os.path.islink(parent):
        return []
    used = referenced(root) | keep
    removed = []
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if path in used or os.path.islink(path) or not os.path.isfile(os.path.join(path, MARKER)):
            continue
        shutil.rmtree(path)
        removed.append(path)
    return removed
