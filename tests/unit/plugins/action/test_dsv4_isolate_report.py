"""dsv4_isolate_report run by ansible-playbook on the controller: the isolation report (PD versus combined) is
written under reports_dir with `latest` pointing at it, its headline says what serves; a second report never
overwrites the first; check mode writes nothing; bad input is refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.plugins.runner import run_play

ORIGINAL = {"release_id": "R1", "endpoint": "http://127.0.0.1:8000", "topology": "pd"}
REFUSED = "combined.gpus (host gpu1): the combined server needs 8 GPUs and gpu1 has 4; fix: set combined.tp 4"


def report(reports_dir: Path, **args: object) -> dict:
    """A dsv4_isolate_report task writing under `reports_dir`."""
    return {"dsv4_isolate_report": {"reports_dir": str(reports_dir), "suite": ["smoke", "needle"],
                                    "original": ORIGINAL, **args}}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """One play of every call; the folder it wrote under, and the results."""
    tmp_path = tmp_path_factory.mktemp("isolate_report")
    reports = tmp_path / "reports"
    blocked = tmp_path / "blocked"
    (blocked / "latest").mkdir(parents=True)  # a folder someone made, where the link goes
    return tmp_path, run_play(tmp_path, [
        report(reports, restored=True, refused=REFUSED),
        report(reports, restored=False, combined={"release_id": "R1-combined"},
               restore_error="readiness failed on gpu1", manual_steps="rollback.yml -e dsv4_rollback_release=R1"),
        {**report(tmp_path / "checked", restored=True, refused=REFUSED), "check_mode": True},
        report(reports, refused=REFUSED),
        report(reports, restored=True, original="R1"),
        report(blocked, restored=True, refused=REFUSED),
    ])


def test_a_refused_experiment_is_written_saying_nothing_was_changed(run: tuple[Path, list[dict]]) -> None:
    _, results = run
    refused = results[0]
    assert not refused.get("failed") and not refused["changed"], refused
    assert refused["headline"] == f"**REFUSED**, nothing was changed: {REFUSED}"
    data = refused["report"]
    assert (data["status"], data["serving_release"], data["refused"]) == ("refused", "R1", REFUSED)
    written = json.loads(Path(next(p for p in refused["paths"] if p.endswith("report.json"))).read_text())
    assert written == data
    md = Path(next(p for p in refused["paths"] if p.endswith("report.md"))).read_text()
    assert refused["headline"] in md


def test_a_failed_restore_says_production_is_not_verified_and_keeps_the_first_report(
        run: tuple[Path, list[dict]]) -> None:
    tmp_path, results = run
    first, failed = results[0], results[1]
    assert failed["headline"].startswith("**RESTORE FAILED**: release `R1` is NOT verified serving "
                                         "(readiness failed on gpu1). Experiment: "), failed["headline"]
    assert failed["report"]["status"] == "failed" and failed["report"]["serving_release"] is None
    assert "rollback.yml -e dsv4_rollback_release=R1" in Path(failed["paths"][-1]).read_text()
    # Both written in the same second: two folders, and latest points at the second.
    first_dir, second_dir = (Path(r["paths"][0]).parent for r in (first, failed))
    assert first_dir != second_dir and first_dir.is_dir()
    assert (tmp_path / "reports" / "latest").resolve() == second_dir.resolve()


def test_check_mode_writes_nothing(run: tuple[Path, list[dict]]) -> None:
    tmp_path, results = run
    checked = results[2]
    assert checked["skipped"] and checked["paths"] == [] and checked["msg"] == "check mode: no report was written"
    assert not (tmp_path / "checked").exists()


def test_bad_input_is_refused_naming_the_field(run: tuple[Path, list[dict]]) -> None:
    _, results = run
    no_restored, not_a_plan = results[3], results[4]
    assert no_restored["failed"] and no_restored["msg"] == "missing required arguments: restored"
    assert not_a_plan["failed"], not_a_plan
    assert not_a_plan["msg"].startswith("argument 'original' is of type str and we were unable to convert to dict")


def test_a_latest_that_is_not_a_link_is_named_not_replaced(run: tuple[Path, list[dict]]) -> None:
    tmp_path, results = run
    blocked = results[5]
    latest = tmp_path / "blocked" / "latest"
    # The folder is left as it was, and the report written beside it is kept; the message says where, and the fix.
    assert latest.is_dir() and not latest.is_symlink() and not any(latest.iterdir())
    kept = [p for p in latest.parent.iterdir() if p != latest]
    assert len(kept) == 1 and (kept[0] / "report.json").is_file()
    assert blocked["failed"] and blocked["msg"].endswith(
        f"{latest} exists and is not a symlink; refusing to replace it (this report is in {kept[0]}); fix: move "
        f"{latest} aside, and the next report links it to the newest"), blocked["msg"]
