"""dsv4deploy.rollout.rolling_plan: what the playbook's roll acts on per step, and its refusals against the
serving release (spec.json and program files) before anything changes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dsv4deploy.plan import make_plan
from dsv4deploy.rollout import rolling_plan
from dsv4deploy.rollout.settings import load_rollout
from dsv4deploy.rollout.strategy import rollout_plan
from dsv4deploy.spec.models import ApiKeyRef

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import xpyd_spec


def _plan(spec: object) -> dict:
    rollout = rollout_plan(spec, load_rollout({"dsv4_rollout_strategy": "rolling"}))
    return json.loads(json.dumps(make_plan(spec, sorted(spec.hosts), rollout=rollout)))


def _files(plan: dict) -> dict[str, dict[str, str]]:
    return {host: part["files"] for host, part in plan["hosts"].items()}


def _spec_json(plan: dict) -> str:
    return next(part["files"]["spec.json"] for part in plan["hosts"].values() if "spec.json" in part["files"])


def test_each_step_names_its_programs_gpus_worker_api_entries_and_preview_router() -> None:
    plan = _plan(xpyd_spec())
    problems, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
    assert problems == []
    first = roll["steps"][0]
    assert first["paths"] == ["prefill[0]", "decode[0]"]
    assert sum(len(n) for n in first["names"].values()) == 2
    assert [e["worker_type"] for e in first["api"]] == ["prefill", "decode"]
    assert "bootstrap_port" in first["api"][0] and "bootstrap_port" not in first["api"][1]
    port = plan["rollout"]["preview_router_port"]
    assert first["preview"]["url"].endswith(f":{port}") and str(port) in first["preview"]["argv"]
    # The gates talk to the preview router, and judge the step's new workers only.
    gates = first["gates"]
    assert gates["endpoint"] == first["preview"]["url"] == gates["router_url"]
    assert {w["url"] for w in gates["workers"]} == {e["url"] for e in first["api"]}
    assert set(gates["expected_overrides"]) == {w["name"] for w in gates["workers"]}


def test_a_changed_program_file_is_refused_by_file_and_host() -> None:
    plan = _plan(xpyd_spec())
    serving = json.loads(json.dumps(_files(plan)))
    host, files = next((h, f) for h, f in serving.items() if any(p.startswith(rolling_plan.PROGRAM_DIRS) for p in f))
    path = next(p for p in files if p.startswith(rolling_plan.PROGRAM_DIRS))
    files[path] += "# an older release's program\n"
    problems, roll = rolling_plan.run_plan(plan, _spec_json(plan), serving, _files(plan))
    assert roll == {} and [p.field for p in problems] == [path]
    said = str(problems[0])
    assert f"{path} (host {host}): the program file" in said and "blue_green or recreate" in said


def test_a_model_change_against_the_serving_spec_is_refused() -> None:
    plan = _plan(xpyd_spec())
    serving = json.loads(_spec_json(plan))
    serving["deployment"]["model"]["path"] = "/models/other"
    problems, _ = rolling_plan.run_plan(plan, json.dumps(serving), _files(plan), _files(plan))
    assert [p.field for p in problems] == ["model.path"]


def test_the_table_gets_a_rolled_back_row() -> None:
    steps = _plan(xpyd_spec())["rollout"]["steps"]
    lines = rolling_plan.table_lines(steps, "R1", "R2", done=1, failed_step=2, restored=True)
    assert lines[-2:] == ["| 2 (failed) | R2 | R2 | stopped | stopped |", "| rolled back | R1 | R1 | R1 | R1 |"]


def _2p1d_plan() -> dict:
    """xpyd_spec without decode[1]: the lone decode on gpu3's GPUs 0-3, rolled by surge onto 4-7."""
    spec = xpyd_spec()
    return _plan(spec.model_copy(update={"decode": spec.decode[:1]}))


def test_a_surge_step_starts_the_lone_worker_in_the_slot_then_moves_it_home() -> None:
    plan = _2p1d_plan()
    problems, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
    assert problems == []
    first, second = roll["steps"]
    surge = first["surge"]
    assert surge["paths"] == ["decode[0]"] and surge["gpus"] == {"gpu3": [4, 5, 6, 7]}
    # Its worker API entry is the shifted port; the one at home is the spec's own.
    assert [e["url"] for e in surge["api"]] == ["http://10.0.0.13:30102"]
    assert [e["url"] for e in surge["home"]["api"]] == ["http://10.0.0.13:30002"]
    assert surge["home"]["gpus"] == {"gpu3": [0, 1, 2, 3]}
    # The surge gates judge the step's new prefill at home with the decode in the slot, behind the preview router.
    assert {w["url"] for w in surge["gates"]["workers"]} == {"http://10.0.0.11:30001", "http://10.0.0.13:30102"}
    assert "http://10.0.0.13:30102" in " ".join(surge["preview"]["argv"])
    # What is replaced in place: prefill[0] alone; the step's home gates then judge the pair at home.
    assert first["rest"]["paths"] == ["prefill[0]"] and [e["worker_type"] for e in first["rest"]["api"]] == ["prefill"]
    assert {w["url"] for w in first["gates"]["workers"]} == {"http://10.0.0.11:30001", "http://10.0.0.13:30002"}
    assert "surge" not in second


