"""Root's other operations against the service user: verify, the verify timer's publish step, rollback, isolate,
stop and purge on the embedded host (the deployment's supervisord and the playbooks run as root; `nobody`, through
setpriv, is the service user and owns the verification's `metrics/`, what a service user owns under the install
root).

The paths the service user owns or can write are found, not listed: `find` run as nobody over everything root
touches (the install root, the key, node_exporter's folder). Each one whose folder the service user may also write
is swapped in turn for a link to a root-only canary file, a link to a root-only canary folder, or a FIFO; then the
operation runs (isolate, the dearest, with the first kind only). No canary is read, sent, written, chowned,
chmodded or deleted, and the operation either succeeds or refuses naming the path. A folder it could rename aside
and recreate there is none: that is asserted.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import _missing_tools
from tests.integration.simhost import SimHost, shared_base, sim_host_at
from tests.integration.simhost import verify_timer_args as timer_args

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the attacker runs as another user (setpriv)"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed (util-linux)"),
]
NOBODY = pwd.getpwnam("nobody")
SECRET = "canary-" + os.urandom(6).hex()
FAST = ["-e", json.dumps({"dsv4_gates_names": ["readiness", "smoke"]}), "-e", "readiness_deadline_s=30",
        "-e", "smoke_deadline_s=30"]
KINDS = ["link-to-file", "link-to-folder", "fifo"]
# Root's playbooks, each run after the swap (the publish step is the verify timer's root part: it runs on its own).
OPERATIONS = {"verify": ("verify.yml",), "rollback": ("rollback.yml",), "stop": ("stop.yml",),
              "isolate": ("isolate.yml", "-e", "dsv4_isolate_suite=smoke")}


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    """`argv` run as the service user (no groups, no capabilities)."""
    return subprocess.run(["setpriv", "--reuid=nobody", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                           "--inh-caps=-all", *argv], capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def host() -> Iterator[dict]:
    """A deployed embedded host with two releases and the verify timer, under a folder every user may enter;
    the canaries root's own beside it."""
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    with sim_host_at(shared_base("dsv4-hostile-ops")) as sim:
        base = sim.root
        releases = []
        for topk in ("1024", "512"):
            proc = sim.playbook("deploy.yml", *FAST, "-e", f"index_topk={topk}", "-e", "needle_required_tokens=1000")
            assert proc.returncode == 0, proc.stdout[-5000:]
            releases.append(sim.report()["release"])
        textfile = base / "node-exporter"
        textfile.mkdir(mode=0o755)
        proc = sim.playbook("verify_timer.yml", *timer_args(textfile))
        assert proc.returncode == 0, proc.stdout[-5000:]
        vt = sim.install_root / "verify-timer"
        name = json.loads((vt / "installed.json").read_text())["deployment"]
        # What the service user owns here: the verification's metrics/. (The key stays root's: here the service
        # user is root, and preflight refuses a key another user owns; the systemd tier's sglang owns its key.)
        key = Path(_key_file(sim))
        for path in (vt / "metrics", *(vt / "metrics").iterdir()):
            os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
        canary = base / "canary"
        canary.write_text(f"{SECRET}\n")
        canary.chmod(0o400)
        folder = base / "canary-folder"
        folder.mkdir(mode=0o700)
        (folder / "inside").write_text(f"{SECRET}\n")
        found = {"sim": sim, "releases": releases, "textfile": textfile, "vt": vt, "name": name, "key": key,
                 "canary": canary, "folder": folder}
        # Found once, before any swap: a swapped-in link to a root-only canary is no longer writable itself.
        found["writable"] = writable(found)
        found["swappable"] = [p for p in found["writable"] if p.parent in found["writable"]]
        yield found


def _key_file(sim: SimHost) -> str:
    import yaml

    return yaml.safe_load((sim.inventory / "group_vars" / "all" / "zz_paths.yml").read_text())["api_key"]["file"]


def writable(h: dict) -> list[Path]:
    """Every path root touches that the service user owns or can write, as the kernel says (find's access(2))."""
    roots = [h["sim"].install_root, h["key"], h["textfile"]]
    proc = as_nobody("find", *map(str, roots), "(", "-writable", "-o", "-user", "nobody", ")")
    return sorted(Path(line) for line in proc.stdout.split())


def canaries(h: dict) -> tuple:
    """Owner, mode, times and content of each canary: any read through a link changes atime only, so atime is
    left out (relatime); a read is caught by the content showing up anywhere."""
    out = []
    for path in (h["canary"], h["folder"], h["folder"] / "inside"):
        st = os.lstat(path)
        out.append((st.st_uid, st.st_gid, st.st_mode, st.st_mtime_ns, st.st_ctime_ns))
    out.append((h["canary"].read_text(), sorted(os.listdir(h["folder"])), (h["folder"] / "inside").read_text()))
    return tuple(out)


def swap(kind: str, path: Path, h: dict) -> None:
    """The service user replaces `path` (in a folder it may write)."""
    target = {"link-to-file": h["canary"], "link-to-folder": h["folder"]}.get(kind)
    plant = f"mkfifo {path}" if target is None else f"ln -s {target} {path}"
    done = as_nobody("sh", "-c", f"rm -rf {path} && {plant}")
    assert done.returncode == 0, done.stderr


def secret_anywhere(h: dict, *texts: str) -> list[str]:
    """Where the canary's content went: the run's output, any file under the install root or node_exporter's
    folder (published metrics, the servers' logs: what a request carried)."""
    found = [f"output {i}" for i, text in enumerate(texts) if SECRET in text]
    for top in (h["sim"].install_root, h["textfile"]):
        proc = subprocess.run(["grep", "-rlsF", "--devices=skip", SECRET, str(top)], capture_output=True,
                              text=True, check=False)
        found += proc.stdout.split()
    return found


