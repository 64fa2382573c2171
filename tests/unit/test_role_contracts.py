"""Role contracts: each role reads only what it declares in meta/argument_specs.yml and hands its
results on through facts it documents; `__dsv4_*` variables stay inside the role (or playbook) that
uses them.

The checks read the YAML of roles/ and playbooks/ and the Jinja inside it (comments are not code).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))

PRIVATE = re.compile(r"(?<![\w.])__dsv4_\w+")
PUBLIC = re.compile(r"(?<![\w.'\"])dsv4_\w+")
JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
# Task keys whose value is a bare Jinja expression.
EXPRESSION_KEYS = {"when", "that", "failed_when", "changed_when", "until"}
INCLUDE_ROLE = {"include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"}
SET_FACT = {"set_fact", "ansible.builtin.set_fact"}
# The plan action sets a fact named by its `fact` option (default dsv4_plan).
PLAN_ACTION = {"dsv4_build_plan", "dsv4.deploy.dsv4_build_plan"}


def strings(node: Any) -> Iterator[str]:
    """Every string in a YAML document, keys included (comments are gone)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def tasks(node: Any) -> Iterator[dict]:
    """Every task (blocks, rescue and always entered; plays' tasks too) of a task file or playbook."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        if not {"hosts", "block", "import_playbook"} & set(node):
            yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from tasks(node.get(key))


def expressions(task: dict) -> Iterator[str]:
    """The Jinja a task evaluates: {{ }} and {% %} in any value, and its bare conditions."""
    for key, value in task.items():
        for text in strings(value):
            for match in JINJA.finditer(text):
                yield match.group(1) or match.group(2)
        if key in EXPRESSION_KEYS:
            yield from (text for text in strings(value) if "{{" not in text)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) or []


def role_files(role: Path) -> list[Path]:
    return sorted((role / "tasks").glob("*.yml")) + sorted((role / "defaults").glob("*.yml"))


def produced(documents: list[Any]) -> set[str]:
    """Variables the tasks set: set_fact keys, registers, loop variables, task vars, plan facts."""
    names: set[str] = set()
    for task in (t for doc in documents for t in tasks(doc)):
        for key, value in task.items():
            if key in SET_FACT and isinstance(value, dict):
                names |= set(value)
            elif key in PLAN_ACTION:
                fact = (value or {}).get("fact", "dsv4_plan")
                names.add(fact)
                if fact == "dsv4_plan":  # a deploy's plan has more facts: the settings weaker than the spec,
                    names |= {"dsv4_plan_weakened", "dsv4_plan_key_changed"}  # the hosts whose API key changed
        if "register" in task:
            names.add(task["register"])
        names.add((task.get("loop_control") or {}).get("loop_var", "item"))
        if not INCLUDE_ROLE & set(task):  # an include's vars are the included role's inputs
            names |= set(task.get("vars") or {})
    return names


def included_roles(documents: list[Any]) -> set[str]:
    return {str(task[key]["name"]).rsplit(".", 1)[-1]
            for doc in documents for task in tasks(doc) for key in INCLUDE_ROLE & set(task)}


def specs(role: Path) -> dict:
    return load(role / "meta" / "argument_specs.yml")["argument_specs"]


def declared(role: Path) -> set[str]:
    return {name for entry in specs(role).values() for name in entry.get("options") or {}}


def test_private_variables_stay_in_one_role_or_playbook() -> None:
    users: dict[str, set[str]] = defaultdict(set)
    units = {f"roles/{role.name}": role_files(role) for role in ROLES} | {
        f"playbooks/{p.name}": [p] for p in PLAYBOOKS}
    for unit, files in units.items():
        for path in files:
            for text in strings(load(path)):
                for name in PRIVATE.findall(text):
                    users[name].add(unit)
    shared = {name: sorted(where) for name, where in users.items() if len(where) > 1}
    assert not shared, f"hand these on as documented dsv4_* facts instead: {shared}"


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_a_role_declares_every_variable_it_reads_from_outside(role: Path) -> None:
    documents = [load(p) for p in sorted((role / "tasks").glob("*.yml"))]
    defaults = {name for p in (role / "defaults").glob("*.yml") for name in (load(p) or {})}
    reads = {name for doc in documents for task in tasks(doc) for expr in expressions(task)
             for name in PUBLIC.findall(expr)}
    reads |= {name for p in (role / "defaults").glob("*.yml") for text in strings(load(p))
              for expr in JINJA.findall(text) for name in PUBLIC.findall("".join(expr))}
    # Facts of the roles this one runs itself are not inputs of it.
    available = produced(documents) | defaults
    for name in included_roles(documents) - {role.name}:
        available |= produced([load(p) for p in sorted((REPO / "roles" / name / "tasks").glob("*.yml"))])
    undeclared = sorted(reads - available - declared(role))
    assert not undeclared, f"{role.name} reads these without declaring them in meta/argument_specs.yml: {undeclared}"
    assert defaults <= declared(role), f"{role.name}: defaults not declared: {sorted(defaults - declared(role))}"


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_a_role_documents_every_public_fact_it_sets(role: Path) -> None:
    documents = [load(p) for p in sorted((role / "tasks").glob("*.yml"))]
    text = " ".join(strings([entry.get("description", "") for entry in specs(role).values()]))
    sets = {name for name in produced(documents) if name.startswith("dsv4_")}
    sets -= {name for doc in documents for task in tasks(doc) for name in task.get("vars") or {}}
    missing = sorted(name for name in sets if f"C({name})" not in text)
    assert "Facts this" in text, f"{role.name}: say which facts it sets in its argument_specs description"
    assert not missing, f"{role.name} sets facts its argument_specs description does not name: {missing}"


def run_on_localhost(play_tasks: list[dict], tmp_path: Path) -> tuple[int, str]:
    """Run these tasks in a play on localhost with the checkout's roles; its exit code and output."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "connection": "local",
                                         "tasks": play_tasks}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    run = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(playbook)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout + run.stderr


