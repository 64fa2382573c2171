"""The soak's design risks hold when its own decision rule is run over simulated sessions (docs/evidence.md)."""

from __future__ import annotations

import pytest

from dsv4deploy.gates.oc import DOC, fixed_rule_pass, render, simulate
from dsv4deploy.gates.soak import SoakDesign

DEFAULT = SoakDesign()


def test_a_clean_release_is_promoted_at_least_99_percent_of_the_time() -> None:
    # 4000 runs put the estimate within about 0.003 of the truth; the design says 0.99
    assert simulate(DEFAULT, 300, 0.005, runs=4000).passed >= 0.985
    clean = simulate(DEFAULT, 300, 0.0, runs=200)
    assert (clean.passed, clean.mean_trials) == (1.0, 65.0)


def test_a_release_with_5_percent_corrupted_sessions_is_refused_at_least_95_percent_of_the_time() -> None:
    assert simulate(DEFAULT, 300, 0.05, runs=4000).passed <= 0.06


def test_the_seeds_pd_rate_fails_within_about_20_sessions() -> None:
    seeds = simulate(DEFAULT, 300, 0.15, runs=2000)
    assert seeds.failed >= 0.999 and seeds.mean_trials <= 22


def test_the_former_rule_is_shown_as_the_issue_measured_it() -> None:
    # 50 sessions, at most 1 corrupted: P(pass) 0.74 at 2 %, 0.28 at 5 %
    assert fixed_rule_pass(0.02) == pytest.approx(0.736, abs=0.001)
    assert fixed_rule_pass(0.05) == pytest.approx(0.279, abs=0.001)


def test_the_document_is_the_generators() -> None:
    # the prose and the table heads as the generator writes them (its figures take a few seconds: not here)
    def prose(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("| ")]

    assert prose(DOC.read_text(encoding="utf-8")) == prose(render(runs=10))