@pytest.fixture
def h(host: dict) -> dict:
    return host


def test_what_the_service_user_can_write(h: dict) -> None:
    """The table's rows: the kernel's answer is what the docs say (docs/security.md), and of those only the
    metrics file lies in a folder the service user may write, so only it can be swapped; the folders cannot be
    renamed aside and recreated, nor the key replaced."""
    metrics = h["vt"] / "metrics"
    assert h["writable"] == sorted([metrics, metrics / f"dsv4deploy-{h['name']}.prom"])
    assert h["swappable"] == [metrics / f"dsv4deploy-{h['name']}.prom"]
    for path in (metrics, h["key"], h["vt"], h["sim"].install_root):
        assert as_nobody("mv", str(path), f"{path}.aside").returncode != 0, path
    assert as_nobody("ln", "-sf", str(h["canary"]), str(h["key"])).returncode != 0


def test_the_gates_read_no_key_through_a_link(h: dict) -> None:
    """The gates' own read of the key (a run whose readiness wait does not read it: smoke alone) refuses a link
    at the key's path, naming it, and sends nothing: the canary's content reaches no server and no output."""
    key = h["key"]
    kept = key.with_name(key.name + ".kept")
    before = canaries(h)
    key.rename(kept)
    try:
        key.symlink_to(h["canary"])
        proc = h["sim"].playbook("verify.yml", "-e", json.dumps({"dsv4_gates_names": ["smoke"]}))
    finally:
        key.unlink(missing_ok=True)
        kept.rename(key)
    said = " ".join(proc.stdout.split())
    assert proc.returncode != 0, said[-3000:]
    assert f"{key} is a symbolic link; a secret is read from the file itself" in said, said[-3000:]
    assert canaries(h) == before
    assert not secret_anywhere(h, proc.stdout, proc.stderr)


def publish_argv(h: dict) -> list[str]:
    """The publish program's command from root's supervisord file, without its `--every` loop."""
    conf = h["vt"] / "supervisor" / f"dsv4-verify-{h['name']}.conf"
    section = conf.read_text().split(f"[program:dsv4-verify-{h['name']}-publish]", 1)[1]
    argv = shlex.split(next(line for line in section.splitlines() if line.startswith("command="))[len("command="):])
    return argv[:argv.index("--every")]


def run_case(h: dict, operation: str, kind: str) -> None:
    before = canaries(h)
    outputs = []
    assert h["swappable"], "nothing to swap: the table would test nothing"
    for path in h["swappable"]:
        swap(kind, path, h)
        if operation == "publish":
            # The verify timer's root step, run once as its supervisord program runs it (the program logs a
            # refusal only when it differs from the last one).
            ran = subprocess.run(publish_argv(h), capture_output=True, text=True, timeout=30, check=False,
                                 cwd=h["vt"])
            outputs += [ran.stdout, ran.stderr]
            why = "is a FIFO, not a regular file" if kind == "fifo" else "is a symbolic link"
            assert ran.returncode == 1 and why in ran.stdout, (ran.stdout, ran.stderr)
            published = h["textfile"] / path.name
            assert not published.is_symlink() and os.lstat(published).st_uid == 0
        else:
            extra, target = [], None
            if operation == "rollback":  # to the release that is not serving, in turn
                first, second = h["releases"]
                target = first if h["sim"].active_release() == second else second
                extra = ["-e", f"dsv4_rollback_release={target}"]
            proc = h["sim"].playbook(*OPERATIONS[operation], *FAST, *extra)
            outputs += [proc.stdout, proc.stderr]
            assert proc.returncode == 0, proc.stdout[-4000:]
            assert target is None or h["sim"].active_release() == target
        assert canaries(h) == before, f"{operation}/{kind}: a canary changed after {path} was swapped"
        assert not secret_anywhere(h, *outputs), f"{operation}/{kind}: the canary's content was read"


# In this order: the stop last, on the host the others leave serving. The experiment (a combined server started
# and the original restored: the deploy's root steps again) is the dearest, so it runs once.
CASES = [*((operation, kind) for operation in ("publish", "verify", "rollback") for kind in KINDS),
         ("isolate", "link-to-file"), *(("stop", kind) for kind in KINDS)]


@pytest.mark.parametrize(("operation", "kind"), CASES, ids=[f"{o}-{k}" for o, k in CASES])
def test_an_operation_after_a_swap_touches_no_canary(h: dict, operation: str, kind: str) -> None:
    # The watch rewrites its metrics file; on this host it runs as root (the embedded service user), which
    # a real service user is not: stopped, so that the swaps are the service user's alone.
    h["sim"].supervisorctl("stop", f"dsv4-verify-{h['name']}")
    run_case(h, operation, kind)


def test_purge_removes_the_swapped_paths_without_following_them(h: dict) -> None:
    """Every kind at once (the purge can run once): the metrics file a link to the canary folder, beside it a
    link to the canary file and a FIFO; the purge unlinks them, follows none, and removes our files."""
    metrics = h["vt"] / "metrics"
    before = canaries(h)
    swap("link-to-folder", metrics / f"dsv4deploy-{h['name']}.prom", h)
    swap("link-to-file", metrics / "other.prom", h)
    swap("fifo", metrics / "pipe.prom", h)
    proc = h["sim"].playbook("stop.yml", "-e", "dsv4_stop_purge=true", *timer_args(h["textfile"]))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert canaries(h) == before
    assert not secret_anywhere(h, proc.stdout, proc.stderr)
    assert not h["vt"].exists() and not (h["sim"].install_root / "releases").exists()
    assert h["key"].exists()  # the operator's key file is not ours to purge