@pytest.mark.parametrize(("role", "missing"), [("dsv4_gates", "dsv4_plan_host"), ("dsv4_release", "dsv4_plan")])
def test_a_role_run_without_its_inputs_stops_at_its_start_naming_them(
        role: str, missing: str, tmp_path: Path) -> None:
    returncode, out = run_on_localhost([
        {"name": "Use the role alone", "ansible.builtin.include_role": {"name": role}},
        {"name": "Not reached", "ansible.builtin.debug": {"msg": "REACHED"}}], tmp_path)
    assert returncode != 0, out
    assert "Validation of arguments failed" in out and missing in out, out
    assert "REACHED" not in out


# The include graph: roles include each other only through entry points their meta/argument_specs.yml
# declares, never in a loop, at most MAX_DEPTH includes deep from a playbook (docs/interfaces.md).
MAX_DEPTH = 4
MAX_CONDITION = 100
INCLUDE_TASKS = {"include_tasks", "import_tasks", "ansible.builtin.include_tasks", "ansible.builtin.import_tasks"}
ROLE_NAMES = {role.name for role in ROLES}


def short(name: Any) -> str:
    """A role's name without its collection (dsv4.deploy.dsv4_run -> dsv4_run)."""
    return str(name).rsplit(".", 1)[-1]


def includes(path: Path, role: str | None) -> list[tuple[str, str]]:
    """The (role, task file stem) nodes a task file or playbook includes: include_tasks (its own role's files),
    include_role/import_role (tasks_from, default main) and a play's roles:."""
    out: list[tuple[str, str]] = []
    documents = load(path)
    for task in tasks(documents):
        for key in INCLUDE_TASKS & set(task):
            value = task[key]
            name = value.get("file") if isinstance(value, dict) else value
            out.append((str(role), Path(str(name)).stem))
        for key in INCLUDE_ROLE & set(task):
            out.append((short(task[key]["name"]), Path(str(task[key].get("tasks_from", "main"))).stem))
    for play in documents if isinstance(documents, list) else []:
        for entry in (play.get("roles") or []) if isinstance(play, dict) else []:
            out.append((short(entry if isinstance(entry, str) else entry.get("role", entry.get("name"))), "main"))
    return out


