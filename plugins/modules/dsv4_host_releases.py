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
      - Release to install, activate or record as verified; with O(state=query) and O(records), the release whose
        records to read.
  records:
    type: bool
    default: false
    description:
      - With O(state=query) and O(release_id), also return RV(records), that release's C(spec.json) and
        C(services.json) (one module run for both, as a restore reads them).
  records_of:
    type: str
    default: ''
    description:
      - With O(state=failed), also return RV(records) of this release, the one a rollback restores next, and
        RV(records_of) naming it; the same module run records the failure and reads what the restore needs, one
        module run fewer between a failed gate and the stop. Empty reads nothing.
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
  parity:
    type: dict
    default: {}
    description:
      - The release's parity record (the parity gate's C(evidence.record) - greedy tokens and top-5 logprobs of
        the fixed prompt set, the model-affecting settings, the topology), kept in C(state.json) with
        O(state=verified), so that the next deploy's parity gate compares with the last good release's record on
        this host (RV(last_parity), RV(last_parity_record)). Records of pruned releases go with them.
  lock:
    type: dict
    default: {}
    description:
      - The deploy lock this run holds, to record the phase in after O(state=present) wrote the release (C(path),
        C(run_id), C(phase)); the target recorded is the release installed (or reused). {} records nothing. As
        M(dsv4.deploy.dsv4_lock) O(state=phase), in the same module run.
  release_lock:
    type: dict
    default: {}
    description:
      - The deploy lock this run holds (C(path), C(run_id)), to release once O(state=verified) recorded the release.
        The record is the end of a successful run, so the lock goes in the same module run, as
        M(dsv4.deploy.dsv4_lock) O(state=absent) would remove it (a lock another run holds stays, with a warning).
        RV(lock_released) says whether it went. {} releases nothing; a check run holds no lock and releases none.
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
lock_released:
  description: Whether O(release_lock) removed the deploy lock (false when there was none or another run holds it).
  returned: O(state=verified) with O(release_lock), in a real run
  type: bool
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
last_parity:
  description: >-
    The release whose parity record (O(parity)) the next parity gate compares with - the active release when it
    passed its gates here and has one, else the newest verified release that has one; null when none.
  returned: O(state=query), and in RV(before)
  type: str
last_parity_record:
  description: That release's parity record ({} when none).
  returned: O(state=query), and in RV(before)
  type: dict
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
records:
  description: >-
    The files C(spec.json) and C(services.json) of O(release_id), base64-encoded, as C(spec) and C(services); an
    empty string for one that is not there (the release is not installed here, or predates services.json).
  returned: O(state=query) with O(records), O(state=failed) with O(records_of)
  type: dict
records_of:
  description: The release RV(records) describes (O(records_of)), so a later read of the same release can be skipped.
  returned: O(state=failed) with O(records_of)
  type: str
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


import base64
import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import lock as deploy_lock
from ansible_collections.dsv4.deploy.plugins.module_utils import nesting, ownership, purge
from ansible_collections.dsv4.deploy.plugins.module_utils import release_store as store


def _check_release_id(module: AnsibleModule, release_id: str) -> None:
    if not store.plain_release_id(release_id):
        module.fail_json(msg=f"release id {release_id!r} is not a plain name (letters, digits, . _ -; no '..')")


def _check_file_keys(module: AnsibleModule, files: dict) -> None:
    bad = [rel for rel in files if not store.RELEASE_FILE.match(rel) or ".." in rel]
    if bad:
        module.fail_json(msg=f"release files {bad} are outside the release layout (bin/, units/, supervisor/, "
                             "spec.json, services.json, engine.json, manifest.json); nothing was written")
    if store.MANIFEST not in files:
        module.fail_json(msg="the release has no manifest.json; nothing was written")


def _file_mode(rel: str) -> int:
    return 0o755 if rel.startswith("bin/") else 0o644


