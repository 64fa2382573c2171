"""What a host's install root holds, as every host module reads it (standard library only)."""

from __future__ import annotations

import glob
import json
import os
import re

MANAGED_MARK = "Managed by dsv4deploy"
PREFIX = "serve-"
# install_root goes unquoted into supervisord.conf, which expands % and ends a value at " ;" or
# " #", and into unit files: the spec allows only these characters, and the modules check again (each
# may be called alone).
SAFE_ROOT = re.compile(r"/[A-Za-z0-9_.+@,=:/-]*\Z")
DRAIN_ORDER = {"router": 0, "decode": 1, "prefill": 2}
# The release's record of its services (dsv4deploy.plan.release_record): a recorded role's kind. The combined
# server stops with, and is selected as, the prefills.
SERVICES_FILE = "services.json"
# blue_green's record of a previous release kept warm (dsv4_keep_record): every run settles it first.
KEEP_RECORD = "blue_green.json"
# blue_green_hosts' record of the old host set kept warm (dsv4_keep_record, on the router's host).
KEEP_HOSTS_RECORD = "blue_green_hosts.json"
# The record a roll keeps on every host while it runs (dsv4deploy/rollout/rolling_record.py); left behind, a roll died.
ROLL_RECORD = "rolling.json"
KIND_OF_ROLE = {"router": "router", "decode": "decode", "prefill": "prefill", "combined": "prefill"}


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


def recorded_kinds(root: str) -> dict[str, str]:
    """Each service's kind as the active release records it (its services.json: name and role); {} for a
    release from before that record, or a record that cannot be read."""
    try:
        with open(os.path.join(root, "current", SERVICES_FILE), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) and s.get("role") in KIND_OF_ROLE for s in services):
        return {}
    return {s["name"]: KIND_OF_ROLE[s["role"]] for s in services}


def release_services(root: str) -> list[str]:
    """Service names of the active release in drain order: its record's (services.json), else its serve
    scripts' (a release from before the record, kinds told by the names)."""
    kinds = recorded_kinds(root)
    if kinds:
        return sorted(kinds, key=lambda n: (DRAIN_ORDER[kinds[n]], n))
    base = os.path.join(root, "current", "bin")
    names = [os.path.basename(p)[len(PREFIX):-3] for p in glob.glob(os.path.join(base, f"{PREFIX}*.sh"))]
    return sorted(names, key=lambda n: (DRAIN_ORDER[kind_of(n)], n))


def select(names: list[str], only: str, kinds: dict | None = None) -> list[str]:
    """`names` narrowed by kind: all, router, workers, decode, or prefill (prefill and the combined server).
    A name's kind is the release's record's (`kinds`, from recorded_kinds), else told by the name."""
    kinds = kinds or {}

    def kind(name: str) -> str:
        return kinds.get(name) or kind_of(name)

    if only == "workers":
        return [n for n in names if kind(n) != "router"]
    if only != "all":
        return [n for n in names if kind(n) == only]
    return names


def chosen(root: str, names: list[str] | None, only: str) -> list[str]:
    """The services a module acts on: `names` (default the active release's, in drain order) narrowed by
    `only`, with the kinds the release records."""
    return select(release_services(root) if names is None else names, only, recorded_kinds(root))