def graph() -> dict[tuple[str, str], list[tuple[str, str]]]:
    return {(role.name, p.stem): includes(p, role.name)
            for role in ROLES for p in sorted((role / "tasks").glob("*.yml"))}


def depth(node: tuple[str, str], edges: dict, seen: frozenset = frozenset()) -> int:
    """The longest chain of includes below a task file (a loop would be endless: counted once)."""
    return max((1 + depth(nxt, edges, seen | {node}) for nxt in edges.get(node, []) if nxt not in seen | {node}),
               default=0)


def test_no_role_includes_a_role_that_includes_it_back() -> None:
    edges = graph()
    calls: dict[str, set[str]] = defaultdict(set)
    for (role, _), targets in edges.items():
        calls[role] |= {target for target, _ in targets if target != role and target in ROLE_NAMES}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in calls[start])

    loops = sorted(role for role in calls if reaches(role, role, {role}))
    assert not loops, f"these roles include a role that includes them back: {loops}"


def test_every_include_role_lands_on_an_entry_point_its_role_declares() -> None:
    sources = [(p, role.name) for role in ROLES for p in sorted((role / "tasks").glob("*.yml"))]
    sources += [(p, None) for p in PLAYBOOKS]
    undeclared = sorted(f"{p.relative_to(REPO)} -> {target}:{entry}"
                        for p, role in sources for target, entry in includes(p, role)
                        if target != role and target in ROLE_NAMES
                        and entry not in specs(REPO / "roles" / target))
    assert not undeclared, f"declare these entry points in meta/argument_specs.yml, or call one that is: {undeclared}"


# The layers, top down. A role includes only roles of a layer below its own (its own task files aside): a
# strategy never calls another one, and no shared step calls up into a strategy or the orchestrator, so what
# an earlier run left is dispatched by the orchestrator alone (docs/interfaces.md).
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("orchestrators", frozenset({"dsv4_rollout", "dsv4_isolate"})),
    ("strategies", frozenset({"dsv4_blue_green", "dsv4_blue_green_hosts", "dsv4_rolling"})),
    ("steps that run other steps", frozenset({"dsv4_restore", "dsv4_bake"})),
    ("the run on what is installed", frozenset({"dsv4_run"})),
    ("steps", frozenset({"dsv4_plan", "dsv4_preflight", "dsv4_service", "dsv4_gates", "dsv4_report",
                         "dsv4_verify_timer"})),
    ("release files", frozenset({"dsv4_release"})),
)


def layer_of(role: str) -> int:
    """The index of a role's layer in LAYERS (0 the top); -1 for a role placed in none."""
    return next((i for i, (_, roles) in enumerate(LAYERS) if role in roles), -1)


def test_every_role_has_one_layer() -> None:
    placed = [role for _, roles in LAYERS for role in roles]
    assert sorted(placed) == sorted(set(placed)), f"a role is in two layers: {placed}"
    unplaced = sorted(ROLE_NAMES - set(placed))
    assert not unplaced, f"place these roles in LAYERS (tests/unit/test_role_contracts.py): {unplaced}"


def test_no_role_includes_one_of_its_own_layer_or_a_higher_one() -> None:
    upward = sorted(f"roles/{role}/tasks/{stem}.yml ({LAYERS[layer_of(role)][0]}) -> {target}:{entry} "
                    f"({LAYERS[layer_of(target)][0]})"
                    for (role, stem), targets in graph().items() for target, entry in targets
                    if target != role and target in ROLE_NAMES and layer_of(target) <= layer_of(role))
    assert not upward, f"include only roles of a lower layer (the caller above dispatches instead): {upward}"


