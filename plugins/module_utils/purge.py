"""Purge an install root: remove what dsv4deploy provably created there, say what was left and why
(standard library only)."""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import stat

from ansible_collections.dsv4.deploy.plugins.module_utils import layout, ownership, secrets_dir, trust
from ansible_collections.dsv4.deploy.plugins.module_utils import release_store as store


def _no_link_between(base: str, path: str) -> bool:
    """Whether no folder from `base` down to `path`'s own is a symbolic link (unlinking through one would
    delete a file outside the release)."""
    folder = os.path.dirname(path)
    while folder.startswith(base + os.sep):
        if os.path.islink(folder):
            return False
        folder = os.path.dirname(folder)
    return folder == base


def _purge_release(base: str, left: dict) -> None:
    """Remove the files a release's manifest lists (and its manifest); anything else in it stays, and nothing is
    reached through a symbolic link (a release's bin/ made a link stays, with what it points at)."""
    listed = store.read_json(os.path.join(base, store.MANIFEST)).get("files") or {}
    for rel in [*listed, store.MANIFEST]:
        path = os.path.normpath(os.path.join(base, rel))
        if (path.startswith(base + os.sep) and _no_link_between(base, path)
                and (os.path.islink(path) or os.path.isfile(path))):
            os.unlink(path)
    for folder, _dirs, _files in sorted(os.walk(base), key=lambda w: -len(w[0])):
        if not os.listdir(folder):
            os.rmdir(folder)
    if os.path.isdir(base):
        top = os.path.dirname(os.path.dirname(base))
        for folder, dirs, files in os.walk(base):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                left[os.path.relpath(os.path.join(folder, name), top)] = "not in its release's manifest"


def _purge_releases(check_mode: bool, root: str, ours: bool, removed: list, left: dict) -> None:
    """Each release whose manifest proves it ours, our staging folders, then releases/ when ours and empty."""
    path = store.releases_dir(root)
    for name in sorted(os.listdir(path)):
        entry = os.path.join(path, name)
        rel = f"releases/{name}"
        # An install's staging folder (.ID-XXXX), left by an interrupted write.
        staging = name.startswith(".") and os.path.isdir(entry) and not os.path.islink(entry)
        if ownership.is_release_dir(entry):
            removed.append(rel)
            if not check_mode:
                _purge_release(entry, left)
        elif staging and ours:
            removed.append(rel)
            if not check_mode:
                shutil.rmtree(entry)
        else:
            left[rel] = "not a dsv4deploy release (no manifest.json listing its files)"
    if ours and not check_mode and not os.listdir(path):
        os.rmdir(path)
        removed.append("releases")
    elif not ours:
        left["releases"] = "was there before dsv4deploy's first install (only our releases in it were removed)"


def unsafe_root(root: str) -> str:
    """Why `root` is a folder no install root may be (a home, a /usr/local top, Docker's), or ''. A folder of
    its own inside a home is purged like any other: only what dsv4deploy recorded making goes."""
    parts = [p for p in root.split("/") if p]
    homes = {os.path.normpath(u.pw_dir) for u in pwd.getpwall() if u.pw_dir.startswith("/") and u.pw_dir != "/"}
    if root in homes or root == "/root" or (parts[:1] == ["home"] and len(parts) == 2):
        return "it is a user's home directory"
    if parts[:2] == ["usr", "local"] and len(parts) == 3:
        return "it is a top folder of /usr/local"
    if parts[:3] == ["var", "lib", "docker"]:
        return "it is Docker's data folder"
    return ""


def _made_by_us(root: str, name: str, owner: dict) -> bool:
    """Whether the marker proves dsv4deploy made `name`: recorded as it was made (a marker from before such
    records: any of our names not there at the first install), or by its content (the lock, secrets/)."""
    if "created" not in owner:
        return name in ownership.OURS
    path = os.path.join(root, name)
    if name == "deploy.lock":  # taken before the first install wrote the marker
        return ownership.is_our_lock(path)
    if name == "secrets" and secrets_dir.recorded_files(owner) is None:
        # A marker from before the secrets' record: the folder is proven by its content.
        return name in owner["created"] or ownership.secrets_proof(path)
    return name in owner["created"]


# The scratch names we make, exactly: tempfile.mkstemp's 8 characters after a write's prefix (files.write_atomic,
# the lock's), and the pointer switch's `.current-<pid>` (release_store).
SCRATCH_NAME = re.compile(r"(?:\.tmp-(?:salt-)?|\.deploy\.lock-)[a-z0-9_]{8}\Z|\.current-[0-9]{1,10}\Z")


def _our_scratch(path: str, name: str) -> bool:
    """A scratch name of ours: a file or link (never a folder) named as we name them, made by root (or this
    user); a person's `.tmp-backup` stays."""
    if not SCRATCH_NAME.match(name):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return not stat.S_ISDIR(st.st_mode) and st.st_uid in trust.trusted_uids()


def _services_ever(root: str) -> set[str]:
    """Every service a release under `root` ran (its services.json), and the active release's serve scripts."""
    names = set(layout.release_services(root)) if os.path.isdir(os.path.join(root, "current")) else set()
    for record in glob.glob(os.path.join(root, "releases", "*", layout.SERVICES_FILE)):
        listed = store.read_json(record).get("services")
        names |= {s["name"] for s in listed if isinstance(s, dict) and isinstance(s.get("name"), str)} \
            if isinstance(listed, list) else set()
    return names


