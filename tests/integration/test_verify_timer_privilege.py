"""Continuous verification gives the service user no way to root, and its removal deletes
nothing the service user chose. On the embedded host (the deployment's supervisord runs as root), after a
real install: the attacks of the security review, run as a real unprivileged user (`setpriv` to `nobody`),
who is given what the service user owns (metrics/); then a forged watch.json and planted symlinks, and the
removal, as stop.yml's purge runs it."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import _missing_tools
from tests.integration.simhost import SimHost, shared_base, sim_host_at
from tests.integration.simhost import verify_timer_args as timer_args

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the attacks run as another user (setpriv)"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed (util-linux)"),
]
FAST = ["-e", json.dumps({"dsv4_gates_names": ["readiness", "smoke"]}), "-e", "readiness_deadline_s=30",
        "-e", "smoke_deadline_s=30"]
VENV_PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"


@pytest.fixture(scope="module")
def host() -> Iterator[SimHost]:
    """An embedded host under a folder every user may enter (pytest's own is root's 0700), deployed."""
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    with sim_host_at(shared_base("dsv4-priv")) as sim:
        proc = sim.playbook("deploy.yml", *FAST)
        assert proc.returncode == 0, proc.stdout[-5000:]
        yield sim


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    """`argv` run as the unprivileged user nobody (no groups, no capabilities)."""
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all",
                           *argv], capture_output=True, text=True, timeout=30, check=False)


def wait_for(check: Callable[[], Any], deadline_s: float, what: str) -> Any:
    """The first true value `check` returns within `deadline_s`."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {deadline_s} s")


def test_the_service_user_cannot_reach_root_or_node_exporters_folder(host: SimHost) -> None:
    textfile_dir = host.root / "node-exporter"
    textfile_dir.mkdir(mode=0o755)
    other = textfile_dir / "node.prom"
    other.write_text("node_custom 1\n")
    proc = host.playbook("verify_timer.yml", *timer_args(textfile_dir))
    assert proc.returncode == 0, proc.stdout[-5000:]
    vt = host.install_root / "verify-timer"
    name = json.loads((vt / "installed.json").read_text())["deployment"]
    # node_exporter's folder keeps its owner and mode; our file in it is root's own copy, never a link.
    assert (textfile_dir.stat().st_uid, textfile_dir.stat().st_mode & 0o777) == (0, 0o755)
    link = textfile_dir / f"dsv4deploy-{name}.prom"
    published = wait_for(lambda: link.exists() and link.read_text(), 60, f"{link} published")
    st = os.lstat(link)
    assert stat.S_ISREG(st.st_mode) and (st.st_uid, st.st_mode & 0o777) == (0, 0o644), st
    assert published.startswith(f"# Published by dsv4deploy from {vt / 'metrics' / link.name}\n")
    for path in (vt, vt / "supervisor", vt / "publish", vt / "publish" / "textfile_publish.py",
                 vt / "publish" / "files.py", vt / "watch.json", vt / "installed.json"):
        assert path.stat().st_uid == 0, path
    # nobody as the service user: it owns its metrics folder, and that only.
    os.chown(vt / "metrics", 65534, 65534)

    # Item 1: rename supervisord's folder away and put one with a [program:x] without user= in its place.
    assert as_nobody("mv", str(vt / "supervisor"), str(vt / "away")).returncode != 0
    assert as_nobody("sh", "-c", f"echo '[program:x]' > {vt}/supervisor/x.conf").returncode != 0
    assert sorted(p.name for p in (vt / "supervisor").iterdir()) == [f"dsv4-verify-{name}.conf"]
    # Item 3's source: the settings and root's record are not the service user's to rewrite.
    for path in (vt / "watch.json", vt / "installed.json"):
        assert as_nobody("sh", "-c", f"echo '{{}}' > {path}").returncode != 0
    # Item 2: node_exporter's folder stays closed: no file of its own, no replacing another collector's.
    assert as_nobody("sh", "-c", f"echo evil 1 > {textfile_dir}/evil.prom").returncode != 0
    assert as_nobody("rm", "-f", str(other)).returncode != 0
    # Nor root's publish step (its program file, its code) that copies the metrics into node_exporter's folder.
    assert as_nobody("sh", "-c", f"echo 'import os' > {vt}/publish/files.py").returncode != 0
    # In its own folder it may write (its metrics), and may plant a FIFO or a link; root's publish step refuses
    # either without blocking and leaves the published file as it was. (The verification is stopped first so
    # that it does not replace them: a service user would not run it.)
    host.supervisorctl("stop", f"dsv4-verify-{name}")
    log = host.install_root / "logs" / f"dsv4-verify-{name}-publish.log"
    victim = host.root / "victim.txt"
    victim.write_text("dsv4deploy_root_secret 42\n")  # root's alone, and it would even parse
    victim.chmod(0o600)
    metrics = vt / "metrics" / link.name
    for plant, why in ((f"mkfifo {metrics}", "is a FIFO, not a regular file"),
                       (f"ln -s {victim} {metrics}", "is a symbolic link")):
        assert as_nobody("sh", "-c", f"rm -f {metrics}; {plant}").returncode == 0
        wait_for(lambda why=why: why in log.read_text(), 30, f"the publish step's refusal in {log}")
        assert link.read_text() == published and not link.is_symlink()
        assert "RUNNING" in host.supervisorctl("status", f"dsv4-verify-{name}-publish")  # did not hang or die

    proc = host.playbook("verify_timer.yml", *timer_args(textfile_dir), "-e", "dsv4_verify_timer_state=absent")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert victim.read_text() == "dsv4deploy_root_secret 42\n"
    assert not vt.exists() and not link.exists()
    assert sorted(p.name for p in textfile_dir.iterdir()) == ["node.prom"] and other.read_text() == "node_custom 1\n"


