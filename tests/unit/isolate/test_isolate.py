"""The experiment's pieces: the combined twin of a PD release, the suite, the verdict and the report."""

from __future__ import annotations

import json
import sys

import pytest

from dsv4deploy.isolate import (
    breaks_at,
    combined_from_pd,
    decide,
    isolation_plan,
    parity_suite,
    parse_suite,
    side_summary,
)
from dsv4deploy.isolate.report import build_isolate_report, write_isolate_report
from dsv4deploy.plan import render
from dsv4deploy.plan.services import build_services
from dsv4deploy.spec import SpecError
from tests.golden.fixture_specs import combined_spec, pd_spec, xpyd_spec


def test_the_combined_twin_keeps_model_overrides_env_and_graphs_on_the_prefill_gpus():
    pd = pd_spec(model_overrides={"rope_scaling": None}, context_length=524288)
    spec, notes = combined_from_pd(pd)
    server = spec.combined
    assert spec.topology == "combined"
    assert (server.host, server.gpus, server.tp_size) == ("gpu1", [0, 1, 2, 3], 4)
    assert server.port == 8000, "clients keep the router's endpoint"
    assert spec.model_override_args(server) == pd.model_override_args(pd.prefill[0])
    assert spec.effective(server, "context_length") == 524288
    assert server.cuda_graph == pd.decode[0].cuda_graph
    (svc,) = build_services(spec)
    prefill, decode = build_services(pd)[:2]
    assert svc.env == {**decode.env, "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert "--disaggregation-mode" not in svc.argv
    assert svc.argv[svc.argv.index("--cuda-graph-max-bs-decode") + 1] == "64"
    for flag in ("--json-model-override-args", "--chat-template", "--context-length", "--model-path"):
        assert svc.argv[svc.argv.index(flag) + 1] == prefill.argv[prefill.argv.index(flag) + 1]
    # The fixture's prefill and decode differ on one switch and on CUDA graphs: both are said.
    assert any("SGLANG_DSV4_BF16_INDEX_K" in n and "decode's" in n for n in notes)
    assert any("CUDA graphs differ" in n for n in notes)


def test_gpus_port_and_env_can_be_chosen_and_are_noted():
    spec, notes = combined_from_pd(pd_spec(), gpus=[4, 5, 6, 7], port=30005, env={"SGLANG_X": "1"})
    assert (spec.combined.gpus, spec.combined.port, spec.combined.env["SGLANG_X"]) == ([4, 5, 6, 7], 30005, "1")
    assert any("GPUs [4, 5, 6, 7] chosen" in n for n in notes)
    assert any("SGLANG_X set on purpose" in n for n in notes)


def test_a_combined_layout_that_cannot_work_is_refused_naming_the_variable():
    with pytest.raises(SpecError) as err:
        combined_from_pd(pd_spec(), gpus=[6, 7, 8, 9])
    assert "do not exist" in str(err.value) and "isolate_gpus" in str(err.value)
    with pytest.raises(SpecError) as err:
        combined_from_pd(pd_spec(), port=70000)
    assert "isolate_port" in str(err.value)


def test_a_combined_release_cannot_be_isolated():
    with pytest.raises(SpecError, match="not PD"):
        combined_from_pd(combined_spec())


def test_pd_only_extra_args_are_left_out():
    pd_only = ["--disaggregation-decode-polling-interval", "2"]
    pd = pd_spec(decode={**pd_spec().decode[0].model_dump(), "extra_args": [*pd_only, "--enable-metrics"]},
                 prefill={**pd_spec().prefill[0].model_dump(), "extra_args": []})
    spec, notes = combined_from_pd(pd)
    assert spec.combined.extra_args == ["--enable-metrics"]
    assert any("PD-only" in n for n in notes)


def test_several_prefills_are_replaced_by_one_server_on_the_first_prefill_host():
    spec, notes = combined_from_pd(xpyd_spec())
    assert (spec.combined.host, spec.combined.port) == ("gpu1", 8000)
    assert any("2 prefill and 2 decode servers" in n for n in notes)


def test_isolation_plan_from_spec_json_has_both_layouts_and_settings_side_by_side():
    pd = pd_spec()
    text = render.spec_json(pd, "gpu1")
    plan = isolation_plan(text, ["gpu1"], now=0)
    assert plan["original"]["topology"] == "pd" and plan["original"]["router_url"] == "http://10.0.0.11:8000"
    assert plan["original"]["hosts"]["gpu1"]["gpus"] == list(range(8))
    combined = plan["combined"]
    assert combined["topology"] == "combined" and combined["hosts"]["gpu1"]["gpus"] == [0, 1, 2, 3]
    assert set(combined["hosts"]["gpu1"]["files"]) >= {"bin/serve-sglang-dsv4.sh", "spec.json", "manifest.json"}
    rows = {row["setting"]: row for row in plan["settings"]}
    assert rows["json_model_override_args"]["same"] is True
    assert rows["environment"]["same"] is False  # prefill's switch differs from decode's in the fixture
    assert rows["GPUs (tp)"]["same"] is None


@pytest.mark.parametrize("text, names", [("needle", ["needle"]), ("smoke, needle,smoke", ["smoke", "needle"]),
                                         ("soak", ["soak"])])
def test_suites_are_parsed(text, names):
    assert parse_suite(text) == names


@pytest.mark.parametrize("text", ["", "needle,sanity", "readiness"])
def test_unknown_or_missing_suites_are_refused(text):
    with pytest.raises(SpecError) as err:
        parse_suite(text)
    assert "suite" in str(err.value) and "smoke" in str(err.value)


def gate(name, status, phase, summary="fine", **evidence):
    return {"name": name, "status": status, "seconds": 1.0, "summary": summary, "evidence": evidence, "phase": phase}


DEPTHS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # 8 cells a length: enough pairs for McNemar to decide


def needle(status, phase, fractions):
    """A needle result whose cells are the same prompts on both sides (same lengths, depths and codes)."""
    cells = [{"context_tokens": n, "prompt_tokens": n + 3, "depth": d, "code": f"c{n}-{d}",
              "recalled": i < round(f * len(DEPTHS)), "error": None}
             for n, f in fractions.items() for i, d in enumerate(DEPTHS)]
    curve = [{"context_tokens": n, "prompt_tokens": n + 3, "cells": len(DEPTHS), "recalled": round(f * len(DEPTHS)),
              "errors": 0, "fraction": f} for n, f in fractions.items()]
    return gate("needle", status, phase, f"needle {status}", cells=cells, curve=curve, required_tokens=2200)


def side(*gates, error=None):
    return side_summary(list(gates), ["needle"], error)


READY = gate("readiness", "passed", "x")


@pytest.mark.parametrize("pd_ok, combined_ok, verdict", [
    (False, True, "pd_specific"), (False, False, "shared_path"), (True, True, "clean"), (True, False, "inconclusive"),
])
def test_verdict_from_both_sides(pd_ok, combined_ok, verdict):
    pd = side(READY, needle("passed" if pd_ok else "failed", "pd", {2000: 1.0 if pd_ok else 0.0}))
    combined = side(READY, needle("passed" if combined_ok else "failed", "combined",
                                  {2000: 1.0 if combined_ok else 0.0}))
    got, why = decide(pd, combined)
    assert got == verdict
    assert why


def test_both_failing_alike_is_shared_path_only_with_enough_misses_to_bound_the_ratio():
    # 8 cells missed a side bound the miss ratio within 2x (0.63-1.6); 2 a side only to 0.16-6.3: inconclusive
    lost = {2000: 0.0}
    verdict, why = decide(side(READY, needle("failed", "pd", lost)), side(READY, needle("failed", "combined", lost)))
    assert verdict == "shared_path" and "within 2x" in why, why
    few = [dict(c, depth=0.5) for c in needle("failed", "pd", lost)["evidence"]["cells"][:2]]
    one = {**needle("failed", "pd", lost), "evidence": {"cells": few}}
    verdict, why = decide(side(READY, one), side(READY, {**one, "phase": "combined"}))
    assert verdict == "inconclusive" and "more required cells" in why, why


def test_a_needle_that_failed_before_asking_or_a_soak_with_nothing_finished_is_inconclusive():
    # Once read shared_path (both sides) or pd_specific (PD only): a side that measured nothing decides nothing.
    empty = gate("needle", "failed", "pd", "the server answered 500 before any cell")
    fine = needle("passed", "combined", {2000: 1.0})
    verdict, why = decide(side(READY, empty), side(READY, fine))
    assert verdict == "inconclusive" and "PD side could not measure" in why and "500" in why
    verdict, _ = decide(side(READY, {**empty, "phase": "pd"}), side(READY, {**empty, "phase": "combined"}))
    assert verdict == "inconclusive"
    design = {"acceptable_rate": 0.005}
    none = gate("soak", "inconclusive", "pd", "no session finished", finished=0, corrupted_sessions=0, design=design)
    clean = gate("soak", "passed", "combined", "fine", finished=600, corrupted_sessions=0, design=design)
    verdict, why = decide(side_summary([READY, none], ["soak"]), side_summary([READY, clean], ["soak"]))
    assert verdict == "inconclusive" and "no session finished on the PD side" in why


def test_a_combined_side_that_never_started_is_inconclusive_saying_why():
    pd = side(READY, needle("failed", "pd", {2000: 0.0}))
    combined = side(error="combined start: sglang-dsv4 did not start: Traceback ...")
    verdict, why = decide(pd, combined)
    assert verdict == "inconclusive" and "combined side could not be tested" in why and "did not start" in why


def test_a_skipped_suite_makes_the_side_untested_saying_why():
    soak = gate("soak", "skipped", "pd", "soak_enabled is false")
    pd = side_summary([READY, soak], ["soak"])
    verdict, why = decide(pd, side_summary([READY, gate("soak", "passed", "combined")], ["soak"]))
    assert verdict == "inconclusive" and "soak was skipped: soak_enabled is false" in why


def test_parity_alone_is_judged_across_the_sides_not_by_each_sides_own_status():
    # Seen on the real engine: both sides' parity gates failed to measure (the fixed set's long prompts over a
    # 4096-token context), which the verdict once read as "fails on both sides: shared_path".
    def parity(status, summary, tokens):
        outputs = {"p": {"tokens": tokens, "logprobs": [-0.1] * len(tokens), "top": [], "length": 24, "kind": "plain"}}
        return gate("parity", status, "x", summary, record={"outputs": outputs, "tolerance": 0.0})

    unmeasured = parity("failed", "parity could not be measured: plain-1600: HTTP 400", [1, 2])
    pd, combined = side_summary([READY, unmeasured], ["parity"]), side_summary([READY, unmeasured], ["parity"])
    assert decide(pd, combined) == ("clean", "no suite but parity ran")
    lost = side_summary([READY, parity("passed", "recorded", [1, 9])], ["parity"])
    kept = side_summary([READY, parity("passed", "recorded", [1, 2])], ["parity"])
    sides = {"pd": lost, "combined": kept}
    verdict, why = parity_suite.with_parity(decide(lost, kept), parity_suite.comparison(sides))
    assert verdict == "pd_specific" and "the difference is in the PD path" in why


def test_recall_breaks_at_the_first_length_not_fully_recalled():
    curve = [{"context_tokens": 8000, "fraction": 0.0}, {"context_tokens": 2000, "fraction": 1.0},
             {"context_tokens": 5500, "fraction": 0.5}]
    assert breaks_at(curve) == 5500
    assert breaks_at(curve[1:2]) is None


def report(restored=True, **kw):
    gates = [gate("readiness", "passed", "original"), gate("smoke", "passed", "original"),
             needle("failed", "pd", {2000: 0.0}),
             gate("readiness", "passed", "combined"), gate("config", "passed", "combined"),
             needle("passed", "combined", {2000: 1.0}),
             gate("readiness", "passed", "restore"), gate("smoke", "passed", "restore")]
    return build_isolate_report(
        suite=["needle"], original={"release_id": "R1", "endpoint": "http://127.0.0.1:8000", "topology": "pd"},
        combined={"release_id": "C1", "endpoint": "http://127.0.0.1:8000"}, gates=gates,
        settings=[{"setting": "environment", "pd": {"prefill": "A=1", "decode": "A=1"}, "combined": "A=1",
                   "same": True}],
        notes=["env A set on purpose"], restored=restored, **kw)


def test_report_json_has_the_contract_fields(tmp_path):
    data = report()
    paths = write_isolate_report(tmp_path, data)
    saved = json.loads(paths["json"].read_text())
    assert (saved["verdict"], saved["restored"], saved["serving_release"], saved["status"]) == (
        "pd_specific", True, "R1", "ok")
    assert set(saved["sides"]) == {"pd", "combined"}
    assert saved["sides"]["pd"]["recall_curve"][0]["fraction"] == 0.0
    assert saved["sides"]["pd"]["recall_breaks_at"] == 2000 and saved["sides"]["combined"]["recall_breaks_at"] is None
    assert [g["name"] for g in saved["sides"]["combined"]["gates"]] == ["readiness", "config", "needle"]
    md = paths["md"].read_text()
    assert md.startswith("# Isolation report") and "**PD_SPECIFIC**" in md and "restored and verified" in md
    assert "| 2000 | 0/8 (0%) | 8/8 (100%) |" in md
    assert "Needle grid: PD" in md and "Needle grid: the combined server" in md
    assert "env A set on purpose" in md


def test_the_report_shows_each_sides_realised_occupancy_and_a_confounded_load(tmp_path):
    design = {"acceptable_rate": 0.005}

    def soak(phase, corrupted, role, running):
        occupancy = [{"name": f"sglang-dsv4-{role}", "role": role, "samples": 9, "mean_running": running,
                      "peak_running": running + 2, "error": None}]
        return gate("soak", "failed", phase, "soak", finished=600, corrupted_sessions=corrupted, design=design,
                    occupancy=occupancy)

    gates = [gate("readiness", "passed", "original"), soak("pd", 108, "decode", 30.0),
             gate("readiness", "passed", "combined"), soak("combined", 12, "combined", 8.5)]
    data = build_isolate_report(suite=["soak"], original={"release_id": "R1"}, combined={"release_id": "C1"},
                                gates=gates, restored=True)
    assert data["verdict"] == "pd_amplified" and "CONFOUNDED BY LOAD" in data["why"]
    md = write_isolate_report(tmp_path, data)["md"].read_text()
    assert ("| realised occupancy (soak) | sglang-dsv4-decode (decode): 30 running on average, peak 32 | "
            "sglang-dsv4-combined (combined): 8.5 running on average, peak 10.5 |") in md


def test_a_failed_restore_is_a_failed_report_with_the_manual_steps(tmp_path):
    data = report(restored=False, restore_error="readiness failed", manual_steps="Manual steps: point current at R1")
    assert (data["status"], data["serving_release"]) == ("failed", None)
    md = write_isolate_report(tmp_path, data)["md"].read_text()
    assert "**RESTORE FAILED**" in md.splitlines()[2]
    assert "Manual steps: point current at R1" in md


def test_a_refused_run_says_so_and_nothing_ran(tmp_path):
    data = build_isolate_report(suite=["needle"], original={"release_id": "R1"}, combined={}, gates=[],
                                restored=False, refused="the serving release R1 is not healthy")
    assert (data["status"], data["verdict"], data["serving_release"]) == ("refused", "inconclusive", "R1")
    assert "**REFUSED**" in write_isolate_report(tmp_path, data)["md"].read_text()


def test_heatmaps_side_by_side_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    paths = write_isolate_report(tmp_path, report())
    assert paths["heatmaps"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![needle recall, PD and combined side by side](needle-heatmaps.png)" in paths["md"].read_text()


def test_heatmaps_are_skipped_and_said_so_without_matplotlib(tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.colors"):
        monkeypatch.setitem(sys.modules, name, None)
    paths = write_isolate_report(tmp_path, report())
    assert "heatmaps" not in paths
    assert "Heatmaps skipped: matplotlib is not installed" in paths["md"].read_text()


def test_the_twin_keeps_each_roles_experiment_switches_and_notes_a_difference():
    # A switch added for decode only is the decode's in the combined twin, and said.
    pd = pd_spec(server_env_extra={"SGLANG_ALL": "1"}, server_env_extra_by_role={"decode": {"SGLANG_D": "1"}})
    spec, notes = combined_from_pd(pd)
    (svc,) = build_services(spec)
    assert svc.env["SGLANG_ALL"] == "1" and svc.env["SGLANG_D"] == "1"
    assert any("SGLANG_D differs" in n for n in notes)


def test_the_twin_of_a_release_with_secrets_gets_them_from_the_inventory_by_digest():
    # spec.json holds digests only; the twin's env file is filled from the inventory.
    from dsv4deploy.plan import secret_files

    token = "hf_" + "k" * 20
    inventory = pd_spec(server_env={"SGLANG_DSV4_BF16_INDEX_K": "0", "HF_TOKEN": token})
    salt = {"gpu1": "7e" * 32}  # the host's digest salt: spec.json's digests are keyed by it
    release = render.render_release(inventory, "gpu1", salt["gpu1"])["spec.json"]
    assert token not in release
    plan = isolation_plan(release, ["gpu1"])
    assert token not in json.dumps(plan)
    files = secret_files(inventory, ["gpu1"], planned=plan["combined"]["spec"], keys=salt)["gpu1"]
    assert files == {"/opt/dsv4deploy/secrets/sglang-dsv4.env": f'HF_TOKEN="{token}"\n'}
    # The inventory's secret changed since the release was made: said, not written wrong.
    changed = pd_spec(server_env={"SGLANG_DSV4_BF16_INDEX_K": "0", "HF_TOKEN": token + "2"})
    with pytest.raises(SpecError, match="the secret values of HF_TOKEN in this release differ from the inventory's"):
        secret_files(changed, ["gpu1"], planned=plan["combined"]["spec"], keys=salt)


def test_the_twin_of_a_release_served_as_root_is_planned_only_where_the_inventory_says_root_is_meant():
    # spec.json does not record service_user_root_ok: the inventory's word is passed on, or the twin is refused.
    from dsv4deploy.spec import load_spec
    from tests.golden.fixture_specs import PD_COMMON, host_vars

    pd = load_spec(PD_COMMON, {"gpu1": host_vars(service_user="root", service_user_root_ok=True)})
    text = render.spec_json(pd, "gpu1")
    with pytest.raises(SpecError, match="service_user_root_ok: true if you mean root"):
        isolation_plan(text, ["gpu1"], now=0)
    plan = isolation_plan(text, ["gpu1"], root_ok=["gpu1"], now=0)
    assert plan["combined"]["topology"] == "combined"
