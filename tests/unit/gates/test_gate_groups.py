"""Which gates may run at the same time: never one beside a gate it needs."""

from __future__ import annotations

import pytest
import yaml

from dsv4deploy.gate_runner import GATE_NEEDS, GATES, group_problem
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
    # Every gate but the opt-in perf gate runs by default (perf: see roles/dsv4_gates/defaults/main.yml), and
    # the bake, which the dsv4_bake role runs after them (dsv4_bake_s).
    assert done == set(GATES) - {"perf", "bake"} | set(opt_in)
