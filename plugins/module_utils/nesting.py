"""Install roots nested in one another, found on the host (standard library only).

A deployment's root holds its blue_green/surge slot at `<root>/slot-b`, which its stop and purge treat as
its own. A second deployment whose root lies inside the first's (or the first inside the second's) would be
stopped, purged or overwritten by the other. The install refuses such a root before it writes anything.
The slot itself (`<root>/slot-b` of a deployment) is the one nesting allowed: the controller refuses an
inventory install_root named like a slot (dsv4deploy.spec.values), so only a slot plan installs there.
"""

from __future__ import annotations

import os

from ansible_collections.dsv4.deploy.plugins.module_utils import ownership

# dsv4deploy.rollout.strategy.SLOT_DIR (tests/unit/plugins/module_utils/test_nesting.py keeps them equal).
SLOT_DIR = "slot-b"
# How deep below a root another deployment's root is looked for (our own entries are skipped).
DEPTH = 3


def holds_deployment(path: str) -> bool:
    """Whether `path` is a dsv4deploy install root: its ownership marker, or an older release's proof."""
    return os.path.isdir(path) and (bool(ownership.read_owner(path)) or ownership.is_legacy(path))


def _ancestors(root: str) -> list[str]:
    out = []
    for start in sorted({os.path.normpath(root), os.path.realpath(root)}):
        parent = os.path.dirname(start)
        while parent not in ("/", ""):
            out.append(parent)
            parent = os.path.dirname(parent)
    return sorted(set(out), key=len)


def _descendants(root: str) -> list[str]:
    """Deployment roots below `root` (its own slot and dsv4deploy's own entries aside; links not followed)."""
    found = []
    skip = set(ownership.OURS) | {SLOT_DIR}
    for top, dirs, _files in os.walk(root):
        depth = os.path.relpath(top, root).count(os.sep) + (top != root)
        if top != root and holds_deployment(top):
            found.append(top)
            dirs[:] = []
            continue
        dirs[:] = [] if depth >= DEPTH else sorted(
            d for d in dirs if not (top == root and d in skip) and not os.path.islink(os.path.join(top, d)))
    return found


def nesting_problem(root: str) -> str | None:
    """Why `root` cannot be an install root because of another deployment around or inside it (None: it can)."""
    for outer in _ancestors(root):
        if not holds_deployment(outer):
            continue
        if os.path.normpath(root) == os.path.join(outer, SLOT_DIR):
            continue  # that deployment's own slot
        inside = os.path.join(outer, SLOT_DIR)
        where = f"the blue_green slot {inside} of" if root.startswith(inside + os.sep) else "the install root of"
        return (f"install_root {root} lies inside {where} the deployment at {outer}, whose stop and purge would "
                "remove it; nothing was written. Fix: choose an install_root outside every other deployment's "
                "(e.g. a sibling such as /opt/dsv4deploy-b)")
    inner = _descendants(root) if os.path.isdir(root) else []
    if inner:
        return (f"install_root {root} holds the deployment at {inner[0]}, which this one's stop and purge "
                "would remove; nothing was written. Fix: choose an install_root that holds no other "
                "deployment (e.g. a sibling such as /opt/dsv4deploy-b)")
    return None
