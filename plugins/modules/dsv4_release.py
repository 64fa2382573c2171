#!/usr/bin/python
"""Immutable releases on a host: install one, switch the active pointer, query, prune."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_release
short_description: Install, activate and query dsv4deploy releases on a host
description:
  - A release is a directory C(install_root/releases/ID) holding serve scripts, units or supervisord
    programs, the resolved spec and a manifest of content hashes. It is written once (to a temporary
    name, then renamed) and never changed; C(install_root/current) points at the active one.
  - O(state=present) installs a release unless one with the same content hash exists already (then
    that one is reused and nothing changes); with C(--diff) it shows each file against the active release.
    It also returns RV(before), what O(state=query) says of the host before the install, so a deploy
    reads and installs in one module run.
  - O(state=active) switches the pointer and prunes old releases (never the active, the previous or
    the last verified one).
  - O(state=verified) records that a release passed its gates (the rollback target is the last
    verified release, never one that failed).
  - O(state=absent) removes a temporary release (an experiment's, see playbooks/isolate.yml) and
    forgets it; it refuses the active release and any verified one.
  - O(state=query) changes nothing.
  - O(state=purged) removes what dsv4deploy created under O(install_root) (and the root when nothing
    else is left in it), never anything else.
options:
  install_root:
    type: path
    required: true
    description:
      - Root of the releases on this host.
  state:
    type: str
    choices: [present, active, verified, absent, query, purged]
    default: query
    description:
      - What to do.
  release_id:
    type: str
    description:
      - Release to install, activate or record as verified.
  files:
    type: dict
    description:
      - Path relative to the release to file content (O(state=present)).
  keep:
    type: int
    default: 5
    description:
      - Releases kept after activation (the active, the previous and the last verified are always kept).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  check_mode:
    support: full
    description: Reports what would be installed or switched; writes nothing.
  diff_mode:
    support: full
    description: O(state=present) shows every file of the new release against the active one.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Install the planned release (reused when its content exists already)
  dsv4.deploy.dsv4_release:
    install_root: /opt/dsv4deploy
    state: present
    release_id: "{{ dsv4_plan.release_id }}"
    files: "{{ dsv4_plan.hosts[inventory_hostname].files }}"

- name: Make it the active release
  dsv4.deploy.dsv4_release:
    install_root: /opt/dsv4deploy
    state: active
    release_id: "{{ dsv4_plan.release_id }}"

- name: What is installed and active
  dsv4.deploy.dsv4_release:
    install_root: /opt/dsv4deploy
  register: releases
"""

RETURN = r"""
would:
  description: In check mode, what a real run would do, in words.
  returned: check mode, when something would change (O(state=present), O(state=active), O(state=verified),
    O(state=absent))
  type: list
  elements: str
active:
  description: Active release id after the task (null when none).
  returned: always
  type: str
active_hash:
  description: Content hash of the active release (its manifest's C(content_hash)).
  returned: O(state=query) when a release is active
  type: str
previous:
  description: Release that was active before the last switch.
  returned: always
  type: str
last_good:
  description: The last release that passed its gates here.
  returned: always
  type: str
good:
  description: Releases that passed their gates here, oldest first.
  returned: always
  type: list
  elements: str
release_id:
  description: Release installed, or the existing one with the same content that was reused.
  returned: O(state=present)
  type: str
before:
  description: What O(state=query) returns, as the host was before the install.
  returned: O(state=present)
  type: dict
releases:
  description: Installed release ids, oldest first.
  returned: always
  type: list
  elements: str
"""


import hashlib
import json
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

MANIFEST = "manifest.json"
STATE_FILE = "state.json"
# A release id names a folder under releases/: one plain path component, never '.' or '..'.
RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
# Where a release may hold files (the layout render writes): nothing else, nothing outside.
RELEASE_FILE = re.compile(r"(bin|units|supervisor)/[A-Za-z0-9_.@-]+\Z|spec\.json\Z|manifest\.json\Z")


