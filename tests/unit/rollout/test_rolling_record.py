"""dsv4deploy.rollout.rolling_record: what the next run puts back after a roll whose controller died, from the record
each host keeps ({install_root}/rolling.json), with the rolls dsv4_rolling_plan really plans (2P2D, 2P1D by surge)."""

from __future__ import annotations

import json

import pytest

from dsv4deploy.rollout import rolling_plan, rolling_record
from tests.unit.rollout.test_rolling_plan import _2p1d_plan, _files, _plan, _spec_json, xpyd_spec


def _record(plan: dict, at: int, left: bool = False) -> dict:
    """The record as roles/dsv4_rolling/tasks/record.yml writes it (old R1, new R2)."""
    problems, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
    assert problems == []
    return {"old": "R1", "new": "R2", "at": at, "left": left, "roll": roll, "steps": plan["rollout"]["steps"]}


@pytest.fixture(scope="module")
def xpyd() -> dict:
    return _plan(xpyd_spec())


@pytest.fixture(scope="module")
def surge() -> dict:
    return _2p1d_plan()


def test_no_record_on_any_host_means_nothing_to_repair() -> None:
    assert rolling_record.repair({"gpu1": None, "gpu2": ""}, "undo") == {"found": False}


def test_the_furthest_step_any_host_recorded_is_undone_first_then_each_step_before(xpyd: dict) -> None:
    # gpu1 recorded step 2 before the kill, gpu2 was still at step 1: the roll stood at step 2.
    found = {"gpu1": json.dumps(_record(xpyd, 2)), "gpu2": json.dumps(_record(xpyd, 1)), "router": None}
    done = rolling_record.repair(found, "undo")
    assert done["found"] and done["at"] == 2 and done["old"] == "R1" and done["hosts"] == ["gpu1", "gpu2"]
    assert [p["step"] for p in done["parts"]] == [2, 1]
    assert [p["paths"] for p in done["parts"]] == [["prefill[1]", "decode[1]"], ["prefill[0]", "decode[0]"]]
    # The router keeps the release's four workers, each once, and nothing else.
    assert sorted(e["url"] for e in done["workers"]) == sorted(
        e["url"] for s in done["roll"]["steps"] for e in s["api"])
    assert len(done["workers"]) == 4 and done["outage"] == []
    assert "died at step 2" in done["line"] and "prefill[1], decode[1], prefill[0], decode[0]" in done["line"]
    assert done["table"][-1] == "| 2 (run died) | R2 | R2 | stopped | stopped |", done["table"]


def test_killed_before_the_first_step_puts_nothing_back_but_still_cleans_up(xpyd: dict) -> None:
    done = rolling_record.repair({"gpu1": _record(xpyd, 0)}, "undo")
    assert done["found"] and done["parts"] == [] and "no worker had left the old release" in done["line"]


def test_a_surge_step_whose_old_lone_worker_never_left_keeps_it(surge: dict) -> None:
    # Killed in step 1 before the old decode left: it still serves the old release; only prefill[0] moved.
    done = rolling_record.repair({"gpu3": _record(surge, 1)}, "undo")
    assert [p["paths"] for p in done["parts"]] == [["prefill[0]"]] and done["outage"] == []
    # The surge decode (its shifted port) is not one of the release's workers: the switch removes it.
    assert "http://10.0.0.13:30102" not in {e["url"] for e in done["workers"]}
    assert "http://10.0.0.13:30002" in {e["url"] for e in done["workers"]}


def test_a_surge_step_whose_old_lone_worker_left_puts_it_back_while_the_surge_one_serves(surge: dict) -> None:
    done = rolling_record.repair({"gpu3": _record(surge, 1, left=True)}, "undo")
    assert [p["paths"] for p in done["parts"]] == [["prefill[0]", "decode[0]"]] and done["outage"] == []


def test_a_lone_worker_that_moved_home_in_an_earlier_step_is_named_as_an_outage(surge: dict) -> None:
    done = rolling_record.repair({"gpu3": _record(surge, 2)}, "undo")
    assert [p["paths"] for p in done["parts"]] == [["prefill[1]"], ["prefill[0]", "decode[0]"]]
    assert done["outage"] == ["decode[0]"] and "decode[0] had moved home alone" in done["line"]


def test_stop_and_rollback_only_point_every_host_at_the_old_release(xpyd: dict) -> None:
    done = rolling_record.repair({"gpu1": _record(xpyd, 2)}, "point")
    assert done["found"] and done["parts"] == [] and done["outage"] == []
    assert "every host pointed at it" in done["line"]


def test_records_of_two_different_rolls_are_refused_naming_the_fix(xpyd: dict) -> None:
    other = {**_record(xpyd, 1), "new": "R3"}
    with pytest.raises(ValueError, match=r"different rolls .*rollback\.yml"):
        rolling_record.repair({"gpu1": _record(xpyd, 1), "gpu2": other}, "undo")


def test_an_unreadable_record_is_named_with_its_host() -> None:
    with pytest.raises(ValueError, match=r"rolling\.json on gpu2 is not a roll's record"):
        rolling_record.repair({"gpu2": "{half"}, "undo")


def test_the_roll_carries_what_the_steps_ask_the_router_with(xpyd: dict) -> None:
    # A dead roll is repaired from its record, whatever the next run's own inventory says.
    roll = _record(xpyd, 0)["roll"]
    assert roll["router_url"] == xpyd["router_url"] and roll["router"] == xpyd["router"]
    assert roll["drain_s"] == xpyd["spec"]["drain_deadline_s"]
    assert roll["gpu_query_command"] == xpyd["gpu_query_command"]
