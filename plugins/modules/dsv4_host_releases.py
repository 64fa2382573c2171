#!/usr/bin/python
"""Immutable releases on a host: install one, switch the active pointer, query, prune."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_host_releases
short_description: Install, activate and query dsv4deploy releases on a host
description:
  - A release is a directory C(install_root/releases/ID) holding serve scripts, units or supervisord
    programs, the resolved spec and a manifest of content hashes. It is written once (to a temporary
    name, then renamed) and never changed; C(install_root/current) points at the active one.
  - O(state=present) installs a release unless one with the same content hash exists already (then
    that one is reused and nothing changes); with C(--diff) it shows each file against the active release.
    It also returns RV(before), what O(state=query) says of the host before the install, so a deploy
    reads and installs in one module run, and with O(lock) records the phase in the deploy lock once the
    release is written (a real run only; a check run holds no lock).
  - O(state=active) switches the pointer and prunes old releases (never the active, the previous or
    the last verified one).
  - O(state=verified) records that a release passed its gates (the rollback target is the last
    verified release, never one that failed).
  - O(state=failed) records that a release failed its gate O(failed_gate) here; RV(failed_gates) then names
    it, and C(playbooks/rollback.yml) refuses it unless told C(dsv4_rollback_allow_failed=true).
  - O(state=absent) removes a temporary release (an experiment's, see playbooks/isolate.yml) and
    forgets it; it refuses the active release and any verified one.
  - O(state=query) changes nothing.
  - The first install writes an ownership marker, C(install_root/.dsv4deploy-owner.json), with an id
    and the entries that were there before; an install root holding a C(current) or C(state.json) that
    dsv4deploy did not create is refused (the deploy would overwrite them).
  - O(state=purged) removes what dsv4deploy provably created under O(install_root) - entries made after
    the marker, and in C(releases/) only each release's files its manifest lists. What was there before,
    anything unmarked and anything unlisted stays and is named with why (RV(left_why)). The root itself
    goes only when it was empty at the first install and nothing is left in it.
options:
  install_root:
    type: path
    required: true
    description:
      - Root of the releases on this host.
  state:
    type: str
    choices: [present, active, verified, failed, absent, query, purged]
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
  prune:
    type: bool
    default: true
    description:
      - Prune old releases after activation (O(keep)); an experiment's switch (C(playbooks/isolate.yml))
        prunes nothing.
  failed_gate:
    type: str
    default: ""
    description:
      - The gate a release failed (O(state=failed)); empty means C(gates).
  bake:
    type: str
    choices: ["", passed, inconclusive]
    default: ""
    description:
      - How the release's bake ended, with O(state=verified) - V(passed) records it baked, V(inconclusive) records
        that its bake could not judge it; empty (no bake ran) records nothing. Kept in C(state.json) as
        C(baked) (RV(baked)); the perf gate's baseline is the last baked release's figures (RV(last_baked))
        before a merely verified one's.
  perf:
    type: dict
    default: {}
    description:
      - The release's performance figures (the perf gate's C(evidence.figures)), kept in C(state.json) with
        O(state=verified) or O(state=failed), so that the next deploy judges against the last good release's
        figures on this host (RV(perf)).
  lock:
    type: dict
    default: {}
    description:
      - The deploy lock this run holds, to record the phase in after O(state=present) wrote the release (C(path),
        C(run_id), C(phase)); the target recorded is the release installed (or reused). {} records nothing. As
        M(dsv4.deploy.dsv4_lock) O(state=phase), in the same module run.
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
  dsv4.deploy.dsv4_host_releases:
    install_root: /opt/dsv4deploy
    state: present
    release_id: "{{ dsv4_plan.release_id }}"
    files: "{{ dsv4_plan.hosts[inventory_hostname].files }}"

- name: Make it the active release
  dsv4.deploy.dsv4_host_releases:
    install_root: /opt/dsv4deploy
    state: active
    release_id: "{{ dsv4_plan.release_id }}"

- name: What is installed and active
  dsv4.deploy.dsv4_host_releases:
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
failed_gates:
  description: Installed releases that failed their gates here (and never passed them since), with the gate that failed.
  returned: always
  type: dict
perf:
  description: Installed releases' performance figures recorded here (O(perf)), by release id.
  returned: always
  type: dict
baked:
  description: How the bake of each verified release here ended (V(passed) or V(inconclusive), O(bake)), by release id.
  returned: always
  type: dict
last_baked:
  description: The last verified release here whose bake passed and whose performance figures are recorded.
  returned: always
  type: str
releases:
  description: Installed release ids, oldest first.
  returned: always
  type: list
  elements: str
details:
  description: >-
    Per installed release, oldest first: C(id), C(created) (when it was installed, seconds since the
    epoch), C(status) (C(verified), C(failed): it served and never passed its gates, C(unverified): active
    and not yet passed, C(never started)) and C(active).
  returned: O(state=query)
  type: list
  elements: dict
owner_id:
  description: The id in the install root's ownership marker (null when none).
  returned: O(state=query)
  type: str
removed:
  description: Entries under O(install_root) that were removed (C(releases/ID) for a release).
  returned: O(state=purged)
  type: list
  elements: str
left:
  description: Entries under O(install_root) that were left, because dsv4deploy did not provably create them.
  returned: O(state=purged)
  type: list
  elements: str
left_why:
  description: Each entry of RV(left) with why it was left.
  returned: O(state=purged)
  type: dict
"""