def _install(module: AnsibleModule, root: str, release_id: str, files: dict) -> dict:
    _check_release_id(module, release_id)
    _check_file_keys(module, files)
    try:
        manifest = json.loads(files[store.MANIFEST])
    except ValueError:
        module.fail_json(msg="the release's manifest.json is not JSON; nothing was written")
    problem = store.manifest_problem({rel: store.sha256(text.encode("utf-8")) for rel, text in files.items()
                                      if rel != store.MANIFEST}, manifest)
    if problem:
        module.fail_json(msg=f"the release to install does not match its own manifest ({problem}); nothing was written")
    nested = nesting.nesting_problem(root)
    if nested:
        module.fail_json(msg=nested)
    try:
        ownership.claim(root, module.check_mode)
    except ownership.Refused as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"cannot write release {release_id} under {root}: {exc.strerror or exc} "
                             f"({exc.filename or root}); nothing was switched, the active release "
                             f"{store.active(root) or '(none)'} is untouched")
    wanted = manifest["content_hash"]
    for existing in store.list_releases(root):
        if store.content_hash(root, existing) == wanted:
            why = store.tampered(root, existing)
            if why is None:
                return {"changed": False, "release_id": existing, **store.summary(root)}
            # Same manifest, other files: someone edited it. Never reuse it; install a clean copy.
            module.warn(f"release {existing} has this content hash but {why}; installing a fresh copy "
                        f"as {release_id}")
    active = store.active(root)
    diff = _diff(root, active, files)
    if module.check_mode:
        return {"changed": True, "release_id": release_id, "diff": diff, **store.summary(root),
                "would": [f"install release {release_id} in {store.releases_dir(root)}"]}
    releases = store.releases_dir(root)
    final = os.path.join(releases, release_id)
    if os.path.exists(final):
        module.fail_json(msg=f"release {release_id} exists on this host with other content; "
                             "releases are immutable: deploy again to get a new release id")
    staging = None
    try:
        if not os.path.isdir(releases):
            os.makedirs(releases)
            store.note_created(root, "releases")
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
                             f"{store.active(root) or '(none)'} is untouched")
    except BaseException:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"changed": True, "release_id": release_id, "diff": diff, **store.summary(root)}


def _diff(root: str, active: str | None, files: dict) -> list[dict]:
    diffs = []
    for rel, content in sorted(files.items()):
        before = ""
        if active:
            try:
                with open(os.path.join(store.releases_dir(root), active, rel), encoding="utf-8") as fh:
                    before = fh.read()
            except OSError:
                before = ""
        if before != content:
            diffs.append({"before_header": f"current/{rel}", "after_header": f"new/{rel}",
                          "before": before, "after": content})
    return diffs


def _activate(module: AnsibleModule, root: str, release_id: str, keep: int, prune: bool = True) -> dict:
    try:
        return store.activate(root, release_id, keep, prune, module.check_mode)
    except store.Refused as exc:
        module.fail_json(msg=str(exc), **exc.extra)
    return {}


def _per_release_changes(root: str, key: str, release_id: str, value: object) -> dict:
    """The state change that records `value` for `release_id` under `key` (a release id -> value map of
    state.json: perf figures, how a bake ended); {} when there is nothing new."""
    known = dict(store.read_state(root).get(key) or {})
    if not value or known.get(release_id) == value:
        return {}
    installed = set(store.list_releases(root))
    # Entries of pruned releases go with them.
    return {key: {r: v for r, v in {**known, release_id: value}.items() if r in installed}}


def _perf_changes(root: str, release_id: str, figures: dict) -> dict:
    """The state change that records `figures` for `release_id` ({} when there is nothing new)."""
    return _per_release_changes(root, "perf", release_id, figures)