def _check_release_id(module: AnsibleModule, release_id: str) -> None:
    if not RELEASE_ID.match(release_id) or ".." in release_id:
        module.fail_json(msg=f"release id {release_id!r} is not a plain name (letters, digits, . _ -; no '..')")


def _check_file_keys(module: AnsibleModule, files: dict) -> None:
    bad = [rel for rel in files if not RELEASE_FILE.match(rel) or ".." in rel]
    if bad:
        module.fail_json(msg=f"release files {bad} are outside the release layout (bin/, units/, supervisor/, "
                             "spec.json, manifest.json); nothing was written")
    if MANIFEST not in files:
        module.fail_json(msg="the release has no manifest.json; nothing was written")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hash_lines(hashes: dict) -> str:
    """content_hash as dsv4deploy.render computes it: sha256 over sorted `sha256  path` lines."""
    lines = "".join(f"{digest}  {path}\n" for path, digest in sorted(hashes.items()))
    return _sha256(lines.encode("utf-8"))


def _manifest_problem(files_hashes: dict, manifest: dict) -> str | None:
    """Why `files_hashes` (path -> sha256, manifest excluded) do not match `manifest`, or None."""
    listed = manifest.get("files") or {}
    if sorted(listed) != sorted(files_hashes):
        extra = sorted(set(files_hashes) - set(listed))
        missing = sorted(set(listed) - set(files_hashes))
        return f"files not in the manifest: {extra}; files missing: {missing}"
    changed = sorted(p for p, digest in files_hashes.items() if listed[p] != digest)
    if changed:
        return f"files changed since the release was made: {changed}"
    if manifest.get("content_hash") != _hash_lines(files_hashes):
        return "the manifest's content_hash does not match its files"
    return None


def tampered(root: str, release: str) -> str | None:
    """Why the installed release differs from its own manifest (edited, added, removed), or None."""
    base = os.path.join(_releases_dir(root), release)
    manifest = _read_json(os.path.join(base, MANIFEST))
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
                hashes[rel] = _sha256(fh.read())
    return _manifest_problem(hashes, manifest)


def _releases_dir(root: str) -> str:
    return os.path.join(root, "releases")


def _list_releases(root: str) -> list[str]:
    path = _releases_dir(root)
    if not os.path.isdir(path):
        return []
    return sorted(n for n in os.listdir(path) if not n.startswith(".") and os.path.isdir(os.path.join(path, n)))


def _active(root: str) -> str | None:
    link = os.path.join(root, "current")
    if not os.path.islink(link):
        return None
    return os.path.basename(os.readlink(link).rstrip("/"))


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _content_hash(root: str, release: str) -> str | None:
    return _read_json(os.path.join(_releases_dir(root), release, MANIFEST)).get("content_hash")


def _state(root: str) -> dict:
    return _read_json(os.path.join(root, STATE_FILE))