import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import lock as deploy_lock

MANIFEST = "manifest.json"
STATE_FILE = "state.json"
# A release id names a folder under releases/: one plain path component, never '.' or '..'.
RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
# Where a release may hold files (the layout render writes): nothing else, nothing outside.
RELEASE_FILE = re.compile(r"(bin|units|supervisor)/[A-Za-z0-9_.@-]+\Z|spec\.json\Z|services\.json\Z|manifest\.json\Z")


def _check_release_id(module: AnsibleModule, release_id: str) -> None:
    if not RELEASE_ID.match(release_id) or ".." in release_id:
        module.fail_json(msg=f"release id {release_id!r} is not a plain name (letters, digits, . _ -; no '..')")


def _check_file_keys(module: AnsibleModule, files: dict) -> None:
    bad = [rel for rel in files if not RELEASE_FILE.match(rel) or ".." in rel]
    if bad:
        module.fail_json(msg=f"release files {bad} are outside the release layout (bin/, units/, supervisor/, "
                             "spec.json, services.json, manifest.json); nothing was written")
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
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}  # a foreign file that is JSON but not ours


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
    failed = {r: gate for r, gate in (state.get("failed") or {}).items() if r in installed and r not in good}
    perf = {r: figures for r, figures in (state.get("perf") or {}).items() if r in installed}
    baked = {r: how for r, how in (state.get("baked") or {}).items() if r in good}
    # The perf gate's preferred baseline: figures of a release that also survived its bake.
    last_baked = next((r for r in reversed(good) if baked.get(r) == "passed" and r in perf), None)
    return {"active": _active(root), "previous": state.get("previous"), "releases": installed,
            "good": good, "last_good": good[-1] if good else None, "failed_gates": failed, "perf": perf,
            "baked": baked, "last_baked": last_baked}


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
    try:
        _claim(module, root)
    except OSError as exc:
        module.fail_json(msg=f"cannot write release {release_id} under {root}: {exc.strerror or exc} "
                             f"({exc.filename or root}); nothing was switched, the active release "
                             f"{_active(root) or '(none)'} is untouched")
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


def _activate(module: AnsibleModule, root: str, release_id: str, keep: int, prune: bool = True) -> dict:
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
    if prune:
        _prune(root, keep, {release_id, active, *good[-1:]})
    return {"changed": True, **_summary(root)}


def _per_release_changes(root: str, key: str, release_id: str, value: object) -> dict:
    """The state change that records `value` for `release_id` under `key` (a release id -> value map of
    state.json: perf figures, how a bake ended); {} when there is nothing new."""
    known = dict(_state(root).get(key) or {})
    if not value or known.get(release_id) == value:
        return {}
    installed = set(_list_releases(root))
    # Entries of pruned releases go with them.
    return {key: {r: v for r, v in {**known, release_id: value}.items() if r in installed}}


def _perf_changes(root: str, release_id: str, figures: dict) -> dict:
    """The state change that records `figures` for `release_id` ({} when there is nothing new)."""
    return _per_release_changes(root, "perf", release_id, figures)