def _verified(module: AnsibleModule, root: str, release_id: str, figures: dict) -> dict:
    """Record `release_id` verified here, with its perf figures, its parity record (O(parity)) and how its bake
    ended (O(bake))."""
    bake = module.params.get("bake") or ""
    _check_release_id(module, release_id)
    if release_id not in store.list_releases(root):
        module.fail_json(msg=f"release {release_id} is not installed under {store.releases_dir(root)}")
    good = store.read_state(root).get("good", [])
    perf = _perf_changes(root, release_id, figures)
    baked = _per_release_changes(root, "baked", release_id, bake)
    parity = _per_release_changes(root, "parity", release_id, module.params.get("parity") or {})
    if good and good[-1] == release_id and not perf and not baked and not parity:
        return {"changed": False, **store.summary(root)}
    if module.check_mode:
        return {"changed": True, **store.summary(root), "would": [f"record {release_id} as verified"]}
    failed = {r: g for r, g in (store.read_state(root).get("failed") or {}).items() if r != release_id}
    store.save_state(root, good=[r for r in good if r != release_id] + [release_id], failed=failed,
                     **perf, **baked, **parity)
    return {"changed": True, **store.summary(root)}


def _failed(module: AnsibleModule, root: str, release_id: str, gate: str, figures: dict) -> dict:
    """Record that `release_id` failed its gate `gate` here (a rollback to it is then refused by default)."""
    _check_release_id(module, release_id)
    if release_id not in store.list_releases(root) or release_id in store.read_state(root).get("good", []):
        return {"changed": False, **store.summary(root)}
    failed = dict(store.read_state(root).get("failed") or {})
    perf = _perf_changes(root, release_id, figures)
    if failed.get(release_id) == gate and not perf:
        return {"changed": False, **store.summary(root)}
    if module.check_mode:
        return {"changed": True, **store.summary(root), "would": [f"record {release_id} as failed ({gate})"]}
    store.save_state(root, failed={**failed, release_id: gate}, **perf)
    return {"changed": True, **store.summary(root)}


def _remove(module: AnsibleModule, root: str, release_id: str) -> dict:
    summary = store.summary(root)
    if release_id not in summary["releases"]:
        return {"changed": False, **summary}
    if release_id == summary["active"] or release_id in store.read_state(root).get("good", []):
        module.fail_json(msg=f"release {release_id} is active or verified on this host; only a temporary "
                             "release can be removed", **summary)
    if module.check_mode:
        return {"changed": True, **summary, "would": [f"remove release {release_id}"]}
    shutil.rmtree(os.path.join(store.releases_dir(root), release_id))
    # Forget it, so `previous` names what served before it again.
    state = store.read_state(root)
    history = [r for r in state.get("history", []) if r != release_id]
    before = [r for r in history if r != summary["active"]]
    previous = state.get("previous") if state.get("previous") != release_id else (before[-1] if before else None)
    store.save_state(root, history=history, previous=previous)
    return {"changed": True, **store.summary(root)}


def _query(root: str) -> dict:
    """The host's releases: active (with its content hash), previous, verified ones."""
    result = store.summary(root)
    if result["active"]:
        # An edited active release never counts as "this release is running": a deploy reinstalls it.
        result["active_tampered"] = store.tampered(root, result["active"])
        result["active_hash"] = "" if result["active_tampered"] else store.content_hash(root, result["active"])
    result["details"] = store.release_details(root, result)
    result["last_parity"], result["last_parity_record"] = store.last_parity(root, result)
    result["owner_id"] = ownership.read_owner(root).get("id")
    return result


def _records(root: str, release_id: str) -> dict:
    """spec.json and services.json of `release_id` here, base64 ('' where missing or unreadable), as spec and
    services."""
    out = {"spec": "", "services": ""}
    if not store.plain_release_id(release_id):
        return out  # not a name a release can have: none is installed under it
    for name in out:
        try:
            with open(os.path.join(store.releases_dir(root), release_id, f"{name}.json"), "rb") as fh:
                out[name] = base64.b64encode(fh.read()).decode("ascii")
        except OSError:
            pass
    return out