def test_another_install_roots_verification_of_the_same_name_is_neither_overwritten_nor_removed(
        host: SimHost) -> None:
    """/opt/dsv4deploy and /srv/dsv4deploy both made dsv4-verify-dsv4deploy; one overwrote and
    removed the other's. Here the other deployment (same derived name, another install root) linked its file, or
    published it."""
    textfile_dir = host.root / "shared-textfile"
    textfile_dir.mkdir(mode=0o755)
    name = "install"  # the name derived from this host's install root (.../install), as the server units derive it
    theirs = textfile_dir / f"dsv4deploy-{name}.prom"
    source = "/srv/install/verify-timer/metrics/" + theirs.name
    # Its older install's link, then the file its publish step writes (root's, naming its own metrics file).
    for kind in ("link", "published"):
        theirs.unlink(missing_ok=True)
        if kind == "link":
            theirs.symlink_to(source)
        else:
            theirs.write_text(f"# Published by dsv4deploy from {source}\ndsv4deploy_x 1\n")
        for state in ("present", "absent"):
            proc = host.playbook("verify_timer.yml", *timer_args(textfile_dir),
                                 "-e", f"dsv4_verify_timer_state={state}")
            if state == "present":
                assert proc.returncode != 0
                out = " ".join(proc.stdout.split())
                assert f"{theirs} belongs to another deployment on this host" in out, out[-3000:]
                assert "set deployment_name to a name of this deployment's own" in out
                assert not (host.install_root / "verify-timer").exists()
            else:
                assert proc.returncode == 0, proc.stdout[-5000:]
            if kind == "link":
                assert os.readlink(theirs) == source
            else:
                assert theirs.read_text().startswith(f"# Published by dsv4deploy from {source}\n")