def _verified(module: AnsibleModule, root: str, release_id: str, figures: dict) -> dict:
    """Record `release_id` verified here, with its perf figures and how its bake ended (O(bake))."""
    bake = module.params.get("bake") or ""
    _check_release_id(module, release_id)
    if release_id not in _list_releases(root):
        module.fail_json(msg=f"release {release_id} is not installed under {_releases_dir(root)}")
    good = _state(root).get("good", [])
    perf = _perf_changes(root, release_id, figures)
    baked = _per_release_changes(root, "baked", release_id, bake)
    if good and good[-1] == release_id and not perf and not baked:
        return {"changed": False, **_summary(root)}
    if module.check_mode:
        return {"changed": True, **_summary(root), "would": [f"record {release_id} as verified"]}
    failed = {r: g for r, g in (_state(root).get("failed") or {}).items() if r != release_id}
    _save_state(root, good=[r for r in good if r != release_id] + [release_id], failed=failed, **perf, **baked)
    return {"changed": True, **_summary(root)}


def _failed(module: AnsibleModule, root: str, release_id: str, gate: str, figures: dict) -> dict:
    """Record that `release_id` failed its gate `gate` here (a rollback to it is then refused by default)."""
    _check_release_id(module, release_id)
    if release_id not in _list_releases(root) or release_id in _state(root).get("good", []):
        return {"changed": False, **_summary(root)}
    failed = dict(_state(root).get("failed") or {})
    perf = _perf_changes(root, release_id, figures)
    if failed.get(release_id) == gate and not perf:
        return {"changed": False, **_summary(root)}
    if module.check_mode:
        return {"changed": True, **_summary(root), "would": [f"record {release_id} as failed ({gate})"]}
    _save_state(root, failed={**failed, release_id: gate}, **perf)
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


# What dsv4deploy creates under an install root. Purge removes one of these only when the ownership
# marker proves dsv4deploy made it: the marker lists what was there before the first install.
OURS = ("current", "releases", STATE_FILE, "supervisor", "logs", "secrets", "deploy.lock")
OWNER_MARKER = ".dsv4deploy-owner.json"
# Our scratch names (the pointer switch, atomic writes, lock takeovers) and the marker itself.
OUR_SCRATCH = (".current-", ".tmp-", ".deploy.lock-")
# Entries that, already there and not ours, a deploy would overwrite: the install refuses such a root.
OVERWRITTEN = ("current", STATE_FILE)
STATE_KEYS = {"active", "previous", "history", "good"}


def _owner(root: str) -> dict:
    """The ownership marker of `root` ({} when there is none or it is unreadable)."""
    marker = _read_json(os.path.join(root, OWNER_MARKER))
    return marker if isinstance(marker, dict) and marker.get("id") else {}


def _is_our_lock(path: str) -> bool:
    record = _read_json(path)
    return isinstance(record, dict) and bool(record.get("run_id"))


def _is_release_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path) and isinstance(
        _read_json(os.path.join(path, MANIFEST)).get("files"), dict)


def _legacy_proof(root: str, name: str) -> bool:
    """Whether `name`, found under a root with no marker, was provably made by an older dsv4deploy."""
    path = os.path.join(root, name)
    if name == "releases":
        entries = [e for e in os.listdir(path) if not e.startswith(".")] if os.path.isdir(path) else []
        return bool(entries) and all(_is_release_dir(os.path.join(path, e)) for e in entries)
    if name == "current":
        return os.path.islink(path) and os.readlink(path).startswith("releases/")
    if name == STATE_FILE:
        state = _read_json(path)
        return isinstance(state, dict) and bool(state) and set(state) <= STATE_KEYS
    if name == "deploy.lock":
        return _is_our_lock(path)
    if name == "supervisor":
        return "Managed by dsv4deploy" in _read_text(os.path.join(path, "supervisord.conf"))
    if name == "logs":  # supervisord's childlogdir, named in its config
        return _legacy_proof(root, "supervisor")
    if name == "secrets":
        return os.path.isdir(path) and set(os.listdir(path)) <= {"api_key"}
    return False


def _is_legacy(root: str) -> bool:
    """A root with no marker where an older dsv4deploy deployed: its releases and state prove it."""
    return _legacy_proof(root, "releases") and _legacy_proof(root, STATE_FILE)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return ""


