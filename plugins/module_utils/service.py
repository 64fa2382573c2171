"""What the service managers' clients share: the error they raise, and a service's processes (standard
library only)."""

from __future__ import annotations

import os


class ServiceError(Exception):
    """The service manager refused or did not answer; the message says what and where."""


def started(status: dict) -> bool:
    """Running, or being started by supervisord (STARTING): either way not to be started again."""
    return status["running"] or status["state"] == "STARTING"


def children(pid: int) -> list[int]:
    """All descendants of pid (via /proc), so a server's workers count as ours too."""
    by_parent: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        by_parent.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