# The strategy contract: every strategy role declares these entry points (more of its own beside them). One
# that has nothing to do for a strategy is a no-op that says why, run by the test below.
STRATEGY_ENTRY_POINTS = {"main", "undo", "repair", "settle"}


# Strategies whose contract is still being written elsewhere: the mark goes once they declare it (strict: then
# it fails).
CONTRACT_PENDING: dict[str, str] = {}


@pytest.mark.parametrize("role", [
    pytest.param(role, marks=pytest.mark.xfail(strict=True, reason=CONTRACT_PENDING[role]))
    if role in CONTRACT_PENDING else role
    for role in sorted(LAYERS[1][1])])
def test_every_strategy_declares_the_strategy_entry_points(role: str) -> None:
    missing = sorted(STRATEGY_ENTRY_POINTS - set(specs(REPO / "roles" / role)))
    assert not missing, f"roles/{role}/meta/argument_specs.yml: declare the strategy entry points {missing}"


def public_facts_set(role: Path) -> dict[str, list[str]]:
    """Each public fact a role's tasks set (set_fact keys, registers), with the task files that set it."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted((role / "tasks").glob("*.yml")):
        for task in tasks(load(path)):
            names = [name for key in SET_FACT & set(task) if isinstance(task[key], dict) for name in task[key]]
            names += [task["register"]] if isinstance(task.get("register"), str) else []
            for name in names:
                if not name.startswith("__") and name != "cacheable":
                    found[name].add(path.name)
    return {name: sorted(files) for name, files in found.items()}


def owner_of(fact: str) -> str | None:
    """The role a public fact belongs to by its name (dsv4_<role> or dsv4_<role>_*, the longest role name first)."""
    return next((role for role in sorted(ROLE_NAMES, key=len, reverse=True)
                 if fact == role or fact.startswith(f"{role}_")), None)


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_a_role_sets_no_fact_of_another_role(role: Path) -> None:
    """Each fact has one writer, the role it is named after: a role that needs another's fact changed asks that
    role (an entry point such as dsv4_plan's host or dsv4_gates' begin), so its owner's files say every way it
    changes."""
    set_here = public_facts_set(role)
    for path in sorted((role / "tasks").glob("*.yml")):
        for task in tasks(load(path)):
            for key in PLAN_ACTION & set(task):
                set_here.setdefault((task[key] or {}).get("fact", "dsv4_plan"), []).append(path.name)
    foreign = {name: files for name, files in set_here.items()
               if not name.startswith("__") and owner_of(name) not in (None, role.name)}
    assert not foreign, f"roles/{role.name} sets facts of other roles: {foreign}; ask their owner (an entry point)"


@pytest.mark.parametrize("role", sorted(LAYERS[1][1]))
def test_every_strategy_sets_only_its_outcome_fact(role: str) -> None:
    """A strategy hands on one public fact, dsv4_<strategy>_outcome; registers and the rest are `__dsv4_*`."""
    outcome = f"{role}_outcome"
    others = {name: files for name, files in public_facts_set(REPO / "roles" / role).items() if name != outcome}
    assert not others, (f"roles/{role} sets public facts beside {outcome}: {others}; fold them into {outcome} (a "
                        f"dict: stage, changed, verdict, serving, line, and the strategy's own) or name them __dsv4_*")
    assert outcome in public_facts_set(REPO / "roles" / role), f"roles/{role} never sets {outcome}"


def test_a_roll_s_settle_changes_nothing_and_says_so(tmp_path: Path) -> None:
    """rolling keeps no previous release warm: its settle is a real no-op, nothing changed, settled none."""
    returncode, out = run_on_localhost([
        {"name": "Settle", "ansible.builtin.include_role": {"name": "dsv4_rolling", "tasks_from": "settle"}},
        {"name": "Show", "ansible.builtin.debug": {"msg": "SETTLED={{ dsv4_rolling_outcome.settled }}"}}], tmp_path)
    assert returncode == 0, out
    assert "Nothing to settle (a roll keeps no previous release warm)" in out, out
    assert "SETTLED=none" in out and "changed=0" in out, out


def test_includes_run_at_most_four_deep_from_any_playbook() -> None:
    edges = graph()
    deep = {p.name: 1 + max(depth(node, edges) for node in nodes)
            for p in PLAYBOOKS if (nodes := [n for n in includes(p, None) if n in edges])}
    assert deep, "no playbook includes a role"
    assert max(deep.values()) <= MAX_DEPTH, f"include depth per playbook (at most {MAX_DEPTH}): {deep}"


def test_no_include_file_name_is_computed() -> None:
    computed = sorted(f"{p.relative_to(REPO)}: {task.get('name')}"
                      for p in [*PLAYBOOKS, *(q for role in ROLES for q in sorted((role / "tasks").glob("*.yml")))]
                      for task in tasks(load(p))
                      for key in (INCLUDE_TASKS | INCLUDE_ROLE) & set(task)
                      if "{{" in " ".join(strings(task[key])))
    assert not computed, f"name the file each include runs (a when: per file instead): {computed}"


def test_every_condition_is_short_enough_to_read() -> None:
    """A when: is a YAML list of short clauses, or a named variable in the role's vars/main.yml."""
    long = sorted(f"{p.relative_to(REPO)}: {task.get('name')} ({len(clause)} characters)"
                  for p in [*PLAYBOOKS, *(q for role in ROLES for q in sorted((role / "tasks").glob("*.yml")))]
                  for task in tasks(load(p))
                  for clause in (" ".join(str(c).split()) for c in
                                 (task["when"] if isinstance(task.get("when"), list) else [task.get("when") or ""]))
                  if len(clause) > MAX_CONDITION)
    assert not long, f"split these into a list of clauses, or name them in vars/main.yml: {long}"