def _write_atomic(path: str, data: str, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _summary(root: str) -> dict:
    state = _state(root)
    installed = _list_releases(root)
    good = [r for r in state.get("good", []) if r in installed]
    return {"active": _active(root), "previous": state.get("previous"), "releases": installed,
            "good": good, "last_good": good[-1] if good else None}


def _save_state(root: str, **changes: object) -> None:
    state = {**_state(root), **changes}
    _write_atomic(os.path.join(root, STATE_FILE), json.dumps(state, indent=2, sort_keys=True) + "\n")


def _file_mode(rel: str) -> int:
    return 0o755 if rel.startswith("bin/") else 0o644


def _install(module: AnsibleModule, root: str, release_id: str, files: dict) -> dict:
    _check_release_id(module, release_id)
    _check_file_keys(module, files)
    try:
        manifest = json.loads(files[MANIFEST])
    except ValueError:
        module.fail_json(msg="the release's manifest.json is not JSON; nothing was written")
    problem = _manifest_problem({rel: _sha256(text.encode("utf-8")) for rel, text in files.items()
                                 if rel != MANIFEST}, manifest)
    if problem:
        module.fail_json(msg=f"the release to install does not match its own manifest ({problem}); nothing was written")
    wanted = manifest["content_hash"]
    for existing in _list_releases(root):
        if _content_hash(root, existing) == wanted:
            why = tampered(root, existing)
            if why is None:
                return {"changed": False, "release_id": existing, **_summary(root)}
            # Same manifest, other files: someone edited it. Never reuse it; install a clean copy.
            module.warn(f"release {existing} has this content hash but {why}; installing a fresh copy "
                        f"as {release_id}")
    active = _active(root)
    diff = _diff(root, active, files)
    if module.check_mode:
        return {"changed": True, "release_id": release_id, "diff": diff, **_summary(root),
                "would": [f"install release {release_id} in {_releases_dir(root)}"]}
    releases = _releases_dir(root)
    final = os.path.join(releases, release_id)
    if os.path.exists(final):
        module.fail_json(msg=f"release {release_id} exists on this host with other content; "
                             "releases are immutable: deploy again to get a new release id")
    staging = None
    try:
        os.makedirs(releases, exist_ok=True)
        staging = tempfile.mkdtemp(dir=releases, prefix=f".{release_id}-")
        for rel, content in sorted(files.items()):
            path = os.path.join(staging, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())  # a full disk shows here, not after the switch
            os.chmod(path, _file_mode(rel))
        os.chmod(staging, 0o755)
        os.rename(staging, final)
    except OSError as exc:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(msg=f"cannot write release {release_id} under {releases}: {exc.strerror or exc} "
                             f"({exc.filename or releases}); nothing was switched, the active release "
                             f"{_active(root) or '(none)'} is untouched")
    except BaseException:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"changed": True, "release_id": release_id, "diff": diff, **_summary(root)}


def _diff(root: str, active: str | None, files: dict) -> list[dict]:
    diffs = []
    for rel, content in sorted(files.items()):
        before = ""
        if active:
            try:
                with open(os.path.join(_releases_dir(root), active, rel), encoding="utf-8") as fh:
                    before = fh.read()
            except OSError:
                before = ""
        if before != content:
            diffs.append({"before_header": f"current/{rel}", "after_header": f"new/{rel}",
                          "before": before, "after": content})
    return diffs


