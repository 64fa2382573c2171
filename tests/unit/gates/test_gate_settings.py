"""Gate settings from inventory variables: typos are errors, and the needle requirement is a promise."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dsv4deploy.gates.runner import (
    GateSettings,
    GateSettingsError,
    plan_index_topk,
    retired_warnings,
    settings_from_vars,
    weakened,
)


def same(value):
    return value


def test_a_misspelt_gate_variable_is_named_with_its_likely_meaning():
    with pytest.raises(GateSettingsError) as exc:
        settings_from_vars({"needle_lenghts": [1000], "soak_sesions": 3, "topology": "pd"}, same)
    assert exc.value.problems == ["unknown gate variable needle_lenghts; did you mean needle_lengths?",
                                  "unknown gate variable soak_sesions; did you mean soak_sessions?"]


def test_an_unknown_override_and_a_bad_value_are_both_reported():
    with pytest.raises(GateSettingsError) as exc:
        settings_from_vars({"soak_concurrency": 0}, same, {"deadline": 3})
    text = "; ".join(exc.value.problems)
    assert "unknown gate variable deadline" in text and "soak_concurrency" in text


def test_the_requirement_follows_index_topk_unless_set():
    assert settings_from_vars({}, same, index_topk=1024).required_tokens(1024) == 5500
    assert settings_from_vars({}, same, index_topk=512).required_tokens(512) == 2000
    assert settings_from_vars({}, same).required_tokens(None) == 2000  # DeepSeek-V4's default is 512
    assert settings_from_vars({"needle_required_tokens": 3000}, same).required_tokens(1024) == 3000


def test_a_grid_that_cannot_reach_the_requirement_is_refused_naming_it():
    with pytest.raises(GateSettingsError) as exc:
        settings_from_vars({"needle_required_tokens": 5500, "needle_lengths": [1000, 2000, 4000]}, same)
    assert exc.value.problems == [
        "needle_lengths [1000, 2000, 4000] cannot reach the required 5500 tokens (needle_required_tokens): "
        "add a length of at least 5500, e.g. [1000, 2000, 4000, 5500]"]
    with pytest.raises(GateSettingsError, match="the default for index_topk 1024"):
        settings_from_vars({"needle_lengths": [1000, 4000]}, same, index_topk=1024)
    assert settings_from_vars({"needle_lengths": [1000, 4000], "needle_required_tokens": 0}, same)


def test_the_plan_index_topk_is_the_smallest_any_server_runs():
    plan = {"expected_overrides": {"prefill": {"index_topk": 1024}, "decode": {"index_topk": 512}}}
    assert plan_index_topk(plan) == 512
    assert plan_index_topk({"expected_overrides": {"combined": {}}}) is None


def test_the_retired_perf_enabled_is_accepted_with_a_warning_saying_what_to_do_instead() -> None:
    settings = settings_from_vars({"perf_enabled": False}, lambda v: v)
    assert "perf_enabled" not in GateSettings.model_fields and settings.perf_requests == 16
    (warning,) = retired_warnings({"perf_enabled": False})
    assert warning.startswith("'perf_enabled' is no longer read: the perf gate is opt-in")
    assert "dsv4_gates_names" in warning
    assert retired_warnings({"perf_requests": 4}) == []


def test_the_readiness_deadline_is_the_settings_then_the_model_profiles_then_600() -> None:
    assert GateSettings().readiness_deadline() == 600
    assert GateSettings().readiness_deadline({"readiness_deadline_s": 4500}) == 4500
    assert GateSettings(readiness_deadline_s=15).readiness_deadline({"readiness_deadline_s": 4500}) == 15

def _weak(index_topk=1024, **variables):
    from dsv4deploy.gates.runner import settings_from_vars, weakened

    settings = settings_from_vars({k: v for k, v in variables.items() if not k.startswith("dsv4_")}, lambda v: v,
                                  None, index_topk)
    return weakened(settings, index_topk, variables, lambda v: v)


def test_the_defaults_are_not_weakened():
    assert _weak() == [] and _weak(index_topk=512) == []


def test_each_setting_weaker_than_the_spec_implies_is_named():
    found = _weak(needle_required_tokens=2000, soak_max_corruption_rate=0.2, soak_enabled=False,
                  dsv4_gates_names=["readiness", ["config", "smoke"], "needle"], dsv4_gates_inconclusive="pass",
                  dsv4_bake_s=600)
    assert found == [
        "needle_required_tokens 2000 is below the 5500 that index_topk 1024 implies",
        "soak_max_corruption_rate 0.2 is above the default 0.05",
        "soak_enabled is false",
        "soak is left out of dsv4_gates_names",
        "dsv4_gates_inconclusive is pass (an undecided gate lets the release through)",
        "dsv4_bake_canary_tokens 1000 is shorter than the needle requirement 2000",
    ]


def test_a_weaker_needle_rule_or_a_larger_retry_share_is_named_and_a_stricter_one_is_not():
    assert _weak(needle_trials=3, needle_min_recalled=3, needle_max_retry_share=0.2) == [
        "needle_max_retry_share 0.2 is above the default 0.05",
        "the needle rule 3 of 3 (needle_trials, needle_min_recalled, needle_pass_early) passes a 50%-recall cell "
        "with probability 0.1250, above the default's 0.0727",
    ]
    assert _weak(needle_trials=20, needle_min_recalled=15) == []  # passes a 50 % cell with 0.021
    assert _weak(needle_trials=12, needle_min_recalled=9) == [  # the former rule, a little weaker
        "the needle rule 9 of 12 (needle_trials, needle_min_recalled, needle_pass_early) passes a 50%-recall cell "
        "with probability 0.0730, above the default's 0.0727"]
    assert _weak(needle_pass_early=[3, 9, 12, 14]) == [
        "the needle rule 3 recalled with no miss, 9 with 1, 12 with 2, 14 with 3, or 15 of 19 (needle_trials, "
        "needle_min_recalled, needle_pass_early) passes a 50%-recall cell with probability 0.1331, above the "
        "default's 0.0727"]


def test_a_needle_rule_that_cannot_pass_is_refused_naming_both_settings():
    from dsv4deploy.gates.runner import GateSettingsError, settings_from_vars

    with pytest.raises(GateSettingsError, match="needle_min_recalled 20 must be at most needle_trials 19"):
        settings_from_vars({"needle_min_recalled": 20}, lambda v: v)
    with pytest.raises(GateSettingsError, match=r"needle_pass_early \[4, 9\] .*at most 0 with 12 of 12"):
        settings_from_vars({"needle_trials": 12, "needle_min_recalled": 12, "needle_pass_early": [4, 9]}, lambda v: v)


def test_the_retired_perf_p99_tolerance_warns_and_names_perf_ttft_tolerance() -> None:
    settings = settings_from_vars({"perf_p99_tolerance": 3.0}, lambda v: v)
    assert settings.perf_ttft_tolerance == 1.0  # not carried over: the band now covers every TTFT figure
    (warning,) = retired_warnings({"perf_p99_tolerance": 3.0})
    assert warning.startswith("'perf_p99_tolerance' is no longer read") and "perf_ttft_tolerance" in warning


def test_a_soak_budget_too_small_for_a_clean_release_to_pass_is_refused_naming_the_fix() -> None:
    # 50 sessions against 0.5 % vs 2 % at risks 0.01/0.05: a clean release needs 197, so every soak would
    # end inconclusive after the rollout had stopped production.
    with pytest.raises(GateSettingsError) as exc:
        settings_from_vars({"soak_sessions": 50, "soak_max_corruption_rate": 0.02}, same)
    text = "; ".join(exc.value.problems)
    assert "soak_sessions 50 cannot pass even a clean release" in text and "needs 197 clean sessions" in text
    assert "fix: soak_sessions 197 or more" in text
    # the same budget is fine when the soak is off, or judged all at once (the isolation experiment)
    assert settings_from_vars({"soak_sessions": 50, "soak_max_corruption_rate": 0.02, "soak_enabled": False}, same)
    assert settings_from_vars({"soak_sessions": 50, "soak_max_corruption_rate": 0.02, "soak_sequential": False}, same)
    assert settings_from_vars({"soak_sessions": 65}, same).soak_sessions == 65  # the default design's least


EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[3] / "inventory" / "examples").iterdir()
                  if (p / "hosts.yml").exists())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_shipped_examples_gate_settings_are_accepted(example: Path) -> None:
    variables: dict = {}
    for path in sorted((example / "group_vars" / "all").glob("*.yml")):
        variables.update(yaml.safe_load(path.read_text()) or {})
    deployment_topk = (variables.get("model_overrides") or {}).get("index_topk") or variables.get("index_topk")
    # a shipped example neither fails its own plan nor ships gates weaker than the defaults
    settings = settings_from_vars(variables, same, index_topk=deployment_topk)
    assert weakened(settings, deployment_topk, variables, same) == []
