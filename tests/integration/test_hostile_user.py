"""Root against the service user: the host modules as Ansible runs them (AnsiballZ, -vvv) while the service user
(`nobody`, through setpriv) has swapped a path it can write for a link to a root-only canary, a FIFO, or a
renamed-and-recreated folder. No canary is read or sent, and each module refuses naming the path, its owner and
mode and the fix. One module run per case, no deploy (the servers are a stub)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.simhost import VENV_BIN
from tests.unit.gates.stubs import StubServer, always

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the attacker runs as another user (setpriv)"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed (util-linux)"),
]
REPO = Path(__file__).resolve().parents[2]
NOBODY = pwd.getpwnam("nobody")
SECRET = "canary-" + os.urandom(6).hex()


def as_nobody(*argv: str) -> None:
    """`argv` run as the service user (no groups, no capabilities); it must succeed: the attack is possible."""
    subprocess.run(["setpriv", "--reuid=nobody", f"--regid={NOBODY.pw_gid}", "--clear-groups", "--inh-caps=-all",
                    *argv], check=True, timeout=30)


def module(name: str, args: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_BIN / "ansible"), "localhost", "-vvv", "-c", "local", "-m", f"dsv4.deploy.{name}",
         "-a", json.dumps(args)], cwd=REPO, capture_output=True, text=True, timeout=180,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder every user may enter (pytest's own is root's 0700), removed after the test."""
    base = Path(tempfile.mkdtemp(prefix="dsv4-hostile-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A root-only canary file, and a folder the service user owns holding the key it is meant to have."""
    canary = tmp_path / "canary"
    canary.write_text(f"{SECRET}\nsecond line\n")
    canary.chmod(0o400)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "api_key").write_text("sk-the-real-key\n")
    for path in (theirs, theirs / "api_key"):
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    tmp_path.chmod(0o755)
    return {"canary": canary, "key": theirs / "api_key", "theirs": theirs, "before": _stat(canary)}


def _stat(path: Path) -> tuple:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, st.st_mode, st.st_mtime_ns, path.read_text()


def swap(kind: str, key: Path, canary: Path) -> None:
    """The service user replaces the key file it may replace."""
    as_nobody("rm", "-f", str(key))
    if kind == "link":
        as_nobody("ln", "-s", str(canary), str(key))
    elif kind == "fifo":
        as_nobody("mkfifo", str(key))
    elif kind == "folder-link":
        as_nobody("ln", "-s", str(canary.parent), str(key))


@pytest.mark.parametrize("kind", ["link", "fifo", "folder-link"])
def test_the_gates_key_read_refuses_what_the_service_user_swapped_in(place: dict, kind: str) -> None:
    swap(kind, place["key"], place["canary"])
    proc = module("dsv4_api_key", {"path": str(place["key"]), "owner": "nobody"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert SECRET not in out
    assert f"will not read the API key file: {place['key']}" in out, out[-2000:]
    assert _stat(place["canary"]) == place["before"]


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_the_config_gate_sends_no_canary_to_the_server(place: dict, kind: str) -> None:
    swap(kind, place["key"], place["canary"])
    server = StubServer({"GET /server_info": always((200, {"api_key": None}))})
    try:
        proc = module("dsv4_worker_check", {"mode": "config", "api_key_file": str(place["key"]),
                                            "checks": [{"name": "decode", "url": server.url}]})
    finally:
        server.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "will not read the API key file on this host" in out, out[-2000:]
    assert SECRET not in out and not any(SECRET in (h or "") for h in server.auth_headers)
    assert _stat(place["canary"]) == place["before"]


def test_a_key_of_two_lines_is_refused_without_being_shown(place: dict) -> None:
    as_nobody("sh", "-c", f"printf 'sk-one\\n{SECRET}\\n' > {place['key']}")
    proc = module("dsv4_api_key", {"path": str(place["key"]), "owner": "nobody"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "put the key alone on one line" in out and SECRET not in out, out[-2000:]


@pytest.mark.parametrize("layout", ["owned", "renamed-and-recreated", "link-to-theirs"])
def test_preflight_refuses_an_install_root_the_service_user_can_swap(tmp_path: Path, layout: str) -> None:
    parent = tmp_path / "var-lib-sglang"
    parent.mkdir()
    os.chown(parent, NOBODY.pw_uid, NOBODY.pw_gid)
    tmp_path.chmod(0o755)
    root = parent / "dsv4"
    checked = root
    if layout == "owned":
        as_nobody("mkdir", str(root))
    elif layout == "renamed-and-recreated":
        root.mkdir()  # root's own folder, in the service user's: it renames it aside and makes its own
        as_nobody("mv", str(root), str(parent / "aside"))
        as_nobody("mkdir", "-p", str(root / "current" / "supervisor"))
    else:
        (tmp_path / "opt").mkdir()
        checked = tmp_path / "opt" / "dsv4"
        checked.symlink_to(parent)
    proc = module("dsv4_access", {"host": "gpu1", "user": "nobody", "needs": [
        {"path": str(checked), "need": "search", "what": "install_root"}]})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert f"root will not trust it: {parent} is nobody:" in out and "the service user's" in out, out[-2000:]
    assert f"chown root:root {parent}" in out


def test_supervisord_is_not_run_over_a_root_the_service_user_renamed_and_recreated(tmp_path: Path) -> None:
    """The first finding: the service user renames the install root aside and recreates it with a program of no
    `user=`; the next ensure() or reload() (any deploy, stop or verify-timer run) would run it as root."""
    from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError
    from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import Supervisor

    parent = tmp_path / "srv"
    parent.mkdir()
    os.chown(parent, NOBODY.pw_uid, NOBODY.pw_gid)
    root = parent / "dsv4"
    root.mkdir()
    as_nobody("mv", str(root), str(parent / "aside"))
    as_nobody("mkdir", "-p", str(root / "current" / "supervisor"))
    canary = tmp_path / "ran-as-root"
    program = f"printf '[program:evil]\\ncommand=/bin/touch {canary}\\n'"
    as_nobody("sh", "-c", f"{program} > {root}/current/supervisor/evil.conf")
    sup = Supervisor(str(root), None)
    for step in (sup.ensure, sup.reload):
        with pytest.raises(ServiceError, match=f"refusing to run supervisord for {root}: {parent} is nobody:"):
            step()
    assert not canary.exists() and not (root / "supervisor").exists()