def _activate(module: AnsibleModule, root: str, release_id: str, keep: int) -> dict:
    _check_release_id(module, release_id)
    if release_id not in _list_releases(root):
        module.fail_json(msg=f"release {release_id} is not installed under {_releases_dir(root)}; "
                             f"installed: {', '.join(_list_releases(root)) or 'none'}", **_summary(root))
    why = tampered(root, release_id)
    if why:
        module.fail_json(msg=f"release {release_id} was changed on this host ({why}): refusing to run it; "
                             "deploy again to install a clean copy", **_summary(root))
    active = _active(root)
    if active == release_id:
        return {"changed": False, **_summary(root)}
    if module.check_mode:
        return {"changed": True, **_summary(root), "would": [f"point {root}/current at {release_id} (now {active})"]}
    link = os.path.join(root, "current")
    tmp = os.path.join(root, f".current-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("releases", release_id), tmp)
    os.replace(tmp, link)  # rename over the old link: there is never a moment without one
    state = _state(root)
    history = [r for r in state.get("history", []) if r != release_id] + [release_id]
    _save_state(root, active=release_id, previous=active, history=history)
    good = state.get("good", [])
    _prune(root, keep, {release_id, active, *good[-1:]})
    return {"changed": True, **_summary(root)}


def _verified(module: AnsibleModule, root: str, release_id: str) -> dict:
    _check_release_id(module, release_id)
    if release_id not in _list_releases(root):
        module.fail_json(msg=f"release {release_id} is not installed under {_releases_dir(root)}")
    good = _state(root).get("good", [])
    if good and good[-1] == release_id:
        return {"changed": False, **_summary(root)}
    if module.check_mode:
        return {"changed": True, **_summary(root), "would": [f"record {release_id} as verified"]}
    _save_state(root, good=[r for r in good if r != release_id] + [release_id])
    return {"changed": True, **_summary(root)}


def _remove(module: AnsibleModule, root: str, release_id: str) -> dict:
    summary = _summary(root)
    if release_id not in summary["releases"]:
        return {"changed": False, **summary}
    if release_id == summary["active"] or release_id in _state(root).get("good", []):
        module.fail_json(msg=f"release {release_id} is active or verified on this host; only a temporary "
                             "release can be removed", **summary)
    if module.check_mode:
        return {"changed": True, **summary, "would": [f"remove release {release_id}"]}
    shutil.rmtree(os.path.join(_releases_dir(root), release_id))
    # Forget it, so `previous` names what served before it again.
    state = _state(root)
    history = [r for r in state.get("history", []) if r != release_id]
    before = [r for r in history if r != summary["active"]]
    previous = state.get("previous") if state.get("previous") != release_id else (before[-1] if before else None)
    _save_state(root, history=history, previous=previous)
    return {"changed": True, **_summary(root)}


def _prune(root: str, keep: int, protected: set) -> None:
    releases = _list_releases(root)
    excess = len(releases) - max(keep, 2)
    for name in releases:
        if excess <= 0:
            break
        if name in protected:
            continue
        shutil.rmtree(os.path.join(_releases_dir(root), name))
        excess -= 1


# What dsv4deploy creates under an install root; purge removes these and nothing else.
OURS = ("current", "releases", STATE_FILE, "supervisor", "logs", "secrets", "deploy.lock")


def _purge(module: AnsibleModule, root: str) -> dict:
    """Remove our entries under `root`, then `root` itself when nothing else is left in it."""
    parts = [p for p in root.split("/") if p]
    if not root.startswith("/") or os.path.normpath(root) != root or len(parts) < 2:
        module.fail_json(msg=f"refusing to purge {root!r}: not an absolute, normalised path two levels deep")
    if not os.path.isdir(root):
        return {"changed": False, "removed": [], "left": []}
    removed = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name not in OURS and not name.startswith((".current-", ".tmp-", ".deploy.lock-")):
            continue
        removed.append(name)
        if module.check_mode:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    left = sorted(n for n in os.listdir(root) if n not in removed) if os.path.isdir(root) else []
    if not left and not module.check_mode:
        os.rmdir(root)
    elif left:
        module.warn(f"left in {root} what dsv4deploy did not create: {', '.join(left)}")
    return {"changed": bool(removed), "removed": removed, "left": left}


def _query(root: str) -> dict:
    """The host's releases: active (with its content hash), previous, verified ones."""
    result = _summary(root)
    if result["active"]:
        # An edited active release never counts as "this release is running": a deploy reinstalls it.
        result["active_tampered"] = tampered(root, result["active"])
        result["active_hash"] = "" if result["active_tampered"] else _content_hash(root, result["active"])
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "install_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "active", "verified", "absent", "query", "purged"],
                      "default": "query"},
            "release_id": {"type": "str"},
            "files": {"type": "dict"},
            "keep": {"type": "int", "default": 5},
        },
        required_if=[("state", "present", ("release_id", "files")), ("state", "active", ("release_id",)),
                     ("state", "verified", ("release_id",)), ("state", "absent", ("release_id",))],
        supports_check_mode=True,
    )
    p = module.params
    root = p["install_root"]
    if p["state"] == "query":
        module.exit_json(changed=False, **_query(root))
    if p["state"] == "purged":
        module.exit_json(**_purge(module, root))
    if p["state"] == "present":
        before = _query(root)
        module.exit_json(before=before, **_install(module, root, p["release_id"], p["files"]))
    if p["state"] == "verified":
        module.exit_json(**_verified(module, root, p["release_id"]))
    if p["state"] == "absent":
        module.exit_json(**_remove(module, root, p["release_id"]))
    module.exit_json(**_activate(module, root, p["release_id"], p["keep"]))


if __name__ == "__main__":
    main()