def test_whether_a_release_serves_counts_programs_still_starting() -> None:
    """A service's `serving` (running, or STARTING within supervisord's startsecs) decides whether a release
    serves; `running` alone would send a deploy made within startsecs of the last start to recreate's outage."""
    by_running = sorted(f"{p.relative_to(REPO)}: {task.get('name')}"
                        for role in ROLES for p in [*sorted((role / "tasks").glob("*.yml")), role / "vars" / "main.yml"]
                        if p.exists() for task in tasks(load(p)) if isinstance(task, dict)
                        for expr in (expressions(task) if p.parent.name == "tasks" else strings(task))
                        if re.search(r"attr\(\s*'value\.running'", expr))
    assert not by_running, f"judge services by value.serving, not value.running: {by_running}"


def test_every_way_the_rollout_fails_ends_in_its_outcome_file() -> None:
    """The rollout's failures end in one file (report, outcome record, one line): no other task file of the role
    fails the play itself."""
    failing = sorted(p.name for p in (REPO / "roles" / "dsv4_rollout" / "tasks").glob("*.yml")
                     for task in tasks(load(p)) if {"fail", "ansible.builtin.fail"} & set(task))
    assert failing == ["outcome.yml"], f"end these through tasks/outcome.yml: {failing}"


def test_no_role_but_dsv4_plan_sets_the_plan() -> None:
    """The plan is one role's fact: a role that acts on another plan for a while (blue_green's slot, a roll's step, a
    restored release) passes it to the role it includes as that role's input (dsv4_gates_plan, dsv4_release_plan),
    so what the plan is never depends on which strategy ran last."""
    units = {f"roles/{role.name}": [load(p) for p in sorted((role / "tasks").glob("*.yml"))]
             for role in ROLES if role.name != "dsv4_plan"}
    units |= {f"playbooks/{p.name}": [load(p)] for p in PLAYBOOKS}
    setters = sorted(unit for unit, documents in units.items()
                     if "dsv4_plan" in produced(documents)
                     or any("dsv4_plan" in (task.get("vars") or {})
                            for doc in documents for task in tasks(doc) if INCLUDE_ROLE & set(task)))
    assert not setters, f"only roles/dsv4_plan sets dsv4_plan; pass the plan as the included role's input: {setters}"
