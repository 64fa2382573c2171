"""Which gates may run at the same time: never one beside a gate it needs."""

from __future__ import annotations

from dsv4deploy.gate_runner import GATE_NEEDS, gate_groups


def test_the_deploy_gates_run_in_three_steps() -> None:
    assert gate_groups(["readiness", "config", "smoke", "needle", "soak"]) == [
        ["readiness"], ["config", "smoke"], ["needle", "soak"]]


def test_no_gate_runs_beside_or_before_what_it_needs() -> None:
    names = ["readiness", "smoke", "config", "soak", "needle"]
    groups = gate_groups(names)
    assert [n for g in groups for n in g] == names  # order kept
    done: set[str] = set()
    for group in groups:
        for name in group:
            assert GATE_NEEDS[name] <= done, f"{name} runs before or beside {GATE_NEEDS[name] - done}"
        done |= set(group)


def test_short_lists_and_unknown_names_stand_alone() -> None:
    assert gate_groups(["readiness", "smoke"]) == [["readiness"], ["smoke"]]
    assert gate_groups(["readiness"]) == [["readiness"]]
    assert gate_groups(["readiness", "mystery", "config"]) == [["readiness"], ["mystery"], ["config"]]
    assert gate_groups([]) == []
