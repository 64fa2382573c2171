"""Root publishes the verification's metrics into node_exporter's folder only from a plain, bounded file of the
service user's that parses as dsv4deploy exposition; anything else leaves the published file as it was."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import textfile_publish as tp

MODULE_UTILS = Path(tp.__file__).parent
# What dsv4deploy.watch writes (prometheus_client's write_to_textfile), abridged.
GOOD = ('# HELP dsv4deploy_gate_passed 1 when the light probe passed in the last verification\n'
        '# TYPE dsv4deploy_gate_passed gauge\n'
        'dsv4deploy_gate_passed{deployment="prod",gate="canary_needle"} 1.0\n'
        'dsv4deploy_gate_passed{deployment="prod",gate="tool_calls"} 0.0\n'
        '# HELP dsv4deploy_release_info The release serving at the last verification\n'
        '# TYPE dsv4deploy_release_info gauge\n'
        'dsv4deploy_release_info{deployment="prod",release="r-2026 \\"a\\\\b\\""} 1.0\n'
        'dsv4deploy_last_verification_timestamp_seconds{deployment="prod"} 1.7652e+09\n'
        'dsv4deploy_corruption_rate{deployment="prod"} NaN\n')
ME = os.geteuid()


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    """The service user's metrics folder with a good file, and node_exporter's folder with the published copy."""
    (tmp_path / "metrics").mkdir()
    (tmp_path / "textfile").mkdir()
    source, dest = tmp_path / "metrics" / "dsv4deploy-prod.prom", tmp_path / "textfile" / "dsv4deploy-prod.prom"
    source.write_text(GOOD)
    assert tp.run_once(str(source), str(dest), ME)[0] == 0
    return source, dest


def _refused(source: Path, dest: Path, before: str) -> str:
    status, line = tp.run_once(str(source), str(dest), ME)
    assert status == 1 and line.startswith("refused: ") and line.endswith(f"{dest} is left as it was"), line
    assert dest.read_text() == before and not dest.is_symlink()
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]  # no temp file left either
    return line


def test_a_good_file_is_published_as_a_regular_0644_file_of_the_publisher_with_our_header(
        paths: tuple[Path, Path]) -> None:
    source, dest = paths
    st = os.lstat(dest)
    assert (st.st_mode & 0o777, st.st_uid, dest.is_symlink()) == (0o644, ME, False)
    assert dest.read_text() == f"# Published by dsv4deploy from {source}\n" + GOOD
    # Unchanged content is not written again; new content is.
    assert tp.run_once(str(source), str(dest), ME) == (0, f"{dest} is up to date")
    source.write_text(GOOD.replace("} 0.0", "} 1.0"))
    assert tp.run_once(str(source), str(dest), ME) == (0, f"published {source} to {dest}")
    assert "tool_calls\"} 1.0" in dest.read_text()


def test_a_fifo_is_refused_without_blocking(paths: tuple[Path, Path]) -> None:
    source, dest = paths
    before = dest.read_text()
    source.unlink()
    os.mkfifo(source)  # no writer: a blocking open would wait forever
    assert "is a FIFO, not a regular file" in _refused(source, dest, before)


def test_a_link_to_a_root_only_file_is_refused_and_not_read(paths: tuple[Path, Path], tmp_path: Path) -> None:
    source, dest = paths
    before = dest.read_text()
    secret = tmp_path / "shadow"
    secret.write_text("dsv4deploy_secret 42\n")  # would even parse
    secret.chmod(0o600)
    source.unlink()
    source.symlink_to(secret)
    assert "is a symbolic link" in _refused(source, dest, before)
    assert "42" not in dest.read_text()


@pytest.mark.parametrize("kind", ["folder", "socket", "device", "missing"])
def test_what_is_not_a_regular_file_is_refused(paths: tuple[Path, Path], kind: str) -> None:
    source, dest = paths
    before = dest.read_text()
    source.unlink()
    if kind == "folder":
        source.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(source))
        sock.close()
    elif kind == "device":
        try:
            os.mknod(source, 0o600 | 0o020000, os.makedev(1, 5))  # a character device: /dev/zero's numbers
        except PermissionError:
            pytest.skip("creating a device node needs CAP_MKNOD")
    expected = {"folder": "is a folder", "socket": "cannot be opened: No such device or address",
                "device": "is a character device", "missing": "cannot be opened: No such file or directory"}[kind]
    assert expected in _refused(source, dest, before)


def test_an_oversize_file_is_refused(paths: tuple[Path, Path]) -> None:
    source, dest = paths
    before = dest.read_text()
    with source.open("a") as fh:
        fh.write(('dsv4deploy_x{a="' + "y" * 1000 + '"} 1\n') * (tp.MAX_BYTES // 1000))
    assert f"more than {tp.MAX_BYTES}" in _refused(source, dest, before)


@pytest.mark.skipif(ME != 0, reason="needs root: the file belongs to another user (nobody)")
def test_a_file_of_another_owner_is_refused(paths: tuple[Path, Path]) -> None:
    source, dest = paths
    before = dest.read_text()
    os.chown(source, pwd.getpwnam("nobody").pw_uid, -1)
    assert "is owned by uid 65534, not the service user's (0)" in _refused(source, dest, before)


@pytest.mark.parametrize(("content", "why"), [
    ("node_cpu_seconds_total 1\n", "line 1 is not a dsv4deploy_ sample"),
    ("# HELP node_load1 load\ndsv4deploy_x 1\n", "line 1 is not a # HELP or # TYPE line of a dsv4deploy_"),
    ("dsv4deploy_x 1\n# a comment\n", "line 2 is not a # HELP or # TYPE line"),
    ("dsv4deploy_x 1 1765200000000\n", "line 1 is not a dsv4deploy_ sample"),  # node_exporter refuses timestamps
    ("dsv4deploy_x 1_000\n", "line 1 is not a dsv4deploy_ sample"),
    ('dsv4deploy_x{a="b} 1\n', "line 1 is not a dsv4deploy_ sample"),
    ("dsv4deploy_x 1", "does not end with a line feed"),
    ("dsv4deploy_x 1\ndsv4deploy_y\x00 1\n", "line 2 holds a control character"),
    ("\n# TYPE dsv4deploy_x gauge\n", "holds no dsv4deploy_ sample"),
    ('dsv4deploy_x{a="' + "y" * 5000 + '"} 1\n', "line 1 is longer than 4096 characters"),
])
def test_what_is_not_dsv4deploy_exposition_is_refused(paths: tuple[Path, Path], content: str, why: str) -> None:
    source, dest = paths
    before = dest.read_text()
    source.write_text(content)
    assert why in _refused(source, dest, before)


def test_invalid_utf8_is_refused(paths: tuple[Path, Path]) -> None:
    source, dest = paths
    before = dest.read_text()
    source.write_bytes(b'dsv4deploy_x{a="\xff"} 1\n')
    assert "is not UTF-8 text" in _refused(source, dest, before)


def test_the_host_copy_runs_with_the_system_python_alone_and_returns_on_a_fifo(tmp_path: Path) -> None:
    """As the role installs it: the two files in a folder of their own, run by a Python given no environment and
    no user site; a FIFO at the source returns at once, refused, the published file unchanged."""
    host = tmp_path / "publish"
    host.mkdir()
    for name in ("files.py", "textfile_publish.py"):
        shutil.copy(MODULE_UTILS / name, host / name)
    (tmp_path / "metrics").mkdir()
    source, dest = tmp_path / "metrics" / "dsv4deploy-prod.prom", tmp_path / "dsv4deploy-prod.prom"
    source.write_text(GOOD)
    argv = [sys.executable, "-E", "-s", "-B", str(host / "textfile_publish.py"), "--source", str(source),
            "--dest", str(dest), "--owner", pwd.getpwuid(ME).pw_name]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, cwd="/", env={})
    assert done.returncode == 0 and done.stdout == f"dsv4deploy publish: published {source} to {dest}\n", done
    before = dest.read_text()
    source.unlink()
    os.mkfifo(source)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, cwd="/", env={})
    assert done.returncode == 1 and "is a FIFO, not a regular file" in done.stdout, done
    assert dest.read_text() == before and sorted(p.name for p in host.iterdir()) == ["files.py", "textfile_publish.py"]
