"""Which entries of an install root dsv4deploy created: the ownership marker written at the first install,
and the proofs that an older dsv4deploy, which wrote no marker, made them (standard library only)."""

from __future__ import annotations

import json
import os
import time
import uuid

from ansible_collections.dsv4.deploy.plugins.module_utils import release_store as store
from ansible_collections.dsv4.deploy.plugins.module_utils.files import write_atomic

# What dsv4deploy creates under an install root. Purge removes one of these only when the ownership
# marker proves dsv4deploy made it: the marker lists what was there before the first install.
OURS = ("current", "releases", store.STATE_FILE, "supervisor", "logs", "secrets", "deploy.lock")
OWNER_MARKER = store.OWNER_MARKER


# Our scratch names (the pointer switch, atomic writes, lock takeovers) and the marker itself.
OUR_SCRATCH = (".current-", ".tmp-", ".deploy.lock-")
# Entries that, already there and not ours, a deploy would overwrite: the install refuses such a root.
OVERWRITTEN = ("current", store.STATE_FILE)
STATE_KEYS = {"active", "previous", "history", "good"}


class Refused(Exception):
    """dsv4deploy will not touch this install root; the message says why and how to fix it."""


def read_owner(root: str) -> dict:
    """The ownership marker of `root` ({} when there is none or it is unreadable)."""
    marker = store.read_json(os.path.join(root, OWNER_MARKER))
    return marker if isinstance(marker, dict) and marker.get("id") else {}


def is_our_lock(path: str) -> bool:
    """Whether `path` holds a deploy lock record of ours."""
    record = store.read_json(path)
    return isinstance(record, dict) and bool(record.get("run_id"))


def is_release_dir(path: str) -> bool:
    """Whether `path` is a release folder: a real directory whose manifest lists its files."""
    return os.path.isdir(path) and not os.path.islink(path) and isinstance(
        store.read_json(os.path.join(path, store.MANIFEST)).get("files"), dict)


def legacy_proof(root: str, name: str) -> bool:
    """Whether `name`, found under a root with no marker, was provably made by an older dsv4deploy."""
    path = os.path.join(root, name)
    if name == "releases":
        entries = [e for e in os.listdir(path) if not e.startswith(".")] if os.path.isdir(path) else []
        return bool(entries) and all(is_release_dir(os.path.join(path, e)) for e in entries)
    if name == "current":
        return os.path.islink(path) and os.readlink(path).startswith("releases/")
    if name == store.STATE_FILE:
        state = store.read_json(path)
        return isinstance(state, dict) and bool(state) and set(state) <= STATE_KEYS
    if name == "deploy.lock":
        return is_our_lock(path)
    if name == "supervisor":
        return "Managed by dsv4deploy" in read_text(os.path.join(path, "supervisord.conf"))
    if name == "logs":  # supervisord's childlogdir, named in its config
        return legacy_proof(root, "supervisor")
    if name == "secrets":
        return secrets_proof(path)
    return False


# What dsv4deploy writes into secrets/: the API key, the per-host digest salt, each service's secret env file.
SECRET_FILES = ("api_key", "digest_salt")
# The marker's record of the file names dsv4deploy wrote into secrets/ (plugins/module_utils/secrets_dir.py);
# a marker without it is from before that record.
SECRET_FILES_KEY = "secret_files"


def secrets_proof(path: str) -> bool:
    """Whether the folder `path` holds nothing but the regular files dsv4deploy writes into secrets/."""
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    return all((n in SECRET_FILES or n.endswith(".env")) and os.path.isfile(os.path.join(path, n))
               and not os.path.islink(os.path.join(path, n)) for n in os.listdir(path))


def is_legacy(root: str) -> bool:
    """A root with no marker where an older dsv4deploy deployed: its releases and state prove it."""
    return legacy_proof(root, "releases") and legacy_proof(root, store.STATE_FILE)


def read_text(path: str) -> str:
    """The text in `path`; '' when it is missing or not text."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return ""


def claim(root: str, check_mode: bool = False) -> None:
    """Write the ownership marker at the first install: what is there already is not ours.

    A root that an older dsv4deploy deployed to (no marker, but its releases, pointer and state
    are provably ours) is adopted. A root holding a `current` or `state.json` that is not ours is
    refused (Refused): the deploy would overwrite them.
    """
    if read_owner(root) or check_mode:
        return
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    legacy = is_legacy(root)
    foreign = []
    for name in names:
        if name == "deploy.lock" and is_our_lock(os.path.join(root, name)):
            continue  # this run's lock, taken just before the install
        if name.startswith(OUR_SCRATCH):
            continue
        if legacy and name in OURS and legacy_proof(root, name):
            continue
        foreign.append(name)
    clash = sorted(set(foreign) & set(OVERWRITTEN))
    if clash:
        raise Refused(f"install_root {root} already holds {', '.join(clash)}, which dsv4deploy did not "
                      "create and a deploy would overwrite; nothing was written. Fix: choose an empty "
                      "or new install_root (a folder of its own, e.g. /opt/dsv4deploy)")
    os.makedirs(root, exist_ok=True)
    # created: what dsv4deploy makes from now on, each entry as it is made (release_store.note_created); an
    # adopted root's provable entries count as made.
    adopted = [n for n in names if legacy and n in OURS and n not in foreign and n != "deploy.lock"]
    marker = {"id": uuid.uuid4().hex, "claimed_at": time.time(), "foreign": foreign,
              "root_was_empty": not foreign, "adopted": legacy, "created": adopted, SECRET_FILES_KEY: []}
    write_atomic(os.path.join(root, OWNER_MARKER), json.dumps(marker, indent=2, sort_keys=True) + "\n")
