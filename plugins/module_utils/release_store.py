"""The release store under a host's install root: releases/, their manifests, the C(current) pointer
and state.json, as the host modules read and record them (standard library only)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

from ansible_collections.dsv4.deploy.plugins.module_utils import engines
from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_json, write_atomic

MANIFEST = "manifest.json"
STATE_FILE = "state.json"
# The ownership marker (module_utils.ownership): what was there before the first install, and what dsv4deploy made.
OWNER_MARKER = ".dsv4deploy-owner.json"


# A release id names a folder under releases/: one plain path component, never '.' or '..'.
RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
# Where a release may hold files (the layout render writes): nothing else, nothing outside.
RELEASE_FILE = re.compile(r"(bin|units|supervisor)/[A-Za-z0-9_.@-]+\Z|(spec|services|engine|manifest)\.json\Z")


def sha256(data: bytes) -> str:
    """The hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def hash_lines(hashes: dict) -> str:
    """content_hash as dsv4deploy.plan.render computes it: sha256 over sorted `sha256  path` lines."""
    lines = "".join(f"{digest}  {path}\n" for path, digest in sorted(hashes.items()))
    return sha256(lines.encode("utf-8"))


def manifest_problem(files_hashes: dict, manifest: dict) -> str | None:
    """Why `files_hashes` (path -> sha256, manifest excluded) do not match `manifest`, or None."""
    listed = manifest.get("files") or {}
    if sorted(listed) != sorted(files_hashes):
        extra = sorted(set(files_hashes) - set(listed))
        missing = sorted(set(listed) - set(files_hashes))
        return f"files not in the manifest: {extra}; files missing: {missing}"
    changed = sorted(p for p, digest in files_hashes.items() if listed[p] != digest)
    if changed:
        return f"files changed since the release was made: {changed}"
    if manifest.get("content_hash") != hash_lines(files_hashes):
        return "the manifest's content_hash does not match its files"
    return None


def tampered(root: str, release: str) -> str | None:
    """Why the installed release differs from its own manifest (edited, added, removed), or None."""
    base = os.path.join(releases_dir(root), release)
    manifest = read_json(os.path.join(base, MANIFEST))
    if not manifest:
        return "its manifest.json is missing or unreadable"
    hashes = {}
    for folder, _dirs, names in os.walk(base):
        for name in names:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, base)
            if rel == MANIFEST:
                continue
            if os.path.islink(path):
                return f"{rel} is a symbolic link"
            with open(path, "rb") as fh:
                hashes[rel] = sha256(fh.read())
    return manifest_problem(hashes, manifest)


def plain_release_id(release_id: str) -> bool:
    """Whether `release_id` is a name a release can have (a single folder name under releases/, no '..')."""
    return bool(RELEASE_ID.match(release_id)) and ".." not in release_id


def releases_dir(root: str) -> str:
    """The folder holding `root`'s releases."""
    return os.path.join(root, "releases")


def list_releases(root: str) -> list[str]:
    """The releases installed under `root`, sorted (staging folders, dot-named, are not releases, nor is a link:
    we never make one, and pruning or purging through it would reach outside)."""
    path = releases_dir(root)
    if not os.path.isdir(path):
        return []
    return sorted(n for n in os.listdir(path) if not n.startswith(".") and os.path.isdir(os.path.join(path, n))
                  and not os.path.islink(os.path.join(path, n)))


def note_created(root: str, name: str) -> None:
    """Record in `root`'s ownership marker that dsv4deploy created the entry `name` (purge removes only those).

    Called right after the entry is made, when it was not there before; without a marker (the deploy lock is
    taken before the first install writes one) nothing is recorded: the marker's claim judges what is there.
    """
    path = os.path.join(root, OWNER_MARKER)
    marker = read_json(path)
    if not marker.get("id") or name in marker.get("created", []):
        return
    marker["created"] = sorted({*marker.get("created", []), name})
    write_atomic(path, json.dumps(marker, indent=2, sort_keys=True) + "\n")


def active(root: str) -> str | None:
    """The release `current` points at, or None when there is no pointer."""
    link = os.path.join(root, "current")
    if not os.path.islink(link):
        return None
    return os.path.basename(os.readlink(link).rstrip("/"))


def content_hash(root: str, release: str) -> str | None:
    """The content hash `release`'s manifest records (None when it has none)."""
    return read_json(os.path.join(releases_dir(root), release, MANIFEST)).get("content_hash")


def read_state(root: str) -> dict:
    """`root`'s state.json ({} when there is none)."""
    return read_json(os.path.join(root, STATE_FILE))


