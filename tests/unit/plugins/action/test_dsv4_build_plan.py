"""dsv4_build_plan run by ansible-playbook on the controller: `state` is required and names the one job, and a
state that lacks its input fails naming it, before anything changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
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
    tmp_path = tmp_path_factory.mktemp("build_plan")
    out_file = tmp_path / "results.json"
    tasks = [{"name": name, "dsv4_build_plan": args, "register": f"r{i}", "ignore_errors": True}
             for i, (name, args) in enumerate(CALLS.items())]
    keep = "{{ {" + ", ".join(f"'{name}': r{i}" for i, name in enumerate(CALLS)) + "} | to_json }}"
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [*tasks, {"name": "Keep the results",
                           "ansible.builtin.copy": {"content": keep, "dest": str(out_file)}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    run = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(playbook),
                          "-e", f"ansible_python_interpreter={sys.executable}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out_file.exists(), run.stdout + run.stderr
    return json.loads(out_file.read_text())


def test_a_task_without_state_or_with_an_unknown_one_is_refused_naming_it(results: dict[str, dict]) -> None:
    assert results["no state"]["failed"] and results["no state"]["msg"] == "missing required arguments: state"
    unknown = results["unknown state"]
    assert unknown["failed"] and "planned, beside, surge, secrets, targets" in unknown["msg"], unknown["msg"]


def test_router_change_with_no_serving_release_is_no_change(results: dict[str, dict]) -> None:
    change = results["router_change, nothing serves"]
    assert not change.get("failed") and not change["changed"] and not change["router_change"], change


def test_each_state_that_needs_an_input_names_it(results: dict[str, dict]) -> None:
    assert "cannot read the release's spec.json" in results["targets without a spec"]["msg"]
    assert "state=combined needs release_spec" in results["combined without a spec"]["msg"]
    assert "state=installed needs installed" in results["installed without records"]["msg"]
    assert all(results[name]["failed"] for name in ("targets without a spec", "combined without a spec",
                                                    "installed without records"))
