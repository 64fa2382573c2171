#!/usr/bin/python
"""The host's digest salt: the key of the digests that stand for its secret env values in its releases."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_digest_salt
short_description: Read, or write once, the per-host key of the digests of secret env values
description:
  - A release shows each secret env value (spec.json, 0644; the serve scripts) only as a digest, so that a changed
    secret makes a new release. The digest is HMAC-SHA256 keyed by this host's salt, 32 random bytes kept in
    C(INSTALL_ROOT/secrets/digest_salt) (0400, root's, in the 0700 secrets folder), so that a reader of the release
    cannot confirm a guessed secret offline and one host's digests say nothing about another's.
  - O(state=read) (the plan, before anything is validated or written) returns the salt, or a new random one when
    there is none yet (RV(new)), which it does not write.
  - O(state=present) (the release install, after preflight) writes O(salt) when the file does not hold it; a link
    or anything but a regular file there is replaced, never followed.
  - O(state=folder) (the release install, before any secret file is written) makes C(INSTALL_ROOT/secrets) root's
    with group O(group), mode 0750, set on the open folder (never through a link), and records it in the install
    root's ownership marker as dsv4deploy's, with O(files), the names the install writes there - a purge removes
    those only. An older install's folder holding only our secret files is recorded as ours too.
  - O(state=absent) (an install root that stops running while its releases stay - the other slot of blue_green
    or of a roll's surge) removes the secret files the ownership marker records dsv4deploy wrote into
    C(INSTALL_ROOT/secrets), then the folder when dsv4deploy made it and nothing else is left there, as a purge
    does; anything else stays (RV(left_why) says why). A root without an ownership marker keeps everything.
  - With O(key_file) (the API key's file on this host), O(state=read) also returns the key's content as a digest
    keyed by the salt (RV(key_digest)), never the content, and the digest the active release was made with
    (RV(active_key_digest)); the release carries it, so that a rotated key makes a new release.
options:
  install_root:
    type: path
    required: true
    description: [The deployment's install root (the home, not a blue_green slot; O(state=absent) a slot's).]
  state:
    type: str
    choices: [read, present, folder, absent]
    default: read
    description: [What to do.]
  group:
    type: int
    default: 0
    description: [With O(state=folder), the group that reads the secrets (the service user's).]
  files:
    type: list
    elements: str
    default: []
    description: [With O(state=folder), the names of the secret files the install writes into the folder.]
  salt:
    type: str
    default: ""
    description: [With O(state=present), the salt to keep (64 hex, as O(state=read) returned it).]
  key_file:
    type: path
    default: ""
    description: [With O(state=read), the API key's file on this host (api_key.file), read without following a link.]
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  check_mode:
    support: full
    description: Reading changes nothing; a write is only reported.
  diff_mode:
    support: none
    description: The salt is a secret; run the task with no_log.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Remove the other slot's secret files (it runs nothing now)
  dsv4.deploy.dsv4_digest_salt:
    install_root: /opt/dsv4deploy/slot-b
    state: absent

- name: Read this host's digest salt (never logged)
  dsv4.deploy.dsv4_digest_salt:
    install_root: /opt/dsv4deploy
  register: dsv4_digest_salt
  no_log: true
"""

RETURN = r"""
salt:
  description: The salt (64 hex), a new one when RV(new).
  type: str
  returned: state=read
path:
  description: Where the salt is kept.
  type: str
  returned: always
new:
  description: There was no salt - RV(salt) is new, and the install writes it.
  type: bool
  returned: state=read
legacy:
  description: There was no salt and the active release shows unsalted digests (an older dsv4deploy), so the next
    release differs from it once, even when no secret changed.
  type: bool
  returned: state=read
key_digest:
  description: The API key's content (trailing newlines dropped, as the serve script reads it) as HMAC-SHA256
    under RV(salt), 12 hex; empty when O(key_file) could not be read (RV(key_problem) says why).
  type: str
  returned: state=read with O(key_file)
key_problem:
  description: Why O(key_file) could not be read (its path and the error, never its content); preflight refuses it.
  type: str
  returned: state=read with O(key_file) unreadable
removed:
  description: What O(state=absent) removed (or would), relative to the install root, e.g. V(secrets/api_key).
  type: list
  elements: str
  returned: state=absent
left_why:
  description: What O(state=absent) left under C(secrets), and why (not a file dsv4deploy wrote, a folder it did
    not make).
  type: dict
  returned: state=absent
active_key_digest:
  description: The key digest the active release's serve scripts name; empty when they name none.
  type: str
  returned: state=read
"""

import glob
import hashlib
import hmac
import os
import re
import secrets
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import purge, secrets_dir, trust
from ansible_collections.dsv4.deploy.plugins.module_utils.files import write_atomic

SALT_FILE = os.path.join("secrets", "digest_salt")
SALT = re.compile(r"[0-9a-f]{64}\Z")
# What an older dsv4deploy wrote into spec.json for each secret env value.
LEGACY_MARK = b"<secret sha256:"
# The line a serve script names its API key's digest on (templates/serve/_base.sh.j2).
KEY_MARK = re.compile(rb"^# The key's content, keyed by the host's digest salt: hmac ([0-9a-f]{12})", re.M)


