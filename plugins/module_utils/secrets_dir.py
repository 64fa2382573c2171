"""The install root's secrets/ folder: made root's (the service user's group reads it), and recorded in the
ownership marker as dsv4deploy's, with the names of the secret files the install writes there, so that a
purge removes what it made by that record and nothing a person put there later (standard library only)."""

from __future__ import annotations

import json
import os
import re
import stat

from ansible_collections.dsv4.deploy.plugins.module_utils import ownership
from ansible_collections.dsv4.deploy.plugins.module_utils import release_store as store
from ansible_collections.dsv4.deploy.plugins.module_utils.files import write_atomic

SECRETS = "secrets"
MODE = 0o750
FILES_KEY = ownership.SECRET_FILES_KEY
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,127}\Z")


def recorded_files(owner: dict) -> set[str] | None:
    """The secret file names the marker records, or None for a marker from before such records."""
    names = owner.get(FILES_KEY)
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else None


def _record(root: str, made: bool, files: list[str]) -> bool:
    """Record `files` in the marker (the install writes them, replacing whatever was there), and secrets/ as ours
    when made now, or an older install's proven by its content, and not there before the first install; whether
    the marker changed. A root without a marker records nothing."""
    path = os.path.join(root, store.OWNER_MARKER)
    marker = ownership.read_owner(root)
    if not marker:
        return False
    created = set(marker.get("created", []))
    if SECRETS not in created and SECRETS not in marker.get("foreign", []) and (
            made or ownership.secrets_proof(os.path.join(root, SECRETS))):
        created.add(SECRETS)
    names = sorted((recorded_files(marker) or set()) | set(files))
    if created == set(marker.get("created", [])) and names == marker.get(FILES_KEY):
        return False
    marker.update(created=sorted(created), **{FILES_KEY: names})
    write_atomic(path, json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return True


def ensure(root: str, gid: int, files: list[str], check_mode: bool = False) -> bool:
    """Make `root`/secrets root's (or this user's) with group `gid`, mode 0750, set on the open folder (never
    through a link), and record it and `files` (the names the install writes there) in the ownership marker.
    Whether anything changed (or would). Raises ValueError for a name that is not plain, OSError for a
    secrets/ that is not a folder."""
    bad = [n for n in files if not PLAIN_NAME.match(n)]
    if bad:
        raise ValueError(f"not plain file names: {', '.join(map(repr, bad))}")
    path = os.path.join(root, SECRETS)
    uid = 0 if os.geteuid() == 0 else os.geteuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path} is not a folder ({'a link' if stat.S_ISLNK(st.st_mode) else 'another kind of file'}):"
                      " move it away; dsv4deploy keeps the secret files in a folder of root's there")
    if check_mode:
        return st is None or (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (uid, gid, MODE)
    made = st is None
    if made:
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        now = os.fstat(fd)
        changed = made or (now.st_uid, now.st_gid, stat.S_IMODE(now.st_mode)) != (uid, gid, MODE)
        os.fchown(fd, uid, gid)
        os.fchmod(fd, MODE)
    finally:
        os.close(fd)
    return _record(root, made, files) or changed
