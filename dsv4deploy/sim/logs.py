"""sglang-shaped log lines, flushed one by one (they end up in journald or supervisor logs)."""

from __future__ import annotations

import sys
import time
from typing import Any

from .flags import logs_server_args_as_dict


class Log:
    """Writes ``[YYYY-mm-dd HH:MM:SS] message`` lines to stderr like sglang's logging setup."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr

    def line(self, message: str, prefix: str = "") -> None:
        """One log line; ``prefix`` such as ``TP0`` goes after the time like sglang's ranks."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        tag = f" {prefix}" if prefix else ""
        try:
            self.stream.write(f"[{stamp}{tag}] {message}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def raw(self, text: str) -> None:
        """Text as is (tracebacks, uvicorn lines)."""
        try:
            self.stream.write(text if text.endswith("\n") else text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass


def server_args_line(args: dict[str, Any], version: str) -> str:
    """``server_args=ServerArgs(a=1, ...)`` up to 0.5.18, ``server_args={'a': 1, ...}`` from 0.5.19."""
    if logs_server_args_as_dict(version):
        return f"server_args={args!r}"
    inner = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return f"server_args=ServerArgs({inner})"


def traceback_text(frames: list[tuple[str, int, str, str]], exc_line: str) -> str:
    """A Python traceback in the usual layout, for simulated crashes."""
    out = ["Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        out.append(f'  File "{path}", line {lineno}, in {func}')
        out.append(f"    {code}")
    out.append(exc_line)
    return "\n".join(out)
