"""Files written so that a reader sees the old content or the new, never a part (standard library only)."""

from __future__ import annotations

import json
import os
import tempfile


def _temp_with(path: str, data: str, mode: int, prefix: str, owner: tuple[int, int] | None = None) -> str:
    """A temporary file beside `path` holding `data` (flushed to disk) with `mode` (and `owner`, uid and gid);
    its path. Mode and owner are set on the open descriptor, before the data: a name swapped for a link in the
    meantime is never chmodded or chowned."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=prefix)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        if owner is not None:
            os.fchown(fh.fileno(), *owner)
        os.fchmod(fh.fileno(), mode)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return tmp


def write_atomic(path: str, data: str, mode: int = 0o644, prefix: str = ".tmp-",
                 owner: tuple[int, int] | None = None) -> None:
    """Replace `path` with `data` in one rename (a link at `path` is replaced, never followed)."""
    os.replace(_temp_with(path, data, mode, prefix, owner), path)


def write_new(path: str, data: str, mode: int = 0o644, prefix: str = ".tmp-") -> bool:
    """Create `path` holding `data`, atomically and exclusively; False when it exists already."""
    tmp = _temp_with(path, data, mode, prefix)
    try:
        os.link(tmp, path)  # exclusive like O_EXCL, but the file appears with its content
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def read_text(path: str) -> str:
    """The whole of a UTF-8 file."""
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def read_from(path: str, offset: int) -> str:
    """A log from byte `offset` (from its start when it is shorter now: rotated or truncated); '' when unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            fh.seek(offset if offset <= os.path.getsize(path) else 0)
            return fh.read()
    except OSError:
        return ""


def read_json(path: str) -> dict:
    """The JSON object in `path`; {} when it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}  # a foreign file that is JSON but not ours
