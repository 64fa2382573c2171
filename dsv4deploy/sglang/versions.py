"""What we know about each sglang release the tool can render for.

Only facts that validation needs live here; the per-version flag spelling lives in
`dsv4deploy.sglang.flags`. A version without a table of its own uses the nearest known table below it in
the same minor series (0.5.24 and 0.5.23.post1: 0.5.23's), and the plan says so; one below the oldest
table, or of another minor series, is refused: we never guess across such a gap. Preflight then runs the
host's own sglang parser over the rendered command lines where the host has one (dsv4_host_parser).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class SglangRelease:
    """Facts about one sglang release."""

    version: str
    # Values of index_topk the DeepSeek-V4 attention backend accepts; None = not restricted.
    index_topk_allowed: tuple[int, ...] | None
    # `server_args=ServerArgs(...)` (repr) up to 0.5.18, `server_args={...}` (dict) from 0.5.19.
    log_format: str
    # GET /ready (200 only when up) exists from 0.5.23; /health is 503 until warm-up in all.
    ready_endpoint: bool = False


RELEASES: dict[str, SglangRelease] = {
    "0.5.12": SglangRelease("0.5.12", (512, 1024), "repr"),
    "0.5.18": SglangRelease("0.5.18", (512, 1024), "repr"),
    "0.5.23": SglangRelease("0.5.23", (512, 1024), "dict", ready_endpoint=True),
}

DEFAULT_VERSION = "0.5.23"


def known_versions() -> list[str]:
    """Versions with a flag table, oldest first."""
    return sorted(RELEASES, key=lambda v: tuple(int(p) for p in v.split(".")))


# 0.5.23, 0.5.23.post1, 0.5.24rc2, v0.5.24: major.minor.patch and any suffix.
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:[.+-]?(?:post|rc|dev|a|b)?\d*)*\Z")


def table_version(version: str | None) -> str | None:
    """The known release whose table describes `version`: itself, else the nearest known one below it in
    its minor series (a patch or post release); None when there is none (older, or another series)."""
    if version in RELEASES:
        return version
    parsed = _VERSION.match(str(version or "").strip())
    if not parsed:
        return None
    major, minor, patch = (int(p) for p in parsed.groups())
    below = [v for v in known_versions() if tuple(map(int, v.split(".")))[:2] == (major, minor)
             and tuple(map(int, v.split(".")))[2] <= patch]
    return below[-1] if below else None


def is_supported(version: str | None) -> bool:
    """Whether `version` has a table, its own or the nearest one's."""
    return table_version(version) is not None


def release(version: str) -> SglangRelease:
    """The facts for `version` (the nearest known table's for a patch release); KeyError when there is none."""
    known = table_version(version)
    if known is None:
        raise KeyError(version)
    return RELEASES[known]


def has_ready_endpoint(version: str | None) -> bool:
    """Whether sglang `version` serves GET /ready (unknown or None: no)."""
    known = table_version(version)
    return known is not None and RELEASES[known].ready_endpoint