def _claim(module: AnsibleModule, root: str) -> None:
    """Write the ownership marker at the first install: what is there already is not ours.

    A root that an older dsv4deploy deployed to (no marker, but its releases, pointer and state
    are provably ours) is adopted. A root holding a `current` or `state.json` that is not ours is
    refused: the deploy would overwrite them.
    """
    if _owner(root) or module.check_mode:
        return
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    legacy = _is_legacy(root)
    foreign = []
    for name in names:
        if name == "deploy.lock" and _is_our_lock(os.path.join(root, name)):
            continue  # this run's lock, taken just before the install
        if name.startswith(OUR_SCRATCH):
            continue
        if legacy and name in OURS and _legacy_proof(root, name):
            continue
        foreign.append(name)
    clash = sorted(set(foreign) & set(OVERWRITTEN))
    if clash:
        module.fail_json(msg=f"install_root {root} already holds {', '.join(clash)}, which dsv4deploy did not "
                             "create and a deploy would overwrite; nothing was written. Fix: choose an empty "
                             "or new install_root (a folder of its own, e.g. /opt/dsv4deploy)")
    os.makedirs(root, exist_ok=True)
    marker = {"id": uuid.uuid4().hex, "claimed_at": time.time(), "foreign": foreign,
              "root_was_empty": not foreign, "adopted": legacy}
    _write_atomic(os.path.join(root, OWNER_MARKER), json.dumps(marker, indent=2, sort_keys=True) + "\n")


def _purge_release(base: str, left: dict) -> None:
    """Remove the files a release's manifest lists (and its manifest); anything else in it stays."""
    listed = _read_json(os.path.join(base, MANIFEST)).get("files") or {}
    for rel in [*listed, MANIFEST]:
        path = os.path.normpath(os.path.join(base, rel))
        if path.startswith(base + os.sep) and (os.path.isfile(path) or os.path.islink(path)):
            os.unlink(path)
    for folder, _dirs, _files in sorted(os.walk(base), key=lambda w: -len(w[0])):
        if not os.listdir(folder):
            os.rmdir(folder)
    if os.path.isdir(base):
        for folder, _dirs, files in os.walk(base):
            for name in files:
                rel = os.path.relpath(os.path.join(folder, name), os.path.dirname(os.path.dirname(base)))
                left[rel] = "not in its release's manifest"


def _purge_releases(module: AnsibleModule, root: str, ours: bool, removed: list, left: dict) -> None:
    """Each release whose manifest proves it ours, our staging folders, then releases/ when ours and empty."""
    path = _releases_dir(root)
    for name in sorted(os.listdir(path)):
        entry = os.path.join(path, name)
        rel = f"releases/{name}"
        # An install's staging folder (.ID-XXXX), left by an interrupted write.
        staging = name.startswith(".") and os.path.isdir(entry) and not os.path.islink(entry)
        if _is_release_dir(entry):
            removed.append(rel)
            if not module.check_mode:
                _purge_release(entry, left)
        elif staging and ours:
            removed.append(rel)
            if not module.check_mode:
                shutil.rmtree(entry)
        else:
            left[rel] = "not a dsv4deploy release (no manifest.json listing its files)"
    if ours and not module.check_mode and not os.listdir(path):
        os.rmdir(path)
        removed.append("releases")
    elif not ours:
        left["releases"] = "was there before dsv4deploy's first install (only our releases in it were removed)"


def _purge(module: AnsibleModule, root: str) -> dict:
    """Remove what dsv4deploy provably created under `root`, and say what was left and why.

    Proof is the ownership marker written at the first install (what was there before is never
    ours) and, inside releases/, each release's manifest (only the files it lists). A root with no
    marker has only what an older dsv4deploy provably made removed.
    """
    parts = [p for p in root.split("/") if p]
    if not root.startswith("/") or os.path.normpath(root) != root or len(parts) < 2:
        module.fail_json(msg=f"refusing to purge {root!r}: not an absolute, normalised path two levels deep")
    if not os.path.isdir(root):
        return {"changed": False, "removed": [], "left": [], "left_why": {}}
    owner = _owner(root)
    foreign = set(owner.get("foreign", []))
    legacy = not owner and _is_legacy(root)
    removed: list = []
    left: dict = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name == OWNER_MARKER:
            continue
        if name in foreign:
            mine = False
        elif owner:
            mine = name in OURS or name.startswith(OUR_SCRATCH)
        else:
            mine = legacy and name in OURS and _legacy_proof(root, name)
        if name == "releases" and os.path.isdir(path) and not os.path.islink(path):
            _purge_releases(module, root, mine, removed, left)
            continue
        if not mine:
            left[name] = ("was there before dsv4deploy's first install" if name in foreign else
                          "not created by dsv4deploy" if owner or name not in OURS else
                          f"no ownership marker ({OWNER_MARKER}) proves dsv4deploy created it")
            continue
        removed.append(name)
        if module.check_mode:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    if owner and not module.check_mode:
        # Everything ours is gone: a later first install claims the root afresh, as it then is.
        os.unlink(os.path.join(root, OWNER_MARKER))
        removed.append(OWNER_MARKER)
        if owner.get("root_was_empty") and not os.listdir(root):
            os.rmdir(root)
    if left:
        named = "; ".join(f"{n} ({why})" for n, why in sorted(left.items()))
        module.warn(f"left in {root} what dsv4deploy did not create or cannot prove it created: {named}")
    return {"changed": bool(removed), "removed": removed, "left": sorted(left), "left_why": left}


