"""Misspelt inventory variables: a name close to one dsv4deploy reads is refused with "did you mean".

A top-level variable the spec does not know is not an error by itself (the inventory has its own
variables, and Ansible its own), so a typo such as `index_top_k: 1024` would pass silently and
deploy the default. So every inventory variable is compared with the names dsv4deploy reads:

- the spec model's fields (`dsv4deploy.spec`: deployment-wide and host settings),
- the gates' settings (`dsv4deploy.gates.runner.GateSettings`),
- the playbook inputs as the code defines them: every role's `meta/argument_specs.yml` options (and
  their aliases), every role's `defaults/main.yml`, the plays' `vars:`, the variables the roles
  and playbooks read with `| default(...)`, and `dsv4deploy.inventory.names.known_names()` (each input's name
  and its deprecated alias) where that module exists.

A name is refused when it is close to a known one (edit distance, case and `_`/`-` aside, or a known
name of 8 characters or more followed by `_...`) and is neither known itself, nor Ansible's (`ansible_*`,
magic and reserved names), nor listed in the inventory's `dsv4_allow_vars`.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from dsv4deploy import PACKAGE_DIR
from dsv4deploy.inventory import yaml_fast
from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS, Problem

# The inventory's own variables that only look like ours: `dsv4_allow_vars: [index_top_k_note]`.
ALLOW_VAR = "dsv4_allow_vars"
# Ansible's magic variables (docs: "Special Variables") that an inventory may legitimately set or use.
ANSIBLE_MAGIC = frozenset({
    "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short", "inventory_dir",
    "inventory_file", "playbook_dir", "play_hosts", "role_name", "role_names", "role_path", "omit",
    "environment",
})
# A role or playbook reading a variable with a fallback: `NAME | default(...)`.
_DEFAULTED = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\|\s*default\(")
# A known name this long, followed by `_something`, is a stem (index_topk_decode, server_env_prefill).
STEM_MIN = 8


def _collection_root() -> Path | None:
    """The folder holding `roles/` and `playbooks/`: the clone, else the installed collection."""
    clone = PACKAGE_DIR.parent
    if (clone / "roles").is_dir():
        return clone
    for entry in sys.path:
        candidate = Path(entry or ".") / "ansible_collections" / "dsv4" / "deploy"
        if (candidate / "roles").is_dir():
            return candidate
    return None


def _yaml(path: Path) -> object:
    try:
        return yaml_fast.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def playbook_inputs(root: Path | None = None) -> frozenset[str]:
    """Every variable the roles and playbooks take as input, read from where they define it."""
    root = root if root is not None else _collection_root()
    if root is None:
        return frozenset()
    names: set[str] = set()
    for spec_file in sorted(root.glob("roles/*/meta/argument_specs.yml")):
        data = _yaml(spec_file)
        entries = data.get("argument_specs", {}) if isinstance(data, dict) else {}
        for entry in entries.values() if isinstance(entries, dict) else []:
            for name, option in (entry or {}).get("options", {}).items():
                names.add(str(name))
                names.update(str(a) for a in (option or {}).get("aliases", []) or [])
    for defaults in sorted(root.glob("roles/*/defaults/main.yml")):
        data = _yaml(defaults)
        names.update(str(k) for k in data) if isinstance(data, dict) else None
    for play_file in sorted(root.glob("playbooks/*.yml")):
        plays = _yaml(play_file)
        for play in plays if isinstance(plays, list) else []:
            if isinstance(play, dict) and isinstance(play.get("vars"), dict):
                names.update(str(k) for k in play["vars"])
    for source in sorted([*root.glob("roles/*/tasks/*.yml"), *root.glob("roles/*/defaults/*.yml"),
                          *root.glob("playbooks/*.yml")]):
        try:
            names.update(_DEFAULTED.findall(source.read_text(encoding="utf-8")))
        except OSError:
            continue
    return frozenset(names)


def _declared_inputs() -> set[str]:
    """The playbook inputs inventory/names.py declares (new names and their deprecated aliases), where it exists."""
    try:
        from dsv4deploy.inventory import names
    except ImportError:  # a release without that module: the roles' and playbooks' files say it all
        return set()
    return set(names.known_names())


@functools.cache
def known_names() -> frozenset[str]:
    """Every variable name dsv4deploy reads (spec fields, gate settings, playbook inputs)."""
    from dsv4deploy.gates.runner import GateSettings

    return frozenset({*DEPLOYMENT_KEYS, *HOST_KEYS, *GateSettings.model_fields, *playbook_inputs(),
                      *_declared_inputs(), ALLOW_VAR})


def is_ansibles(name: str) -> bool:
    """Ansible's own variables: connection and behaviour settings, magic and reserved names."""
    if name.startswith("ansible_") or name in ANSIBLE_MAGIC:
        return True
    try:
        from ansible import constants as C
        from ansible.vars.reserved import get_reserved_names
    except ImportError:  # pragma: no cover - ansible-core is a dependency
        return False
    return name in C.INTERNAL_STATIC_VARS or name in get_reserved_names()


