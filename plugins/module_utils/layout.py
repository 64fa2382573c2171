"""What a host's install root holds, as every host module reads it (standard library only)."""

from __future__ import annotations

import glob
import os
import re

MANAGED_MARK = "Managed by dsv4deploy"
PREFIX = "serve-"
# install_root goes unquoted into supervisord.conf, which expands % and ends a value at " ;" or
# " #", and into unit files: the spec allows only these characters, and the modules check again (each
# may be called alone).
SAFE_ROOT = re.compile(r"/[A-Za-z0-9_.+@,=:/-]*\Z")
DRAIN_ORDER = {"router": 0, "decode": 1, "prefill": 2}


def root_problem(root: str) -> str:
    """Why `root` cannot be an install root, or ''."""
    if SAFE_ROOT.match(root):
        return ""
    return (f"install_root {root!r} has characters supervisord and unit files cannot take safely; use letters, "
            "digits and . _ - + @ , = : / only")


def kind_of(name: str) -> str:
    """router, decode or prefill (the combined server counts with prefill: it goes last)."""
    if name.endswith("router"):
        return "router"
    return "decode" if "-decode" in name else "prefill"


def release_services(root: str) -> list[str]:
    """Service names of the active release, from its serve scripts, in drain order."""
    base = os.path.join(root, "current", "bin")
    names = [os.path.basename(p)[len(PREFIX):-3] for p in glob.glob(os.path.join(base, f"{PREFIX}*.sh"))]
    return sorted(names, key=lambda n: (DRAIN_ORDER[kind_of(n)], n))


def select(names: list[str], only: str) -> list[str]:
    """`names` narrowed by kind: all, router, workers, decode, or prefill (prefill and the combined server)."""
    if only == "workers":
        return [n for n in names if kind_of(n) != "router"]
    if only != "all":
        return [n for n in names if kind_of(n) == only]
    return names