def summary(root: str) -> dict:
    """What the modules return about `root`'s releases: active, previous, installed, verified, failed, ..."""
    state = read_state(root)
    installed = list_releases(root)
    good = [r for r in state.get("good", []) if r in installed]
    failed = {r: gate for r, gate in (state.get("failed") or {}).items() if r in installed and r not in good}
    perf = {r: figures for r, figures in (state.get("perf") or {}).items() if r in installed}
    baked = {r: how for r, how in (state.get("baked") or {}).items() if r in good}
    # The perf gate's preferred baseline: figures of a release that also survived its bake.
    last_baked = next((r for r in reversed(good) if baked.get(r) == "passed" and r in perf), None)
    return {"active": active(root), "previous": state.get("previous"), "releases": installed,
            "good": good, "last_good": good[-1] if good else None, "failed_gates": failed, "perf": perf,
            "baked": baked, "last_baked": last_baked}


def release_details(root: str, found: dict) -> list[dict]:
    """Per installed release (`found`: what summary() returned): when it was installed and whether it passed,
    failed or awaits its gates."""
    history = read_state(root).get("history", [])
    details = []
    for name in found["releases"]:
        try:
            created = os.path.getmtime(os.path.join(releases_dir(root), name, MANIFEST))
        except OSError:
            created = None
        if name in found["good"]:
            status = {"passed": "baked", "inconclusive": "verified, bake inconclusive"}.get(
                found["baked"].get(name, ""), "verified")
        elif name == found["active"]:
            status = "unverified"  # its gates are running, or the run that switched to it died
        elif name in history:
            status = "failed"  # it served once and never passed its gates
        else:
            status = "never started"
        details.append({"id": name, "created": created, "status": status, "active": name == found["active"]})
    return details


def last_parity(root: str, found: dict) -> tuple[str | None, dict]:
    """The release whose parity record the next parity gate compares with, and that record: the active release
    when it passed its gates here and has one (a rollback by hand makes it the reference), else the newest
    verified release that has one. Only this record is returned (each is some tens of KB)."""
    records = read_state(root).get("parity") or {}
    good = [r for r in found["good"] if r in records]
    if not good:
        return None, {}
    chosen = found["active"] if found["active"] in good else good[-1]
    return chosen, records[chosen]


def save_state(root: str, **changes: object) -> None:
    """Write `changes` over `root`'s state.json, atomically."""
    state = {**read_state(root), **changes}
    new = not os.path.lexists(os.path.join(root, STATE_FILE))
    write_atomic(os.path.join(root, STATE_FILE), json.dumps(state, indent=2, sort_keys=True) + "\n")
    if new:
        note_created(root, STATE_FILE)


class Refused(Exception):
    """The release cannot be made active; `extra` (the host's releases, as summary() says) goes into the failure."""

    def __init__(self, msg: str, **extra: object) -> None:
        super().__init__(msg)
        self.extra = extra


def activate(root: str, release_id: str, keep: int, prune: bool = True, check: bool = False) -> dict:
    """Point `root`'s C(current) at `release_id` (installed, and intact against its manifest), record the switch in
    state.json and, with `prune`, remove old releases beyond `keep` (never the active, the previous or the last
    verified one); what the modules return (C(changed), summary(), in check mode C(would)). Raises Refused."""
    if not plain_release_id(release_id):
        raise Refused(f"release id {release_id!r} is not a plain name (letters, digits, . _ -; no '..')")
    if release_id not in list_releases(root):
        raise Refused(f"release {release_id} is not installed under {releases_dir(root)}; "
                      f"installed: {', '.join(list_releases(root)) or 'none'}", **summary(root))
    why = tampered(root, release_id)
    if why:
        raise Refused(f"release {release_id} was changed on this host ({why}): refusing to run it; "
                      "deploy again to install a clean copy", **summary(root))
    was = active(root)
    if was == release_id:
        return {"changed": False, **summary(root)}
    if check:
        return {"changed": True, **summary(root), "would": [f"point {root}/current at {release_id} (now {was})"]}
    link = os.path.join(root, "current")
    tmp = os.path.join(root, f".current-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    first = not os.path.lexists(link)
    os.symlink(os.path.join("releases", release_id), tmp)
    os.replace(tmp, link)  # rename over the old link: there is never a moment without one
    if first:
        note_created(root, "current")
    state = read_state(root)
    history = [r for r in state.get("history", []) if r != release_id] + [release_id]
    save_state(root, active=release_id, previous=was, history=history)
    if prune:
        _prune(root, keep, {release_id, was, *state.get("good", [])[-1:]})
        # The engine venvs we built that no release left here records (a kept release keeps its own).
        engines.prune(root)
    return {"changed": True, **summary(root)}


def _prune(root: str, keep: int, protected: set) -> None:
    releases = list_releases(root)
    excess = len(releases) - max(keep, 2)
    for name in releases:
        if excess <= 0:
            break
        path = os.path.join(releases_dir(root), name)
        if name in protected or os.path.islink(path):
            continue
        shutil.rmtree(path)
        excess -= 1
