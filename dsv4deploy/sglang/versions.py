"""What we know about each sglang release the tool can render for.

Only facts that validation needs live here; the per-version flag spelling lives in
`dsv4deploy.sglang.flags`. A version missing from this table is refused: we never guess flags.
"""

from __future__ import annotations

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


def release(version: str) -> SglangRelease:
    """The facts for `version`; KeyError when we have no flag table for it."""
    return RELEASES[version]


def has_ready_endpoint(version: str | None) -> bool:
    """Whether sglang `version` serves GET /ready (unknown or None: no)."""
    return version in RELEASES and RELEASES[version].ready_endpoint