def test_the_preview_router_reads_the_production_routers_key_file_from_the_vault_or_the_file() -> None:
    # api_key.vault_var (xpyd_spec's): the file the release's install wrote at home on the router's host
    # (never the value: the module reads it there); a surge step's preview router runs there too, at home
    # on gpu1, not in the slot on gpu3.
    spec, vault = xpyd_spec(), "/opt/dsv4deploy/secrets/api_key"
    for deployment, key_file in ((spec, vault), (spec.model_copy(update={"decode": spec.decode[:1]}), vault),
                                 (spec.model_copy(update={"api_key": ApiKeyRef(file="/etc/dsv4deploy/api_key")}),
                                  "/etc/dsv4deploy/api_key")):
        plan = _plan(deployment)
        problems, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
        assert problems == [] and roll["api_key_file"] == key_file
        assert "vault_dsv4_api_key" not in json.dumps(roll)


def _preview_host(argv: list[str]) -> str:
    return argv[argv.index("--host") + 1]


def test_the_preview_router_never_listens_on_every_interface() -> None:
    # It listened on the production router's address, 0.0.0.0 here, fronting workers no gate
    # had passed yet. Now: the one address the gates reach the router's host at, or loopback where they can.
    spec = xpyd_spec()
    assert spec.router.listen == "0.0.0.0"
    plan = _plan(spec)
    _, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
    first = roll["steps"][0]["preview"]
    assert _preview_host(first["argv"]) == "10.0.0.11" and first["url"].startswith("http://10.0.0.11:")
    local = spec.model_copy(update={"hosts": {**spec.hosts, "gpu1": spec.hosts["gpu1"].model_copy(
        update={"address": "127.0.0.1"})}})
    plan = _plan(local)
    _, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
    first = roll["steps"][0]["preview"]
    assert _preview_host(first["argv"]) == "127.0.0.1" and first["url"].startswith("http://127.0.0.1:")
    metrics = first["argv"][first["argv"].index("--prometheus-host") + 1]
    assert metrics == "127.0.0.1"


def test_the_preview_router_runs_with_the_router_units_user_env_and_hardening() -> None:
    spec = xpyd_spec()
    plan = _plan(spec)
    _, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
    assert roll["preview_name"] == "sglang-dsv4-router-preview"
    props = roll["preview_properties"]
    assert f"User={spec.hosts['gpu1'].service_user}" in props
    for wanted in ("NoNewPrivileges=yes", "CapabilityBoundingSet=", "ProtectSystem=strict", "PrivateDevices=yes",
                   "ProtectProc=invisible", "RestrictNamespaces=yes", "SystemCallFilter=@system-service"):
        assert wanted in props, wanted
    # How it starts and restarts is systemd-run's (once; a preview router that dies fails its step).
    assert not [p for p in props if p.split("=", 1)[0] in ("ExecStart", "Restart", "Type", "RestartSec")]


def _multi_node_xpyd() -> object:
    """xpyd_spec with decode[0] over gpu3 (rank 0) and gpu2 (rank 1), GPUs 4-7 on each, decode[1] on gpu1's 4-7."""
    spec = xpyd_spec()
    data = spec.model_dump()
    data["decode"][0].update(nodes=["gpu3", "gpu2"], gpus=[4, 5, 6, 7], tp_size=8, dist_init_port=5000)
    data["decode"][1].update(host="gpu1", gpus=[4, 5, 6, 7])
    return type(spec).model_validate(data)


def test_a_multi_node_worker_is_replaced_with_every_rank_on_its_node() -> None:
    plan = _plan(_multi_node_xpyd())
    problems, roll = rolling_plan.run_plan(plan, _spec_json(plan), _files(plan), _files(plan))
    assert problems == []
    first, second = roll["steps"]
    assert first["paths"] == ["prefill[0]", "decode[0]"]
    # Its rank 1 stops and starts with it, on gpu2, and holds the same GPUs there.
    assert first["names"] == {"gpu1": ["sglang-dsv4-prefill"], "gpu3": ["sglang-dsv4-decode"],
                              "gpu2": ["sglang-dsv4-decode-rank1"]}
    assert first["gpus"] == {"gpu1": [0, 1, 2, 3], "gpu3": [4, 5, 6, 7], "gpu2": [4, 5, 6, 7]}
    # The worker API knows rank 0 alone; the readiness wait watches the step's ranks only.
    assert [e["url"] for e in first["api"] if e["worker_type"] == "decode"] == ["http://10.0.0.13:30002"]
    assert [r["name"] for r in first["gates"]["ranks"]] == ["sglang-dsv4-decode-rank1"]
    assert second["gates"]["ranks"] == [] and second["names"]["gpu2"] == ["sglang-dsv4-prefill-2"]


def test_moving_a_multi_node_worker_to_other_nodes_is_refused() -> None:
    plan = _plan(_multi_node_xpyd())
    serving = json.loads(_spec_json(plan))
    serving["deployment"]["decode"][0]["nodes"] = ["gpu3", "gpu1"]
    problems, _ = rolling_plan.run_plan(plan, json.dumps(serving), _files(plan), _files(plan))
    assert [p.field for p in problems] == ["decode[0].nodes"], problems
