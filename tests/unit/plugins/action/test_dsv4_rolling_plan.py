"""dsv4_rolling_plan run by ansible-playbook on the controller, with the plan of a real 2P2D spec and the serving
release's files as slurp reads them (base64): the roll's steps for a change a roll can carry, a refusal naming
the file and host (or the missing spec.json) for one it cannot; the report's table; the repair of a dead roll
from each host's record, and a refusal when the records disagree."""

from __future__ import annotations

import base64
import json

import pytest

from dsv4deploy.rollout import rolling_plan
from tests.unit.plugins.runner import run_play
from tests.unit.rollout.test_rolling_plan import _files, _plan, _spec_json, xpyd_spec


def slurped(files: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """{host: {path: text}} as the role's slurp hands it on: each text base64."""
    return {host: {path: base64.b64encode(text.encode()).decode() for path, text in found.items()}
            for host, found in files.items()}


def record(text: dict) -> str:
    """A host's rolling.json as slurp reads it."""
    return base64.b64encode(json.dumps(text).encode()).decode()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict]]:
    """One play of every call; the plan, and the results."""
    plan = _plan(xpyd_spec())
    serving = _files(plan)
    changed = json.loads(json.dumps(serving))
    host, files = next((h, f) for h, f in changed.items() if any(p.startswith(rolling_plan.PROGRAM_DIRS) for p in f))
    path = next(p for p in files if p.startswith(rolling_plan.PROGRAM_DIRS))
    files[path] += "# an older release's program\n"
    without_spec = {h: {p: t for p, t in f.items() if p != "spec.json"} for h, f in serving.items()}
    problems, roll = rolling_plan.run_plan(plan, _spec_json(plan), serving, serving)
    assert problems == []
    at_2 = {"old": "R1", "new": "R2", "at": 2, "left": False, "roll": roll, "steps": plan["rollout"]["steps"]}
    other = {**at_2, "old": "R0", "at": 1}
    results = run_play(tmp_path_factory.mktemp("roll_plan"), [
        {"dsv4_rolling_plan": {"plan": "{{ plan }}", "serving": "{{ serving }}"}},
        {"dsv4_rolling_plan": {"plan": "{{ plan }}", "serving": "{{ changed }}"}},
        {"dsv4_rolling_plan": {"plan": "{{ plan }}", "serving": "{{ without_spec }}"}},
        {"dsv4_rolling_plan": {"plan": "{{ plan }}", "table": {"old": "R1", "new": "R2", "done": 1, "failed": 2,
                                                            "restored": True}}},
        {"dsv4_rolling_plan": {"plan": {}, "repair": {"records": {"gpu1": record(at_2), "gpu2": ""}, "mode": "undo"}}},
        {"dsv4_rolling_plan": {"plan": {}, "repair": {"records": {"gpu1": "", "gpu2": ""}}}},
        {"dsv4_rolling_plan": {"plan": {}, "repair": {"records": {"gpu1": record(at_2), "gpu2": record(other)}}}},
        {"dsv4_rolling_plan": {"plan": {}, "repair": {"records": {"gpu1": base64.b64encode(b"{cut").decode()}}}},
        {"dsv4_rolling_plan": {"serving": {}}},
        # The bake failed after the last step: no step failed (the rows go from the last step to the restore).
        {"dsv4_rolling_plan": {"plan": "{{ plan }}", "table": {"old": "R1", "new": "R2", "done": 2, "failed": "0",
                                                            "restored": True}}},
    ], extra_vars={"plan": plan, "serving": slurped(serving), "changed": slurped(changed),
                   "without_spec": slurped(without_spec)})
    return {"plan": plan, "roll": roll, "host": host, "path": path}, results


def test_a_change_a_roll_carries_gets_its_steps(run: tuple[dict, list[dict]]) -> None:
    made, results = run
    ok = results[0]
    assert not ok.get("failed") and not ok["changed"], ok.get("msg")
    assert ok["roll"] == made["roll"] and ok["roll"]["steps"][0]["paths"] == ["prefill[0]", "decode[0]"]


def test_a_changed_program_file_is_refused_by_file_and_host(run: tuple[dict, list[dict]]) -> None:
    made, results = run
    refused = results[1]
    assert refused["failed"] and "roll" not in refused
    assert refused["msg"].startswith("dsv4_rollout_strategy: rolling cannot carry this change: ")
    assert f"{made['path']} (host {made['host']}): the program file" in refused["msg"]
    assert len(refused["problems"]) == 1 and "blue_green or recreate" in refused["problems"][0]


def test_a_serving_release_without_spec_json_is_refused_with_the_fix(run: tuple[dict, list[dict]]) -> None:
    _, results = run
    assert results[2]["failed"] and results[2]["msg"] == (
        "dsv4_rollout_strategy: rolling needs the serving release's spec.json, and no host has it; fix: deploy "
        "with dsv4_rollout_strategy: recreate")


def test_the_table_ends_with_the_rolled_back_row(run: tuple[dict, list[dict]]) -> None:
    made, results = run
    table = results[3]["table"]
    workers = sum(len(s["workers"]) for s in made["plan"]["rollout"]["steps"])
    assert table[-1] == "| rolled back | " + " | ".join(["R1"] * workers) + " |"
    assert table[-2].startswith("| 2 (failed) |"), table


def test_a_roll_undone_after_its_last_step_names_no_failed_step(run: tuple[dict, list[dict]]) -> None:
    made, results = run
    table = results[9]["table"]
    workers = sum(len(s["workers"]) for s in made["plan"]["rollout"]["steps"])
    assert not [row for row in table if "(failed)" in row], table
    assert table[-2] == "| 2 | " + " | ".join(["R2"] * workers) + " |", table
    assert table[-1] == "| rolled back | " + " | ".join(["R1"] * workers) + " |"


def test_a_dead_roll_is_undone_from_the_furthest_record(run: tuple[dict, list[dict]]) -> None:
    _, results = run
    repair, nothing = results[4]["repair"], results[5]["repair"]
    assert (repair["found"], repair["old"], repair["new"], repair["at"], repair["hosts"]) == (True, "R1", "R2", 2,
                                                                                             ["gpu1"])
    assert [p["step"] for p in repair["parts"]] == [2, 1]
    assert repair["line"].startswith("a roll from R1 to R2 died at step 2 (hosts gpu1): release R1 is put back")
    assert nothing == {"found": False}


def test_records_that_disagree_or_are_cut_are_refused_naming_the_host_and_fix(run: tuple[dict, list[dict]]) -> None:
    _, results = run
    two, cut = results[6], results[7]
    assert two["failed"] and "name different rolls (R0 -> R2, R1 -> R2)" in two["msg"], two["msg"]
    assert "fix: put one release back everywhere by hand (rollback.yml -e dsv4_rollback_release=ID)" in two["msg"]
    assert cut["failed"] and cut["msg"].startswith("rolling.json on gpu1 is not a roll's record"), cut["msg"]
    assert "fix: remove it once no run is alive" in cut["msg"]


def test_a_task_without_the_plan_is_refused_naming_it(run: tuple[dict, list[dict]]) -> None:
    _, results = run
    assert results[8]["failed"] and results[8]["msg"] == "missing required arguments: plan"
