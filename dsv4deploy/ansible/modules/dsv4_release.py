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
  - C(state=present) installs a release unless one with the same content hash exists already
    (then that one is reused and nothing changes). C(state=active) switches the pointer and prunes
    old releases (never the active, the previous or the last verified one). C(state=verified) records
    that a release passed its gates (the rollback target is the last verified release, never one
    that failed). C(state=absent) removes a temporary release (an experiment's) and forgets it,
    refusing the active release and any verified one. C(state=query) changes nothing.
options:
  install_root: {type: path, required: true, description: Root of releases on this host.}
  state: {type: str, choices: [present, active, verified, absent, query], default: query, description: What to do.}
  release_id: {type: str, description: Release to install or activate.}
  files: {type: dict, description: Relative path to file content (state=present).}
  keep: {type: int, default: 5, description: Releases kept after activation (active and previous always kept).}
author: dsv4deploy
"""

RETURN = r"""
active: {description: Active release id after the task (or null), returned: always, type: str}
previous: {description: Release that was active before the last switch, returned: always, type: str}
last_good: {description: The last release that passed its gates here, returned: always, type: str}
good: {description: Releases that passed their gates, oldest first, returned: always, type: list}
release_id: {description: Release installed or reused (state=present), returned: when state=present, type: str}
releases: {description: Installed release ids, oldest first, returned: always, type: list}
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

MANIFEST = "manifest.json"
STATE_FILE = "state.json"


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
    manifest = json.loads(files[MANIFEST])
    wanted = manifest["content_hash"]
    for existing in _list_releases(root):
        if _content_hash(root, existing) == wanted:
            return {"changed": False, "release_id": existing, **_summary(root)}
    active = _active(root)
    diff = _diff(root, active, files)
    if module.check_mode:
        return {"changed": True, "release_id": release_id, "diff": diff, **_summary(root)}
    releases = _releases_dir(root)
    os.makedirs(releases, exist_ok=True)
    final = os.path.join(releases, release_id)
    if os.path.exists(final):
        module.fail_json(msg=f"release {release_id} exists on this host with other content; "
                             "releases are immutable: deploy again to get a new release id")
    staging = tempfile.mkdtemp(dir=releases, prefix=f".{release_id}-")
    try:
        for rel, content in sorted(files.items()):
            path = os.path.join(staging, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)
            os.chmod(path, _file_mode(rel))
        os.chmod(staging, 0o755)
        os.rename(staging, final)
    except BaseException:
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
    if release_id not in _list_releases(root):
        module.fail_json(msg=f"release {release_id} is not installed under {_releases_dir(root)}; "
                             f"installed: {', '.join(_list_releases(root)) or 'none'}", **_summary(root))
    active = _active(root)
    if active == release_id:
        return {"changed": False, **_summary(root)}
    if module.check_mode:
        return {"changed": True, **_summary(root)}
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
    if release_id not in _list_releases(root):
        module.fail_json(msg=f"release {release_id} is not installed under {_releases_dir(root)}")
    good = _state(root).get("good", [])
    if good and good[-1] == release_id:
        return {"changed": False, **_summary(root)}
    if not module.check_mode:
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
        return {"changed": True, **summary}
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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "install_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "active", "verified", "absent", "query"],
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
        result = {"changed": False, **_summary(root)}
        if result["active"]:
            result["active_hash"] = _content_hash(root, result["active"])
        module.exit_json(**result)
    if p["state"] == "present":
        module.exit_json(**_install(module, root, p["release_id"], p["files"]))
    if p["state"] == "verified":
        module.exit_json(**_verified(module, root, p["release_id"]))
    if p["state"] == "absent":
        module.exit_json(**_remove(module, root, p["release_id"]))
    module.exit_json(**_activate(module, root, p["release_id"], p["keep"]))


if __name__ == "__main__":
    main()