def _record_phase(module: AnsibleModule, lock: dict, release_id: str) -> None:
    """Record lock["phase"] with `release_id` as the target in the deploy lock this run holds."""
    missing = [k for k in ("path", "run_id", "phase") if not lock.get(k)]
    if missing:
        module.fail_json(msg=f"lock: needs {', '.join(missing)} (path, run_id and phase of the deploy lock)")
    try:
        deploy_lock.record_phase(lock["path"], lock["run_id"], lock["phase"], release_id)
    except deploy_lock.LockLost as exc:
        module.fail_json(msg=str(exc))


def _release_lock(module: AnsibleModule, lock: dict) -> bool:
    """Release the deploy lock run lock["run_id"] holds at lock["path"]; whether it was removed."""
    missing = [k for k in ("path", "run_id") if not lock.get(k)]
    if missing:
        module.fail_json(msg=f"release_lock: needs {', '.join(missing)} (path and run_id of the deploy lock)")
    released = deploy_lock.release(lock["path"], lock["run_id"])
    if released.get("holder"):
        module.warn(f"the deploy lock {lock['path']} was left in place: another run holds it now, "
                    f"{deploy_lock.describe(released['holder'])}")
    return bool(released["changed"])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "install_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "active", "verified", "failed", "absent", "query",
                                                 "purged"], "default": "query"},
            "failed_gate": {"type": "str", "default": ""},
            "prune": {"type": "bool", "default": True},
            "release_id": {"type": "str"},
            "records": {"type": "bool", "default": False},
            "records_of": {"type": "str", "default": ""},
            "files": {"type": "dict"},
            "bake": {"type": "str", "default": "", "choices": ["", "passed", "inconclusive"]},
            "keep": {"type": "int", "default": 5},
            "perf": {"type": "dict", "default": {}},
            "parity": {"type": "dict", "default": {}},
            "lock": {"type": "dict", "default": {}},
            "release_lock": {"type": "dict", "default": {}},
        },
        required_if=[("state", "present", ("release_id", "files")), ("state", "active", ("release_id",)),
                     ("state", "verified", ("release_id",)), ("state", "failed", ("release_id",)),
                     ("state", "absent", ("release_id",))],
        supports_check_mode=True,
    )
    p = module.params
    root = p["install_root"]
    if p["state"] == "query":
        found = _query(root)
        if p["records"] and p["release_id"]:
            found["records"] = _records(root, p["release_id"])
        module.exit_json(changed=False, **found)
    if p["state"] == "purged":
        try:
            purged, warning = purge.purge(root, module.check_mode)
        except ownership.Refused as exc:
            module.fail_json(msg=str(exc))
        if warning:
            module.warn(warning)
        module.exit_json(**purged)
    if p["state"] == "present":
        before = _query(root)
        installed = _install(module, root, p["release_id"], p["files"])
        if p["lock"] and not module.check_mode:  # a check run takes no lock, so it has none to update
            _record_phase(module, p["lock"], installed["release_id"])
        module.exit_json(before=before, **installed)
    if p["state"] == "verified":
        verified = _verified(module, root, p["release_id"], p["perf"])
        if p["release_lock"] and not module.check_mode:  # a check run takes no lock, so it has none to release
            verified["lock_released"] = _release_lock(module, p["release_lock"])
        module.exit_json(**verified)
    if p["state"] == "failed":
        failed = _failed(module, root, p["release_id"], p["failed_gate"] or "gates", p["perf"])
        if p["records_of"]:  # read-only, so in check mode too (as the restore's own read would)
            failed.update(records=_records(root, p["records_of"]), records_of=p["records_of"])
        module.exit_json(**failed)
    if p["state"] == "absent":
        module.exit_json(**_remove(module, root, p["release_id"]))
    module.exit_json(**_activate(module, root, p["release_id"], p["keep"], p["prune"]))


if __name__ == "__main__":
    main()