def _release_details(root: str, summary: dict) -> list[dict]:
    """Per installed release: when it was installed and whether it passed, failed or awaits its gates."""
    history = _state(root).get("history", [])
    details = []
    for name in summary["releases"]:
        try:
            created = os.path.getmtime(os.path.join(_releases_dir(root), name, MANIFEST))
        except OSError:
            created = None
        if name in summary["good"]:
            status = {"passed": "baked", "inconclusive": "verified, bake inconclusive"}.get(
                summary["baked"].get(name, ""), "verified")
        elif name == summary["active"]:
            status = "unverified"  # its gates are running, or the run that switched to it died
        elif name in history:
            status = "failed"  # it served once and never passed its gates
        else:
            status = "never started"
        details.append({"id": name, "created": created, "status": status, "active": name == summary["active"]})
    return details


def _query(root: str) -> dict:
    """The host's releases: active (with its content hash), previous, verified ones."""
    result = _summary(root)
    if result["active"]:
        # An edited active release never counts as "this release is running": a deploy reinstalls it.
        result["active_tampered"] = tampered(root, result["active"])
        result["active_hash"] = "" if result["active_tampered"] else _content_hash(root, result["active"])
    result["details"] = _release_details(root, result)
    result["owner_id"] = _owner(root).get("id")
    return result


def _record_phase(module: AnsibleModule, lock: dict, release_id: str) -> None:
    """Record lock["phase"] with `release_id` as the target in the deploy lock this run holds."""
    missing = [k for k in ("path", "run_id", "phase") if not lock.get(k)]
    if missing:
        module.fail_json(msg=f"lock: needs {', '.join(missing)} (path, run_id and phase of the deploy lock)")
    try:
        deploy_lock.record_phase(lock["path"], lock["run_id"], lock["phase"], release_id)
    except deploy_lock.LockLost as exc:
        module.fail_json(msg=str(exc))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "install_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "active", "verified", "failed", "absent", "query",
                                                 "purged"], "default": "query"},
            "failed_gate": {"type": "str", "default": ""},
            "prune": {"type": "bool", "default": True},
            "release_id": {"type": "str"},
            "files": {"type": "dict"},
            "bake": {"type": "str", "default": "", "choices": ["", "passed", "inconclusive"]},
            "keep": {"type": "int", "default": 5},
            "perf": {"type": "dict", "default": {}},
            "lock": {"type": "dict", "default": {}},
        },
        required_if=[("state", "present", ("release_id", "files")), ("state", "active", ("release_id",)),
                     ("state", "verified", ("release_id",)), ("state", "failed", ("release_id",)),
                     ("state", "absent", ("release_id",))],
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
        installed = _install(module, root, p["release_id"], p["files"])
        if p["lock"] and not module.check_mode:  # a check run takes no lock, so it has none to update
            _record_phase(module, p["lock"], installed["release_id"])
        module.exit_json(before=before, **installed)
    if p["state"] == "verified":
        module.exit_json(**_verified(module, root, p["release_id"], p["perf"]))
    if p["state"] == "failed":
        module.exit_json(**_failed(module, root, p["release_id"], p["failed_gate"] or "gates", p["perf"]))
    if p["state"] == "absent":
        module.exit_json(**_remove(module, root, p["release_id"]))
    module.exit_json(**_activate(module, root, p["release_id"], p["keep"], p["prune"]))


if __name__ == "__main__":
    main()
