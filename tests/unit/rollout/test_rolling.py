"""dsv4_rollout_strategy: rolling - the roll's steps (prefill and decode in step, batches of
dsv4_rollout_rolling_max_unavailable), the refusal by name of a layout the router cannot keep serving
through, and the report's table of which worker runs which release after each step."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4deploy.plan import make_plan
from dsv4deploy.rollout import rolling
from dsv4deploy.rollout.settings import load_rollout
from dsv4deploy.rollout.strategy import rollout_plan
from dsv4deploy.spec import SpecError, load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import PD_COMMON, combined_spec, host_vars, pd_spec, xpyd_spec

REPO = Path(__file__).resolve().parents[3]
ROLLING = {"dsv4_rollout_strategy": "rolling"}


def _xpyd(prefills: int, decodes: int) -> object:
    """xPyD on one 16-GPU host, tp 1 per worker, ports apart."""
    worker = {"host": "gpu1", "tp_size": 1, "mem_fraction_static": 0.8}
    data = {**copy.deepcopy(PD_COMMON),
            "prefill": [{**worker, "gpus": [i], "port": 30100 + i, "bootstrap_port": 9100 + i}
                        for i in range(prefills)],
            "decode": [{**worker, "gpus": [8 + i], "port": 30200 + i} for i in range(decodes)],
            "memory_profile": {"weights": {"bits": 1}}}
    return load_spec(data, {"gpu1": host_vars(gpu_count=16, gpu_memory_gib=192)})


def _paths(steps: list[dict]) -> list[list[str]]:
    return [[w["path"] for w in s["workers"]] for s in steps]


def test_2p2d_over_three_hosts_rolls_a_prefill_and_a_decode_per_step() -> None:
    steps = rolling.roll_steps(xpyd_spec())
    assert _paths(steps) == [["prefill[0]", "decode[0]"], ["prefill[1]", "decode[1]"]]
    # Each step's preview router fronts the new pair only, and names the programs the hosts run.
    assert [s["preview"] for s in steps] == [["prefill[0]", "decode[0]"], ["prefill[1]", "decode[1]"]]
    assert [(w["host"], w["name"]) for w in steps[1]["workers"]] == [("gpu2", "sglang-dsv4-prefill-2"),
                                                                     ("gpu3", "sglang-dsv4-decode-2")]


def test_uneven_roles_stay_in_step_and_the_preview_gets_a_new_partner() -> None:
    steps = rolling.roll_steps(_xpyd(4, 2), 1)
    # Four steps (the role with the most workers), decodes spread over them, one of each role at most.
    assert _paths(steps) == [["prefill[0]", "decode[0]"], ["prefill[1]"], ["prefill[2]", "decode[1]"], ["prefill[3]"]]
    # A step without a decode gates its prefill with the decode an earlier step already renewed.
    assert steps[1]["preview"] == ["prefill[1]", "decode[0]"] and steps[3]["preview"] == ["prefill[3]", "decode[1]"]


def test_max_unavailable_batches_each_role() -> None:
    steps = rolling.roll_steps(_xpyd(4, 4), 2)
    assert _paths(steps) == [["prefill[0]", "prefill[1]", "decode[0]", "decode[1]"],
                             ["prefill[2]", "prefill[3]", "decode[2]", "decode[3]"]]
    assert rolling.roll_problems(_xpyd(4, 4), 3) == []


def _2p1d(gpu_count: int = 16, decode_port: int = 30200, prefills: int = 2) -> object:
    """2P1D on one host, tp 1 per worker: prefills on GPUs 0 and 1, the decode on GPU 2."""
    worker = {"host": "gpu1", "tp_size": 1, "mem_fraction_static": 0.8}
    data = {**copy.deepcopy(PD_COMMON),
            "prefill": [{**worker, "gpus": [i], "port": 30100 + i, "bootstrap_port": 9100 + i}
                        for i in range(prefills)],
            "decode": [{**worker, "gpus": [2], "port": decode_port}],
            "memory_profile": {"weights": {"bits": 1}}}
    return load_spec(data, {"gpu1": host_vars(gpu_count=gpu_count, gpu_memory_gib=192)})


def test_a_lone_worker_of_a_role_is_refused_by_name_with_the_fix_where_no_surge_fits() -> None:
    spec = _2p1d(gpu_count=3)  # every GPU taken: no spare one for the decode's surge worker
    with pytest.raises(SpecError) as err:
        rollout_plan(spec, load_rollout(ROLLING))
    (problem,) = err.value.problems
    assert problem.field == "decode" and problem.host == "gpu1" and "1 decode worker" in problem.message
    assert "no surge fits beside it (a surge puts the new decode[0] on GPUs [3]" in problem.message
    assert "gpu1 has 3 GPUs" in problem.message
    assert "add a second decode worker" in problem.fix and "blue_green" in problem.fix
    assert "dsv4_rollout_blue_green_gpu_offset" in problem.fix
    assert {p.field for p in rolling.roll_problems(pd_spec(), 1)} == {"prefill", "decode"}


def test_a_lone_worker_is_rolled_by_surge_on_the_spare_gpus_and_shifted_ports() -> None:
    rollout = rollout_plan(_2p1d(), load_rollout(ROLLING))
    # The lowest spare GPU of the host, the port shifted by the port offset (100 by default).
    assert rollout["surge"] == {"decode[0]": {"host": "gpu1", "gpus": [3], "port": 30300, "bootstrap_port": None}}
    assert _paths(rollout["steps"]) == [["prefill[0]", "decode[0]"], ["prefill[1]"]]
    assert [s["surge"] for s in rollout["steps"]] == [["decode[0]"], []]
    # Step 2 gates its new prefill with the decode step 1 renewed (by then back home).
    assert rollout["steps"][1]["preview"] == ["prefill[1]", "decode[0]"]
    assert "decode[0] alone in its role, rolled by surge" in rollout["why"]
    assert "(gpu1 sglang-dsv4-decode, by surge)" in rolling.describe_steps(rollout["steps"])[0]
    # A set GPU offset places it as blue_green would.
    shifted = rollout_plan(_2p1d(), load_rollout({**ROLLING, "dsv4_rollout_blue_green_gpu_offset": 5}))
    assert shifted["surge"]["decode[0]"]["gpus"] == [7]


def test_a_surge_port_on_a_listener_is_refused_naming_the_offset() -> None:
    # The decode on 30000: shifted by the default 100 it lands on prefill[0]'s 30100.
    with pytest.raises(SpecError) as err:
        rollout_plan(_2p1d(decode_port=30000), load_rollout(ROLLING))
    (problem,) = err.value.problems
    assert problem.field == "decode" and "no surge fits beside it" in problem.message
    assert "the new decode[0].port would listen on port 30100, which the serving prefill[0].port uses" \
        in problem.message


def test_a_1p1d_with_spare_gpus_rolls_both_by_surge_in_one_step() -> None:
    rollout = rollout_plan(_2p1d(prefills=1, decode_port=30300), load_rollout(ROLLING))
    assert [s["surge"] for s in rollout["steps"]] == [["prefill[0]", "decode[0]"]]
    # Each on spare GPUs of its own (prefill[0] on GPU 0, the decode on GPU 2).
    assert rollout["surge"]["prefill[0]"] == {"host": "gpu1", "gpus": [1], "port": 30200, "bootstrap_port": 9200}
    assert rollout["surge"]["decode[0]"]["gpus"] == [3]


def test_a_batch_that_empties_a_role_is_refused_naming_the_variable() -> None:
    with pytest.raises(SpecError) as err:
        rollout_plan(_xpyd(3, 2), load_rollout({**ROLLING, "dsv4_rollout_rolling_max_unavailable": 2}))
    (problem,) = err.value.problems
    assert problem.field == rolling.MAX_UNAVAILABLE_VAR and "none of the 2 decode workers" in problem.message
    assert "at most 1" in problem.fix
    with pytest.raises(SpecError) as err:
        load_rollout({**ROLLING, "dsv4_rollout_rolling_max_unavailable": 0})
    assert err.value.problems[0].field == rolling.MAX_UNAVAILABLE_VAR


def test_combined_is_refused() -> None:
    (problem,) = rolling.roll_problems(combined_spec(), 1)
    assert problem.field == "dsv4_rollout_strategy" and "combined" in problem.message


def test_the_plan_carries_the_steps() -> None:
    spec = xpyd_spec()
    plan = make_plan(spec, ["gpu1", "gpu2", "gpu3"], now=0, rollout=rollout_plan(spec, load_rollout(ROLLING)))
    assert plan["rollout"]["strategy"] == "rolling" and plan["rollout"]["max_unavailable"] == 1
    assert _paths(plan["rollout"]["steps"]) == _paths(rolling.roll_steps(spec))
    assert "2 steps" in plan["rollout"]["why"] and "preview router" in plan["rollout"]["why"]
    assert plan["rollout"]["preview_router_port"] == 8100


def test_a_preview_router_port_on_a_listener_is_refused() -> None:
    spec = xpyd_spec()  # decode[1] listens on gpu3:30003; the router is on gpu1:8000, metrics 29000 by default
    with pytest.raises(SpecError) as err:
        rollout_plan(spec, load_rollout({**ROLLING, "dsv4_rollout_blue_green_port_offset": 22001}))
    assert "the preview router would listen on port 30001, which the serving prefill[0].port uses" in str(err.value)


def test_release_table_says_which_worker_runs_which_release() -> None:
    steps = rolling.roll_steps(xpyd_spec())
    done = rolling.release_table(steps, "R1", "R2", done=2)
    assert done[0] == "| after step | prefill[0] (gpu1) | decode[0] (gpu3) | prefill[1] (gpu2) | decode[1] (gpu3) |"
    assert done[2:] == ["| start | R1 | R1 | R1 | R1 |", "| 1 | R2 | R2 | R1 | R1 |", "| 2 | R2 | R2 | R2 | R2 |"]
    # A roll that failed at step 2: step 1's workers run the new release, step 2's new ones were stopped.
    failed = rolling.release_table(steps, "R1", "R2", done=1, failed_step=2)
    assert failed[-1] == "| 2 (failed) | R2 | R2 | stopped | stopped |"


def test_the_embedded_example_plans_a_roll_and_the_default_inventory_is_refused() -> None:
    """inventory/rolling-local.yml: 2P2D, tp 2 per worker, on the simulated 8 GPUs."""
    cli = [sys.executable, "-m", "dsv4deploy.cli", "plan", "-i", str(REPO / "inventory" / "local")]
    ok = subprocess.run([*cli, "-e", f"@{REPO / 'inventory' / 'rolling-local.yml'}"], capture_output=True,
                        text=True, cwd=REPO, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "  step 2: prefill[1] (local sglang-dsv4-prefill-2), decode[1] (local sglang-dsv4-decode-2)" in ok.stdout
    refused = subprocess.run([*cli, "-e", "dsv4_rollout_strategy=rolling"], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
    assert refused.returncode != 0 and "prefill (host local): rolling takes prefill workers" in refused.stdout + \
        refused.stderr


def test_the_embedded_2p1d_example_plans_its_decode_by_surge() -> None:
    """inventory/rolling-2p1d-local.yml: 2P1D, tp 2 per worker, GPUs 6-7 spare for the surge decode."""
    cli = [sys.executable, "-m", "dsv4deploy.cli", "plan", "-i", str(REPO / "inventory" / "local"),
           "-e", f"@{REPO / 'inventory' / 'rolling-2p1d-local.yml'}"]
    ok = subprocess.run(cli, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "  step 1: prefill[0] (local sglang-dsv4-prefill), decode[0] (local sglang-dsv4-decode, by surge)" \
        in ok.stdout, ok.stdout


def _changed(**common: object) -> object:
    """xpyd_spec with deployment-wide settings changed (as the next release's inventory would)."""
    data = xpyd_spec().model_dump(mode="json")
    hosts = data.pop("hosts")
    for h in hosts.values():
        h.pop("name"), h.setdefault("ansible_host", h.pop("address"))
    return load_spec({**data, **common}, hosts)


def test_a_release_that_keeps_workers_and_model_can_be_rolled_into() -> None:
    serving = xpyd_spec()
    # A change of what rolling is for: a worker's environment, its memory fraction.
    new = _changed(server_env={"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "900"})
    assert rolling.compatibility_problems(serving, new) == []


def test_a_release_that_changes_the_model_or_moves_a_worker_is_refused_by_field() -> None:
    serving = xpyd_spec()
    topk = rolling.compatibility_problems(serving, _changed(index_topk=512))
    assert {p.field for p in topk} == {"prefill[0].index_topk", "prefill[1].index_topk", "decode[0].index_topk",
                                      "decode[1].index_topk"}
    assert "1024 -> 512" in topk[0].message and "blue_green or recreate" in topk[0].fix
    data = xpyd_spec().model_dump(mode="json")["decode"]
    data[1]["port"] = 30005
    (moved,) = rolling.compatibility_problems(serving, _changed(decode=data))
    assert moved.field == "decode[1].port" and moved.host == "gpu3" and "30003 -> 30005" in moved.message
    (fewer,) = rolling.compatibility_problems(serving, _changed(decode=data[:1]))
    assert fewer.field == "decode" and "adds or removes none" in fewer.message