def test_a_python_without_the_gates_dependencies_is_refused_before_anything_is_written(host: SimHost) -> None:
    """The system Python has neither dsv4deploy nor scipy: the timer would fail at every tick, so it is not
    installed, and the error names the host, the setting and the fix."""
    textfile_dir = host.root / "textfile-nopython"
    textfile_dir.mkdir(mode=0o755)
    proc = host.playbook("verify_timer.yml", *timer_args(textfile_dir),
                         "-e", "dsv4_verify_timer_python=/usr/bin/python3")
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert 'host local: dsv4_verify_timer_python "/usr/bin/python3" cannot run the verification' in out, out[-3000:]
    assert "ModuleNotFoundError" in out and "pip install dsv4deploy" in out
    assert not (host.install_root / "verify-timer").exists() and list(textfile_dir.iterdir()) == []


def test_a_python_or_textfile_folder_another_user_can_change_is_refused_before_it_runs(host: SimHost) -> None:
    """The verification's Python in a folder the service user owns (a venv it can write), or node_exporter's
    folder inside one: refused by the ownership walk, naming the folder, before the Python runs at all."""
    theirs = host.root / "theirs"
    theirs.mkdir(mode=0o755)
    canary = host.root / "ran-as-root"
    python = theirs / "python"
    python.write_text(f"#!/bin/sh\ntouch {canary}\nexec {VENV_PYTHON} \"$@\"\n")
    python.chmod(0o755)
    (theirs / "textfile").mkdir(mode=0o755)
    nobody = pwd.getpwnam("nobody")
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    for extra in ([f"dsv4_verify_timer_python={python}"], [f"dsv4_verify_timer_textfile_dir={theirs / 'textfile'}"]):
        args = [*timer_args(host.root / "unused")] + [a for e in extra for a in ("-e", e)]
        proc = host.playbook("verify_timer.yml", *args)
        out = " ".join(proc.stdout.split())
        assert proc.returncode != 0
        assert f"root will not trust it: {theirs} is nobody:" in out and f"chown root:root {theirs}" in out, out[-3000:]
        assert not canary.exists() and not (host.install_root / "verify-timer").exists()


def test_a_forged_watch_json_makes_the_purge_delete_nothing_outside(host: SimHost) -> None:
    """Item 3, as the review saw it: "deployment": "/../../keep/important", then stop -e dsv4_stop_purge=true."""
    textfile_dir = host.root / "textfile"
    # What the review deleted: <textfile_dir>/dsv4deploy-/../../keep/important.prom, a folder outside, once the
    # service user (who owned the textfile directory then) made the dsv4deploy- folder the path climbs out of.
    keep = host.root / "keep" / "important.prom"
    keep.mkdir(parents=True)
    (keep / "data.txt").write_text("precious\n")
    proc = host.playbook("verify_timer.yml", *timer_args(textfile_dir))
    assert proc.returncode == 0, proc.stdout[-5000:]
    vt = host.install_root / "verify-timer"
    # As an older install left it: the service user owned the folder and could write watch.json.
    config = json.loads((vt / "watch.json").read_text())
    (vt / "watch.json").write_text(json.dumps({**config, "deployment": "/../../keep/important",
                                               "textfile_dir": str(textfile_dir)}))
    (textfile_dir / "dsv4deploy-").mkdir()
    # A planted link in place of our record: removal must not trust what it points at.
    (vt / "installed.json").unlink()
    forged = host.root / "forged.json"
    forged.write_text(json.dumps({"deployment": "../../keep", "textfile_dir": "/", "textfile_dir_created": True}))
    (vt / "installed.json").symlink_to(forged)
    proc = host.playbook("stop.yml", "-e", "dsv4_stop_purge=true", *timer_args(textfile_dir))
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert (keep / "data.txt").read_text() == "precious\n"
    assert not vt.exists() and textfile_dir.is_dir()
    # Our link went; the planted folder is not ours to remove (the textfile directory was created by us, but
    # our record was replaced, so nothing says so).
    assert [p.name for p in textfile_dir.iterdir()] == ["dsv4deploy-"]
    assert forged.exists()

