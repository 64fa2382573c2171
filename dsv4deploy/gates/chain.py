"""The gates as a chain: which gate needs which passed first, the groups that may run together, and running
the groups in order (each only once every gate before it passed)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dsv4deploy.gates.result import GateStatus

GATES = ("readiness", "config", "smoke", "needle", "soak", "perf", "bake", "accuracy", "parity")

# What each gate needs passed before it means anything: every gate needs servers that are ready;
# the needle and the soak need the first real request through the PD path (smoke) behind them.
# Gates named together (a group in dsv4_gates_names) run at the same time, so none may need another.
GATE_NEEDS: dict[str, frozenset[str]] = {
    "readiness": frozenset(),
    "config": frozenset({"readiness"}),
    "smoke": frozenset({"readiness"}),
    "needle": frozenset({"readiness", "smoke"}),
    "soak": frozenset({"readiness", "smoke"}),
    "perf": frozenset({"readiness", "smoke"}),
    "bake": frozenset({"readiness", "smoke"}),
    "accuracy": frozenset({"readiness", "smoke"}),
    "parity": frozenset({"readiness", "smoke"}),
}


def group_problem(names: list[str]) -> str:
    """Why the gates `names` cannot run at the same time ('' when they can): none may need another."""
    if not names:
        return "name a gate to run"
    for name in names:
        beside = GATE_NEEDS.get(name, frozenset()) & set(names)
        if beside:
            return (f"gate {name} needs {', '.join(sorted(beside))} passed first: run them one after the other "
                    "(separate entries of dsv4_gates_names), not together")
    return ""


def chain_problem(names: list[Any]) -> str:
    """Why the group `names` cannot run ('' when it can): each a known gate, none needing another."""
    unknown = [str(n) for n in names if n not in GATES]
    if unknown:
        return f"unknown gate {', '.join(unknown)}; choose from {', '.join(GATES)}"
    return group_problem(names)


def names_problems(value: Any) -> list[str]:
    """Why ``dsv4_gates_names`` cannot be run ([] when it can): a list whose entries are gate names or lists of
    gate names that may run together. Checked by the plan, so a bad list fails before anything changes."""
    if isinstance(value, str):
        # As Ansible's list option reads text: `-e dsv4_gates_names=readiness,smoke` is two gates, while
        # `-e dsv4_gates_names=[a,b]` stays text, named below with the JSON fix.
        value = [value] if value.lstrip().startswith("[") else [v.strip() for v in value.split(",")]
    if not isinstance(value, list) or not value:
        example = "['readiness', ['config', 'smoke'], ['needle', 'soak']]"
        return [f"dsv4_gates_names: a list of gates is needed (got {value!r}); e.g. {example}"]
    problems = []
    for entry in value:
        if isinstance(entry, str) and entry.lstrip().startswith("["):
            problems.append(f"dsv4_gates_names: {entry!r} is text, not a list of gates; fix: pass it as JSON, "
                            f"e.g. -e '{{\"dsv4_gates_names\": [\"readiness\", [\"config\", \"smoke\"]]}}'")
            continue
        group = entry if isinstance(entry, list) else [entry]
        problem = chain_problem(group)
        if problem:
            problems.append(f"dsv4_gates_names: {problem} (entry {entry!r})")
    return problems


def counts_as_failed(gate: Mapping[str, Any], inconclusive: str = "fail") -> bool:
    """Whether a gate's result (as a dict) refuses the release: failed or error (could not measure), or
    inconclusive when ``inconclusive`` is "fail" (dsv4_gates_inconclusive). The bake keeps its own rule:
    inconclusive, the release stays."""
    status = gate["status"]
    return status in (GateStatus.FAILED, GateStatus.ERROR) or (
        status == GateStatus.INCONCLUSIVE and inconclusive == "fail" and gate.get("name") != "bake")


def run_chain(groups: list[list[str]], run_one: Callable[[str], dict[str, Any]],
              keep_going: bool = False, inconclusive: str = "fail") -> list[dict[str, Any]]:
    """Run each group's gates at the same time (`run_one(name)` -> the gate's result as a dict), the groups
    in order, each only once every gate before it passed (unless `keep_going`); the results, in order."""
    gates: list[dict[str, Any]] = []
    for names in groups:
        with ThreadPoolExecutor(len(names)) as pool:
            gates += list(pool.map(run_one, names))
        if not keep_going and any(counts_as_failed(g, inconclusive) for g in gates):
            break  # what follows needs these gates passed
    return gates
