"""Which gates may run at the same time: never one beside a gate it needs."""

from __future__ import annotations

import pytest
import yaml

from dsv4deploy.gates.chain import (
    GATE_NEEDS,
    GATES,
    chain_problem,
    counts_as_failed,
    group_problem,
    names_problems,
    run_chain,
)
from tests.integration.simhost import REPO


def test_independent_gates_may_run_together() -> None:
    for group in (["readiness"], ["config", "smoke"], ["needle", "soak"], ["config", "needle", "soak"]):
        assert group_problem(group) == "", group


@pytest.mark.parametrize(("group", "named"), [(["readiness", "config"], "config needs readiness"),
                                              (["smoke", "needle"], "needle needs smoke"),
                                              (["soak", "readiness"], "soak needs readiness")])
def test_a_gate_beside_one_it_needs_is_refused_naming_both(group: list[str], named: str) -> None:
    assert named in group_problem(group)


@pytest.mark.parametrize("opt_in", [[], ["perf"]], ids=["default", "with the opt-in perf gate last"])
def test_the_default_gate_order_never_runs_a_gate_before_or_beside_what_it_needs(opt_in: list[str]) -> None:
    names = yaml.safe_load((REPO / "roles" / "dsv4_gates" / "defaults" / "main.yml").read_text())["dsv4_gates_names"]
    done: set[str] = set()
    for entry in [*names, *opt_in]:
        group = [entry] if isinstance(entry, str) else entry
        assert group_problem(group) == ""
        for name in group:
            assert GATE_NEEDS[name] <= done, f"{name} runs before {GATE_NEEDS[name] - done}"
        done |= set(group)
    # Every gate but the opt-in perf and parity gates runs by default (perf: see
    # roles/dsv4_gates/defaults/main.yml; parity compares with the last good release's record), and the
    # bake, which the dsv4_bake role runs after them (dsv4_bake_s).
    assert done == set(GATES) - {"perf", "bake", "parity"} | set(opt_in)


def _chain_of(statuses: dict[str, str]):
    """run_one for run_chain: each gate's status as given; the calls in the order they began, grouped."""
    began: list[str] = []

    def run_one(name: str) -> dict[str, str]:
        began.append(name)
        return {"name": name, "status": statuses.get(name, "passed")}

    return run_one, began


def test_the_chain_starts_the_needle_and_the_soak_only_after_smoke_passed() -> None:
    groups = [["config", "smoke"], ["needle", "soak"]]
    run_one, began = _chain_of({})
    assert [g["name"] for g in run_chain(groups, run_one)] == ["config", "smoke", "needle", "soak"]
    assert set(began[:2]) == {"config", "smoke"} and set(began[2:]) == {"needle", "soak"}
    # A failed first request is smoke's: what needs it never starts, and the failure is the last result.
    run_one, began = _chain_of({"smoke": "failed"})
    assert [(g["name"], g["status"]) for g in run_chain(groups, run_one)] == [("config", "passed"),
                                                                               ("smoke", "failed")]
    assert "needle" not in began and "soak" not in began


def test_an_inconclusive_gate_refuses_the_release_unless_the_operator_says_pass() -> None:
    groups = [["smoke"], ["soak"], ["perf"]]
    run_one, _ = _chain_of({"soak": "inconclusive"})
    assert [g["name"] for g in run_chain(groups, run_one)] == ["smoke", "soak"]  # perf never starts
    assert counts_as_failed({"name": "soak", "status": "inconclusive"})
    run_one, _ = _chain_of({"soak": "inconclusive"})
    assert [g["name"] for g in run_chain(groups, run_one, inconclusive="pass")] == ["smoke", "soak", "perf"]
    assert not counts_as_failed({"name": "soak", "status": "inconclusive"}, "pass")
    # the bake keeps its own rule: inconclusive, the release stays (reported as not baked)
    assert not counts_as_failed({"name": "bake", "status": "inconclusive"})
    assert counts_as_failed({"name": "bake", "status": "failed"}, "pass")


def test_a_failed_config_gate_ends_the_chain_by_its_name_unless_told_to_keep_going() -> None:
    groups = [["config", "smoke"], ["needle", "soak"]]
    run_one, _ = _chain_of({"config": "failed"})
    assert [g["name"] for g in run_chain(groups, run_one) if g["status"] == "failed"] == ["config"]
    assert len(run_chain(groups, run_one)) == 2
    # An experiment's suite: every gate runs, a failure is data.
    assert [g["name"] for g in run_chain(groups, run_one, keep_going=True)] == ["config", "smoke", "needle", "soak"]


def test_a_chain_names_an_unknown_gate_or_one_beside_what_it_needs() -> None:
    assert "unknown gate smok" in chain_problem(["smok"])
    assert "needle needs smoke" in chain_problem(["smoke", "needle"])
    assert chain_problem(["needle", "soak"]) == ""


@pytest.mark.parametrize(("names", "named"), [
    ("[readiness,smoke]", "'[readiness,smoke]' is text, not a list of gates; fix: pass it as JSON"),
    (["readiness", "[config,smoke]"], "'[config,smoke]' is text"),
    (["readiness", "smok"], "unknown gate smok; choose from readiness"),
    (["readiness", ["smoke", "soak"]], "gate soak needs smoke passed first"),
    ([], "a list of gates is needed (got [])"),
    ({"readiness": True}, "a list of gates is needed"),
])
def test_a_gate_list_that_cannot_run_is_named_with_its_fix(names: object, named: str) -> None:
    problems = names_problems(names)
    assert len(problems) == 1 and problems[0].startswith("dsv4_gates_names: ") and named in problems[0]


@pytest.mark.parametrize("names", [["readiness", ["config", "smoke"], ["needle", "soak"], "perf"], ["readiness"],
                                   "readiness,smoke", ["readiness", "needle"]])
def test_a_gate_list_that_can_run_passes(names: object) -> None:
    assert names_problems(names) == []
