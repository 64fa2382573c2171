"""The plan's shape is typed (dsv4deploy.plan.models) and kept as a schema snapshot: a change shows in review."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from dsv4deploy.plan import make_plan
from dsv4deploy.plan.models import GateTargets, Plan, gate_targets_of

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
sys.path.insert(0, str(GOLDEN))
from fixture_specs import pd_spec  # noqa: E402

SNAPSHOT = GOLDEN / "plan-schema.json"


def test_the_plan_schema_matches_its_snapshot() -> None:
    schema = json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        SNAPSHOT.write_text(schema, encoding="utf-8")
    assert schema == SNAPSHOT.read_text(encoding="utf-8"), "the plan's shape changed; UPDATE_GOLDEN=1 to accept"


def test_a_made_plan_is_a_valid_plan_and_its_gate_targets_hold_no_host_files() -> None:
    plan = make_plan(pd_spec(), ["gpu1"])
    Plan.model_validate(plan)
    targets = gate_targets_of(plan)
    assert set(targets) == set(GateTargets.model_fields)
    assert "hosts" not in targets and "spec" not in targets and "files" not in json.dumps(targets)
    assert targets["endpoint"] == plan["endpoint"] and targets["workers"] == plan["workers"]


def test_a_plan_of_the_wrong_shape_is_refused() -> None:
    plan = make_plan(pd_spec(), ["gpu1"])
    plan["hosts"]["gpu1"]["service_manager"] = "upstart"
    with pytest.raises(ValidationError, match="service_manager"):
        Plan.model_validate(plan)
    with pytest.raises(ValidationError, match="endpoint"):
        gate_targets_of({k: v for k, v in plan.items() if k != "endpoint"})
