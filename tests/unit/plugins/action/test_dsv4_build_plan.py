"""dsv4_build_plan run by ansible-playbook on the controller: `state` is required and names the one job, and a
state that lacks its input fails naming it, before anything changes."""

from __future__ import annotations

import pytest

from tests.unit.plugins.runner import run_play

CALLS = {
    "no state": {"fact": "x"},
    "unknown state": {"state": "locate"},
    "router_change, nothing serves": {"state": "router_change", "serving_spec": "", "planned_spec": {}},
    "targets without a spec": {"state": "targets"},
    "combined without a spec": {"state": "combined"},
    "installed without records": {"state": "installed"},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every call of CALLS as a task of one play on localhost; each registered result, by name."""
    found = run_play(tmp_path_factory.mktemp("build_plan"),
                     [{"name": name, "dsv4_build_plan": args} for name, args in CALLS.items()])
    return dict(zip(CALLS, found, strict=True))


def test_a_task_without_state_or_with_an_unknown_one_is_refused_naming_it(results: dict[str, dict]) -> None:
    assert results["no state"]["failed"] and results["no state"]["msg"] == "missing required arguments: state"
    unknown = results["unknown state"]
    assert unknown["failed"] and "planned, beside, preview, surge, secrets, targets" in unknown["msg"], unknown["msg"]


def test_router_change_with_no_serving_release_is_no_change(results: dict[str, dict]) -> None:
    change = results["router_change, nothing serves"]
    assert not change.get("failed") and not change["changed"] and not change["router_change"], change


def test_each_state_that_needs_an_input_names_it(results: dict[str, dict]) -> None:
    assert "cannot read the release's spec.json" in results["targets without a spec"]["msg"]
    assert "state=combined needs release_spec" in results["combined without a spec"]["msg"]
    assert "state=installed needs installed" in results["installed without records"]["msg"]
    assert all(results[name]["failed"] for name in ("targets without a spec", "combined without a spec",
                                                    "installed without records"))
