"""Publish the verification's metrics file into node_exporter's textfile folder, as root, from the copy the
service user wrote (standard library only: root runs it with the system's Python, never the service user's).

The service user owns the folder its `.prom` file is in, so that name may be a FIFO (node_exporter would hang
on it), an endless file, or a link to any file root can read. The source is opened without following a link
and without blocking, checked on the open descriptor (a regular file of the service user's, at most
`MAX_BYTES`), read at most that much, and parsed as Prometheus text exposition holding only `dsv4deploy_*`
families. Only then is it written, atomically, as root's own 0644 file. Anything refused leaves the file
published before as it is, and says why in one line.

Run on a host as a script (the role installs it with its copy of files.py):
``python3 -E -s textfile_publish.py --source S --dest D --owner USER [--every SECONDS]``.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import stat
import sys
import time
from typing import TextIO

try:
    from ansible_collections.dsv4.deploy.plugins.module_utils.files import write_atomic
except ImportError:  # on a host, run as a script beside the role's copy of files.py
    from files import write_atomic  # type: ignore[no-redef]

# Far more than one verification writes (about 2 KiB); an endless file stops here.
MAX_BYTES = 1 << 20
MAX_LINE = 4096
# The first line of what we publish: install.yml and remove.yml tell our file from another deployment's by it.
HEADER = "# Published by dsv4deploy from {source}\n"

_NAME = r"dsv4deploy_[a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\["\\n])*"'
_VALUE = r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|Inf|NaN)"
_HELP = re.compile(rf"# HELP {_NAME} (?:[^\\]|\\[\\n])*\Z")
_TYPE = re.compile(rf"# TYPE {_NAME} (?:counter|gauge|histogram|summary|untyped)\Z")
# No timestamp: node_exporter's textfile collector refuses a file that has one.
_SAMPLE = re.compile(rf"{_NAME}(?:\{{(?:{_LABEL}(?:,{_LABEL})*,?)?\}})? {_VALUE}\Z")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


class Refused(Exception):
    """The source is not published; the message says why (never quoting more than a line number)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def read_source(path: str, owner_uid: int, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of `path`, read without following a link at its last part and without blocking: a regular file
    owned by `owner_uid`, at most `max_bytes`. Refused, naming what it is, otherwise."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last part is a symbolic link
            raise Refused(f"{path} is a symbolic link (only the file itself is published)") from None
        raise Refused(f"{path} cannot be opened: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{path} is {_kind(st.st_mode)}, not a regular file")
        if st.st_uid != owner_uid:
            raise Refused(f"{path} is owned by uid {st.st_uid}, not the service user's ({owner_uid})")
        if st.st_size > max_bytes:
            raise Refused(f"{path} is {st.st_size} bytes, more than {max_bytes}")
        data = os.read(fd, max_bytes + 1)
    except OSError as exc:
        raise Refused(f"{path} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Refused(f"{path} grew past {max_bytes} bytes while it was read")
    return data


def validate(data: bytes, source: str) -> str:
    """`data` as text when it is Prometheus text exposition of dsv4deploy_* families only: `# HELP` and
    `# TYPE` lines, samples without a timestamp, lines of at most MAX_LINE characters, a final line feed.
    Refused, naming the first bad line's number, otherwise."""
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise Refused(f"{source} is not UTF-8 text") from None
    if not text.endswith("\n"):
        raise Refused(f"{source} does not end with a line feed (a partial write)")
    samples = 0
    for number, line in enumerate(text[:-1].split("\n"), start=1):
        if len(line) > MAX_LINE:
            raise Refused(f"{source} line {number} is longer than {MAX_LINE} characters")
        if _CONTROL.search(line):
            raise Refused(f"{source} line {number} holds a control character")
        if line.startswith("#"):
            if not (_HELP.match(line) or _TYPE.match(line)):
                raise Refused(f"{source} line {number} is not a # HELP or # TYPE line of a dsv4deploy_ metric")
        elif line and not _SAMPLE.match(line):
            raise Refused(f"{source} line {number} is not a dsv4deploy_ sample (name{{labels}} value)")
        samples += bool(line) and not line.startswith("#")
    if samples == 0:
        raise Refused(f"{source} holds no dsv4deploy_ sample")
    return text


def _published(dest: str) -> str | None:
    """What `dest` holds now (None when it is missing, not a regular file or unreadable)."""
    try:
        fd = os.open(dest, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES + len(HEADER) + 4096:
            return None
        return os.read(fd, st.st_size + 1).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def publish(source: str, dest: str, owner_uid: int) -> str:
    """Copy `source` to `dest` when it passes read_source and validate; the line to log. Refused (dest left as
    it is) otherwise; OSError when dest cannot be written."""
    text = HEADER.format(source=source) + validate(read_source(source, owner_uid), source)
    if _published(dest) == text:
        return f"{dest} is up to date"
    # Root's file, 0644 on the descriptor (node_exporter runs as another user), replaced in one rename.
    write_atomic(dest, text, mode=0o644, prefix=f".{os.path.basename(dest)}.tmp-")
    return f"published {source} to {dest}"


def run_once(source: str, dest: str, owner_uid: int) -> tuple[int, str]:
    """One publish: (exit status, the line to log)."""
    try:
        return 0, publish(source, dest, owner_uid)
    except Refused as exc:
        return 1, f"refused: {exc}; {dest} is left as it was"
    except OSError as exc:
        return 1, f"cannot write {dest}: {exc}"


def _say(line: str, stream: TextIO | None = None) -> None:
    """One log line, flushed at once (supervisord and the journal show it as it happens)."""
    stream = stream or sys.stdout
    stream.write(f"dsv4deploy publish: {line}\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    """Publish once, or every `--every` seconds forever (a supervisord program), logging each change."""
    parser = argparse.ArgumentParser(prog="textfile_publish.py", description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="the service user's .prom file")
    parser.add_argument("--dest", required=True, help="the file to write in node_exporter's textfile folder")
    parser.add_argument("--owner", required=True, help="the service user, who must own the source")
    parser.add_argument("--every", type=float, metavar="SECONDS", help="publish every SECONDS, forever")
    args = parser.parse_args(argv)
    try:
        owner_uid = pwd.getpwnam(args.owner).pw_uid
    except KeyError:
        _say(f"no user {args.owner!r} on this host", sys.stderr)
        return 2
    last = ""
    while True:
        status, line = run_once(args.source, args.dest, owner_uid)
        if args.every is None:
            _say(line)
            return status
        if line != last and not line.endswith("is up to date"):
            _say(line)
        last = line
        time.sleep(max(1.0, args.every))


if __name__ == "__main__":
    raise SystemExit(main())