def salt_path(root: str) -> str:
    """Where the host keeps its salt."""
    return os.path.join(root, SALT_FILE)


def read_salt(root: str) -> str | None:
    """The salt kept under `root`, or None when there is none (or what is there is not a salt file we wrote:
    a link, another kind of file, not root's or readable by others, other content - the install replaces it)."""
    path = salt_path(root)
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in trust.trusted_uids() or stat.S_IMODE(st.st_mode) & 0o077:
            return None
        text = trust.read_secret(path, trust.trusted_uids(), max_bytes=65).strip()
    except (OSError, UnicodeDecodeError, trust.Untrusted):
        return None
    return text if SALT.match(text) else None


def shows_unsalted(root: str) -> bool:
    """Whether the active release's spec.json shows unsalted digests (made before the salt)."""
    try:
        with open(os.path.join(root, "current", "spec.json"), "rb") as fh:
            return LEGACY_MARK in fh.read()
    except OSError:
        return False


def read(root: str) -> dict:
    """state=read: the salt kept, or a new one (not written)."""
    salt = read_salt(root)
    if salt is not None:
        return {"salt": salt, "new": False, "legacy": False}
    return {"salt": secrets.token_hex(32), "new": True, "legacy": shows_unsalted(root)}


def key_digest(path: str, salt: str) -> tuple[str, str]:
    """(digest, problem): the key file's content as the servers read it, keyed by `salt` (as
    dsv4deploy.spec.secret_env.api_key_digest computes it), or why the file could not be read."""
    try:
        content = trust.read_key(path)  # the one key-read path: no link followed, a regular file, a few KiB
    except (OSError, trust.Untrusted) as exc:
        return "", f"cannot read the API key file {path}: {getattr(exc, 'strerror', None) or exc}"
    return hmac.new(bytes.fromhex(salt), content.encode(), hashlib.sha256).hexdigest()[:12], ""


def active_key_digest(root: str) -> str:
    """The API key digest the active release's serve scripts name ("" when none does)."""
    for script in sorted(glob.glob(os.path.join(root, "current", "bin", "serve-*.sh"))):
        try:
            with open(script, "rb") as fh:
                found = KEY_MARK.search(fh.read())
        except OSError:
            continue
        if found:
            return found.group(1).decode()
    return ""


def keep(root: str, salt: str, check_mode: bool = False) -> bool:
    """state=present: write `salt` unless it is kept already; whether anything changed (or would)."""
    if not SALT.match(salt):
        raise ValueError("salt must be 64 lowercase hex, as state=read returned it")
    if read_salt(root) == salt:
        return False
    if not check_mode:
        # Replaces whatever is there (a link is replaced, not followed), root's on the open descriptor.
        write_atomic(salt_path(root), salt + "\n", mode=0o400, prefix=".tmp-salt-", owner=(os.geteuid(), os.getegid()))
    return True


def main() -> None:
    """Run the module."""
    module = AnsibleModule(
        argument_spec={
            "install_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["read", "present", "folder", "absent"],
                      "default": "read"},
            "group": {"type": "int", "default": 0},
            "files": {"type": "list", "elements": "str", "default": []},
            "salt": {"type": "str", "default": "", "no_log": True},
            "key_file": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    root = module.params["install_root"]
    out = {"path": salt_path(root)}
    if module.params["state"] == "read":
        answer = read(root)
        answer["active_key_digest"] = active_key_digest(root)
        if module.params["key_file"]:
            answer["key_digest"], problem = key_digest(module.params["key_file"], answer["salt"])
            if problem:
                answer["key_problem"] = problem
        module.exit_json(changed=False, **out, **answer)
    if module.params["state"] == "folder":
        try:
            changed = secrets_dir.ensure(root, module.params["group"], module.params["files"], module.check_mode)
        except (ValueError, OSError) as exc:
            module.fail_json(msg=f"cannot keep the secrets folder of {root}: {exc}", **out)
        module.exit_json(changed=changed, **out)
    if module.params["state"] == "absent":
        try:
            answer = purge.remove_secrets(root, module.check_mode)
        except OSError as exc:
            module.fail_json(msg=f"cannot remove the secret files under {root}: {exc}", **out)
        module.exit_json(**out, **answer)
    salt = module.params["salt"]
    if not os.path.isdir(os.path.dirname(out["path"])):
        if module.check_mode:  # the install's own check run does not make the folder either: it would, then this
            module.exit_json(changed=True, **out)
        module.fail_json(msg=f"{os.path.dirname(out['path'])} does not exist: the install makes it first", **out)
    try:
        changed = keep(root, salt, module.check_mode)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=f"cannot keep the digest salt in {out['path']}: {exc}", **out)
    module.exit_json(changed=changed, **out)


if __name__ == "__main__":
    main()