def _normal(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[len(b)]


def _allowed_distance(known: str) -> int:
    # Short names are close to many words: only the longer ones tolerate two edits.
    return 0 if len(known) <= 4 else 1 if len(known) <= 7 else 2


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` is probably a misspelling of, or None."""
    best: tuple[int, str] | None = None
    for candidate in sorted(known):
        if _normal(candidate) == _normal(name):
            return candidate
        limit = _allowed_distance(candidate)
        if abs(len(name) - len(candidate)) > limit:
            continue  # the distance is at least the difference in length: too far, no need to compute it
        d = distance(name.lower(), candidate)
        if d <= limit and (best is None or d < best[0]):
            best = (d, candidate)
    if best:
        return best[1]
    stems = [k for k in sorted(known, key=len, reverse=True) if len(k) >= STEM_MIN and name.startswith(k + "_")]
    return stems[0] if stems else _shortened_or_reworded(name, known)


# Words a setting's name may gain or lose without meaning another one: gpu_memory(_gib), listen(_address).
_WORD = re.compile(r"[a-z0-9]+")
# How alike (difflib's ratio) a name of that many characters must be to a known one: gpu_mem_gib ~ gpu_memory_gib.
SIMILAR = 0.85
SIMILAR_MIN = 8


def _shortened_or_reworded(name: str, known: Iterable[str]) -> str | None:
    """A known name `name` shortens (gpu_memory: gpu_memory_gib), extends by one word (listen_address: listen),
    or closely resembles (gpu_mem_gib: gpu_memory_gib); None otherwise."""
    import difflib

    words = _WORD.findall(name.lower())
    by_words = sorted(k for k in known if len(words) >= 2 and _WORD.findall(k)[: len(words)] == words
                      and k.startswith(name.lower()))
    if by_words:
        return min(by_words, key=len)
    longer = sorted((k for k in known if len(k) >= 6 and name.lower().startswith(k + "_")
                     and len(_WORD.findall(name)) == len(_WORD.findall(k)) + 1), key=len, reverse=True)
    if longer:
        return longer[0]
    if len(name) < SIMILAR_MIN:
        return None
    close = difflib.get_close_matches(name.lower(), sorted(k for k in known if len(k) >= SIMILAR_MIN), n=1,
                                      cutoff=SIMILAR)
    return close[0] if close else None


def misspelt(origins: Mapping[str, list[str]], allowed: Iterable[str] = (),
             known: frozenset[str] | None = None) -> list[Problem]:
    """A problem for every variable in `origins` (name -> where it is set) close to a known name.

    `allowed` is the inventory's `dsv4_allow_vars`: names it keeps on purpose.
    """
    from dsv4deploy.gates.runner import GATE_VAR_PREFIXES

    known = known if known is not None else known_names()
    allow = set(allowed)
    out = []
    for name in sorted(origins):
        # The gates' prefixes are judged by dsv4deploy.gates.runner, which names every unknown one.
        if name in known or name in allow or is_ansibles(name) or name.startswith(GATE_VAR_PREFIXES):
            continue
        meant = closest(name, known)
        if meant is None:
            continue
        where = ", ".join(origins[name]) or "the inventory"
        out.append(Problem(field=name, message=f"is not a variable dsv4deploy reads (set in {where})",
                           fix=f"did you mean {meant}? rename it to {meant}, or, if it is the inventory's own "
                               f"variable, list it in {ALLOW_VAR}"))
    return out


def allow_list(value: object) -> tuple[list[str], list[Problem]]:
    """`dsv4_allow_vars` as a list of names, or the problem with it."""
    if value is None:
        return [], []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value), []
    return [], [Problem(field=ALLOW_VAR, message=f"must be a list of variable names (got {value!r})",
                        fix=f"write {ALLOW_VAR}: [name, ...]")]
