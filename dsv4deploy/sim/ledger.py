"""The GPU ledger of one simulated host: which live servers hold how much memory on which GPU.

One JSON file per server process in ``<state_dir>/gpus/``. An entry counts while its process is
alive (pid and start time checked, so a reused pid does not count) or, after a clean exit with
``slow_release``, until its ``release_at`` time. Readers drop entries that no longer count.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Holding:
    """Memory one process holds on each of its GPUs."""

    pid: int
    start_ticks: int
    gpus: list[int]
    mib_per_gpu: int
    process_name: str
    release_at: float | None = None


def process_start_ticks(pid: int) -> int:
    """Start time of ``pid`` in clock ticks since boot (0 if unknown or gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def _alive(h: Holding) -> bool:
    try:
        os.kill(h.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    ticks = process_start_ticks(h.pid)
    if ticks and h.start_ticks and ticks != h.start_ticks:
        return False  # pid reused by another process
    try:  # a zombie no longer holds GPU memory
        state = Path(f"/proc/{h.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


class Ledger:
    """Read and update the ledger under ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir) / "gpus"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the ledger lock (check-then-register must be atomic between servers)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _path(self, pid: int) -> Path:
        return self.dir / f"{pid}.json"

    def write(self, holding: Holding) -> None:
        """Record (or update) a holding atomically."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{holding.pid}.tmp"
        tmp.write_text(json.dumps(asdict(holding)))
        os.replace(tmp, self._path(holding.pid))

    def remove(self, pid: int) -> None:
        """Forget a holding."""
        with contextlib.suppress(FileNotFoundError):
            self._path(pid).unlink()

    def holdings(self, now: float | None = None) -> list[Holding]:
        """Holdings that still count; stale files are removed."""
        now = time.time() if now is None else now
        out: list[Holding] = []
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.json")):
            try:
                h = Holding(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if _alive(h) or (h.release_at is not None and now < h.release_at):
                out.append(h)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return out

    def used_mib(self, gpu_count: int, exclude_pid: int | None = None) -> list[int]:
        """MiB held on each GPU index by counted holdings."""
        used = [0] * gpu_count
        for h in self.holdings():
            if h.pid == exclude_pid:
                continue
            for g in h.gpus:
                if 0 <= g < gpu_count:
                    used[g] += h.mib_per_gpu
        return used