def _purge_secrets(path: str, owner: dict, services: set[str], check_mode: bool, removed: list,
                   left: dict, folder_ours: bool = True) -> None:
    """Remove the files the ownership marker records dsv4deploy wrote into secrets/ (a marker from before that
    record: the API key, the salt, an env file of a service it ran), each a regular file; anything else stays,
    and so does the folder then, or when it is not `folder_ours`."""
    recorded = secrets_dir.recorded_files(owner)
    for name in sorted(os.listdir(path)):
        entry = os.path.join(path, name)
        ours = name in recorded if recorded is not None else (
            name in ownership.SECRET_FILES or (name.endswith(".env") and name[:-len(".env")] in services))
        if not ours or not stat.S_ISREG(os.lstat(entry).st_mode):
            left[f"secrets/{name}"] = ("not a secret file dsv4deploy wrote" if recorded is not None
                                       else "not a secret file dsv4deploy writes")
            continue
        removed.append(f"secrets/{name}")
        if not check_mode:
            os.unlink(entry)
    if not folder_ours:
        left["secrets"] = "not created by dsv4deploy (only the secret files it wrote there were removed)"
    elif not any(n.startswith("secrets/") for n in left):
        removed.append("secrets")
        if not check_mode:
            os.rmdir(path)


def _purge_secrets_if_ours(root: str, owner: dict, mine: bool, services: set[str] | None, check_mode: bool,
                           removed: list, left: dict) -> bool:
    """Purge `root`/secrets (as `_purge_secrets` does) when it is a folder that is ours (`mine`), or not foreign
    and the marker records files we wrote there; whether it did. `services` None: read them only then."""
    path = os.path.join(root, secrets_dir.SECRETS)
    if not (os.path.isdir(path) and not os.path.islink(path) and (mine or (
            secrets_dir.SECRETS not in owner.get("foreign", []) and secrets_dir.recorded_files(owner)))):
        return False
    _purge_secrets(path, owner, _services_ever(root) if services is None else services, check_mode, removed, left,
                   folder_ours=mine)
    return True


def remove_secrets(root: str, check_mode: bool = False) -> dict:
    """Remove the secret files dsv4deploy wrote into `root`/secrets, and the folder when it made it and nothing
    else is left there, as a purge does, for an install root that stops running while its releases stay (the
    other slot of blue_green or of a roll's surge). A root without an ownership marker proves nothing: nothing
    goes. Returns {'changed', 'removed', 'left_why'}."""
    owner = ownership.read_owner(root)
    removed: list = []
    left: dict = {}
    if owner:
        mine = secrets_dir.SECRETS not in owner.get("foreign", []) and _made_by_us(root, secrets_dir.SECRETS, owner)
        _purge_secrets_if_ours(root, owner, mine, None, check_mode, removed, left)
    return {"changed": bool(removed), "removed": removed, "left_why": left}


def purge(root: str, check_mode: bool = False) -> tuple[dict, str]:
    """Remove what dsv4deploy provably created under `root`, and say what was left and why.

    Proof is the ownership marker written at the first install (what was there before is never
    ours) and, inside releases/, each release's manifest (only the files it lists). A root with no
    marker has only what an older dsv4deploy provably made removed. Returns the module's result and
    the warning naming what was left ('' when nothing was); raises Refused for a root it will not purge.
    """
    parts = [p for p in root.split("/") if p]
    if not root.startswith("/") or os.path.normpath(root) != root or len(parts) < 2:
        raise ownership.Refused(f"refusing to purge {root!r}: not an absolute, normalised path two levels deep")
    why = unsafe_root(root)
    if why:
        raise ownership.Refused(f"refusing to purge {root!r}: {why}; choose a folder of its own, e.g. /opt/dsv4deploy")
    if not os.path.isdir(root):
        return {"changed": False, "removed": [], "left": [], "left_why": {}}, ""
    owner = ownership.read_owner(root)
    foreign = set(owner.get("foreign", []))
    legacy = not owner and ownership.is_legacy(root)
    removed: list = []
    left: dict = {}
    services = _services_ever(root)  # before releases/ goes: they name the env files we wrote
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name == ownership.OWNER_MARKER:
            continue
        if name in foreign:
            mine = False
        elif owner:
            mine = _our_scratch(path, name) or _made_by_us(root, name, owner)
        else:
            mine = legacy and name in ownership.OURS and ownership.legacy_proof(root, name)
        if name == "releases" and os.path.isdir(path) and not os.path.islink(path):
            _purge_releases(check_mode, root, mine, removed, left)
            continue
        if name == secrets_dir.SECRETS and _purge_secrets_if_ours(root, owner, mine, services, check_mode, removed,
                                                                  left):
            continue
        if not mine:
            left[name] = ("was there before dsv4deploy's first install" if name in foreign else
                          "not created by dsv4deploy" if owner or name not in ownership.OURS else
                          f"no ownership marker ({ownership.OWNER_MARKER}) proves dsv4deploy created it")
            continue
        removed.append(name)
        if check_mode:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    if owner and not check_mode:
        # Everything ours is gone: a later first install claims the root afresh, as it then is.
        os.unlink(os.path.join(root, ownership.OWNER_MARKER))
        removed.append(ownership.OWNER_MARKER)
        if owner.get("root_was_empty") and not os.listdir(root):
            os.rmdir(root)
    warning = ""
    if left:
        named = "; ".join(f"{n} ({why})" for n, why in sorted(left.items()))
        warning = f"left in {root} what dsv4deploy did not create or cannot prove it created: {named}"
    return {"changed": bool(removed), "removed": removed, "left": sorted(left), "left_why": left}, warning
