"""dsv4_isolate_look run by ansible-playbook on the controller: the alternating soak's interim look pools each
side's blocks and judges them at the look's level; it goes on while undecided, stops when decided, at the
budget, or when a side measured nothing; bad input is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.plugins.runner import run_play


def soak(phase: str, corrupted: int, finished: int) -> dict:
    """A soak gate result of one block on one side."""
    return {"name": "soak", "phase": phase, "status": "passed", "seconds": 1.0, "summary": "",
            "evidence": {"corrupted_sessions": corrupted, "finished": finished, "design": {"acceptable_rate": 0.005}}}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """One play of every call."""
    return run_play(tmp_path_factory.mktemp("isolate_look"), [
        # The seeds' 18 % against 2 % after one block of 350: decided at the first look's 0.006.
        {"dsv4_isolate_look": {"gates": [soak("pd", 63, 350), soak("combined", 7, 350)], "rounds": 2}},
        # Both clean after one block: 0 of 350 cannot show 0.5 % at 0.006; go on.
        {"dsv4_isolate_look": {"gates": [soak("pd", 0, 350), soak("combined", 0, 350)], "rounds": 2}},
        # After the second block: 0 of 700 shows it at 0.044.
        {"dsv4_isolate_look": {"gates": [soak("pd", 0, 350), soak("combined", 0, 350), soak("pd", 0, 350),
                                         soak("combined", 0, 350)], "rounds": 2}},
        # A side whose soak finished nothing: the experiment stops, undecided.
        {"dsv4_isolate_look": {"gates": [soak("pd", 0, 0), soak("combined", 0, 350)], "rounds": 2}},
        {"dsv4_isolate_look": {"gates": []}},
    ])


def test_a_decided_look_stops_and_an_undecided_one_goes_on(results: list[dict]) -> None:
    first, undecided, last = results[0], results[1], results[2]
    assert (first["decided"], first["verdict"], first["look"]) == (True, "pd_amplified", 1), first
    assert first["significance"] == pytest.approx(0.00596, abs=1e-5) and not first["changed"]
    assert (undecided["decided"], undecided["verdict"]) == (False, "inconclusive"), undecided
    assert (last["decided"], last["verdict"], last["look"], last["pd"]) == (True, "clean", 2, [0, 700]), last


def test_a_side_that_measured_nothing_stops_the_experiment(results: list[dict]) -> None:
    blind = results[3]
    assert blind["decided"] and blind["verdict"] == "inconclusive", blind


def test_bad_input_is_refused_naming_the_field(results: list[dict]) -> None:
    assert results[4]["failed"] and "rounds" in results[4]["msg"], results[4]


def test_path_is_the_plugins_own() -> None:
    assert (Path(__file__).parents[4] / "plugins" / "action" / "dsv4_isolate_look.py").is_file()
