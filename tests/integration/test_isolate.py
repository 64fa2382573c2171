"""The decisive experiment (playbooks/isolate.yml) on the simulated host, behind the real sglang-router.

One host for the module, tests in order: each deploys (or keeps) a PD release, runs the experiment,
and checks the verdict and that the same PD release serves again afterwards, whatever happened. The clean
release the first case deploys (with a secret env) serves the cases up to the failed restore, which keep it;
the three faulty productions come last, each deploying its own.
The needle grids are one or two cells, sized to land on the side of the model's limits they test.
"""

from __future__ import annotations

import json
import os
import re

import httpx
import pytest

from tests.integration.simhost import READINESS, SMALL_SOAK, SimHost

pytestmark = pytest.mark.integration

FAST = ["-e", "readiness_deadline_s=30", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK]
# The longest length is the requirement (the gate refuses a grid that cannot reach it); a cell's real
# size (usage.prompt_tokens) lands near its target, so the shorter row is the one surely within it.
# A weak check a production could have passed: the needle sits inside the sliding window (128 tokens).
WEAK_NEEDLE = ["-e", "needle_required_tokens=120", "-e", '{"needle_lengths": [100, 120], "needle_depths": [0.5]}']
# Far beyond the window and well within what index_topk 1024 recalls (6144 tokens for certain).
NEEDLE_2K = ["-e", "needle_required_tokens=2200", "-e", '{"needle_lengths": [2000, 2200], "needle_depths": [0.5]}']
# Truncation at index_topk 1024: two depths a length give each length 8 prompts PD alone misses (the combined
# cells pass after four trials), enough for McNemar after Holm's correction; at 12000 (the curve, one trial a
# cell) both sides lose the needle (the model's limit).
NEEDLE_TRUNCATION = ["-e", "needle_required_tokens=2200",
                     "-e", '{"needle_lengths": [2000, 2200, 12000], "needle_depths": [0.3, 0.6]}']
# Recall at index_topk 512 with a requirement past its reach (4K): two dead cells a side, 5 misses each, bound
# the PD/combined miss ratio within 2x (0.69-1.4).
NEEDLE_512 = ["-e", "needle_required_tokens=5500",
              "-e", '{"needle_lengths": [5000, 5500], "needle_depths": [0.5]}']
PD_PROGRAMS = {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}
# The clean release's secret env: every run on that release passes it again, as an operator's inventory would.
TOKEN = "hf_" + os.urandom(12).hex()
SECRET = ["-e", json.dumps({"server_env_extra": {"HF_TOKEN": TOKEN}})]


def isolate_report(host: SimHost) -> dict:
    return json.loads((host.reports / "isolate" / "latest" / "report.json").read_text())


def assert_restored(host: SimHost, release: str, report: dict) -> None:
    """The release that served before is active again, in PD, verified, and answers clients."""
    assert report["restored"] is True and report["status"] == "ok"
    assert report["serving_release"] == release == report["original_release"]
    assert host.active_release() == release
    assert set(host.pids()) == PD_PROGRAMS
    restore = {g["name"]: g["status"] for g in report["restore"]["gates"]}
    assert restore == {"readiness": "passed", "smoke": "passed"}
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "Say OK"}], "max_tokens": 8}
    r = httpx.post(f"{host.endpoint}/v1/chat/completions", json=body, timeout=30,
                   headers={"Authorization": f"Bearer {host.api_key}"})
    assert r.status_code == 200 and "OK" in r.json()["choices"][0]["message"]["content"]
    # The combined release was temporary: gone, and never a rollback target.
    combined = report["combined_release"]
    assert combined and combined not in os.listdir(host.install_root / "releases")
    state = json.loads((host.install_root / "state.json").read_text())
    assert combined not in state.get("good", []) and combined not in state.get("history", [])
    assert not (host.install_root / "deploy.lock").exists()


def deploy(host: SimHost, *extra: str) -> str:
    proc = host.playbook("deploy.yml", "-e", "topology=pd", *WEAK_NEEDLE, *FAST, *extra)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert host.report()["verdict"] in ("promoted", "unchanged")
    return host.active_release() or ""


def test_clean_pd_gives_clean_and_is_restored_and_the_combined_twin_gets_the_secret_env(sim_host: SimHost) -> None:
    # One deploy and one experiment for two behaviours: a clean release gives clean, and
    # the combined twin of a release with a secret env gets it from the inventory (spec.json holds a digest;
    # the twin's 0600 env file is filled) and it never shows.
    token, secret = TOKEN, SECRET
    release = deploy(sim_host, *secret)
    deploy_report = sim_host.report()
    proc = sim_host.playbook("isolate.yml", "-e", "suite=smoke,needle", *NEEDLE_2K, *FAST, *secret)
    assert proc.returncode == 0, proc.stdout[-6000:]
    # The plan line, before the suite runs: what runs where, and about how long it takes.
    # (the YAML callback wraps a long message: the words are joined again before looking)
    words = " ".join(proc.stdout.split())
    plan = re.search(r"msg: 'Plan: smoke, needle on release (.*?)'", words)
    assert plan, proc.stdout[-3000:]
    assert "estimated time about" in plan[1] and "needle prompts" in plan[1], plan[1]
    report = isolate_report(sim_host)
    assert report["verdict"] == "clean", report["why"]
    assert report["suite"] == ["smoke", "needle"]
    for side in ("pd", "combined"):
        assert report["sides"][side]["ran"] and report["sides"][side]["passed"]
        assert [g["name"] for g in report["sides"][side]["gates"] if g["phase"] == side][-2:] == ["smoke", "needle"]
        curve = report["sides"][side]["recall_curve"]
        assert [(p["context_tokens"], p["fraction"]) for p in curve] == [(2000, 1.0), (2200, 1.0)]
    assert report["sides"]["combined"]["endpoint"] == sim_host.endpoint  # the router's port, kept for clients
    # Same model, overrides, environment switches and CUDA graphs on both sides.
    same = {row["setting"]: row["same"] for row in report["settings"]}
    assert same["json_model_override_args"] and same["environment"] and same["model"] and same["CUDA graphs"]
    assert_restored(sim_host, release, report)
    # The deploy's own report and its latest link are untouched by the experiment.
    assert sim_host.report() == deploy_report
    md = (sim_host.reports / "isolate" / "latest" / "report.md").read_text()
    assert "**CLEAN**" in md and "Recall curve" in md and "restored and verified" in md
    assert "ISOLATED: **CLEAN**" in proc.stdout
    twin = sim_host.install_root / "secrets" / "sglang-dsv4.env"
    assert twin.read_text() == f'HF_TOKEN="{token}"\n' and (twin.stat().st_mode & 0o777) == 0o440, \
        "the combined twin's env file holds the secret, 0440 (root's, the service user's group reads it)"
    assert token not in proc.stdout + proc.stderr, "the secret never shows in the experiment's output"
    assert not [p for p in sim_host.reports.rglob("*") if p.is_file() and token.encode() in p.read_bytes()], \
        "the secret is in no report"


def test_the_soak_alternates_the_sides_in_blocks_and_judges_each_look_at_its_level(sim_host: SimHost) -> None:
    # A clean release: 12 sessions a side cannot show a side clean at the first look's level, so the experiment
    # goes back to PD, runs a second block on each side (A-B-A-B) and judges the pooled counts at the last look.
    release = sim_host.active_release() or ""
    proc = sim_host.playbook("isolate.yml", "-e", "suite=soak", "-e", "dsv4_isolate_soak_sessions=24", *FAST, *SECRET)
    assert proc.returncode == 0, proc.stdout[-6000:]
    words = " ".join(proc.stdout.split())
    assert "at most 24 soak sessions a side in 2 rounds of 12" in words and "4 switches" in words, words[-3000:]
    report = isolate_report(sim_host)
    for side in ("pd", "combined"):
        soak = next(g for g in report["sides"][side]["gates"] if g["name"] == "soak")
        assert [b["finished"] for b in soak["evidence"]["blocks"]] == [12, 12], soak["evidence"]
        assert soak["evidence"]["finished"] == 24 and soak["evidence"]["look"] == 2
    # Between the rounds the original came back and proved it served.
    assert {g["name"]: g["status"] for g in report["between"]} == {"readiness": "passed", "smoke": "passed"}
    assert report["verdict"] == "inconclusive" and "look 2 of 2 at level 0.044" in report["why"], report["why"]
    md = (sim_host.reports / "isolate" / "latest" / "report.md").read_text()
    assert "## Soak blocks" in md and "| 2 | 0 of 12 | 0 of 12 |" in md, md
    assert_restored(sim_host, release, report)


def test_combined_server_that_crashes_on_start_is_inconclusive_and_restored(sim_host: SimHost) -> None:
    release = sim_host.active_release() or ""
    proc = sim_host.playbook("isolate.yml", "-e", "suite=needle", *NEEDLE_2K, *FAST, *SECRET,
                             "-e", '{"isolate_env": {"DSV4_SIM_FAULTS": "crash_on_start"}}')
    assert proc.returncode == 0, proc.stdout[-6000:]
    report = isolate_report(sim_host)
    assert report["verdict"] == "inconclusive"
    assert "combined side could not be tested" in report["why"] and "did not start" in report["why"]
    assert report["sides"]["pd"]["ran"] and report["sides"]["combined"]["ran"] is False
    assert any("DSV4_SIM_FAULTS" in note and "on purpose" in note for note in report["notes"])
    assert_restored(sim_host, release, report)


def test_an_unknown_suite_is_refused_before_anything_changes(sim_host: SimHost) -> None:
    before = sim_host.pids()
    release = sim_host.active_release()
    proc = sim_host.playbook("isolate.yml", "-e", "suite=needle,sanity", *FAST, *SECRET)
    assert proc.returncode != 0
    assert "unknown suite 'sanity'" in proc.stdout and "nothing was changed" in proc.stdout
    report = isolate_report(sim_host)
    assert (report["status"], report["restored"]) == ("refused", False)
    assert sim_host.pids() == before and sim_host.active_release() == release
    # A soak budget that cannot give every round a block on each side, likewise.
    proc = sim_host.playbook("isolate.yml", "-e", "suite=soak", "-e", "dsv4_isolate_soak_sessions=1",
                             "-e", "dsv4_isolate_soak_rounds=2", *FAST, *SECRET)
    assert proc.returncode != 0
    words = " ".join(proc.stdout.split())
    assert "dsv4_isolate_soak_rounds" in words and "2 rounds cannot split dsv4_isolate_soak_sessions 1" in words
    assert "nothing was changed" in words
    assert sim_host.pids() == before and sim_host.active_release() == release


def test_an_unhealthy_original_is_refused_unless_forced_and_then_comes_back_healthy(sim_host: SimHost) -> None:
    release = sim_host.active_release() or ""
    sim_host.supervisorctl("stop", "sglang-dsv4-router")
    # The health check's smoke retries through the stopped router until its deadline (FAST's 30 s, 27 s of
    # each run here): a short one decides the same, and the sides' and the restore's smoke still pass in it.
    short_smoke = ["-e", "smoke_deadline_s=8"]
    proc = sim_host.playbook("isolate.yml", "-e", "suite=needle", *NEEDLE_2K, *FAST, *SECRET, *short_smoke)
    assert proc.returncode != 0
    assert f"REFUSED, nothing was changed: the serving release {release} is not healthy" in proc.stdout
    assert "isolate_force=true" in proc.stdout
    report = isolate_report(sim_host)
    assert (report["status"], report["restored"], report["verdict"]) == ("refused", False, "inconclusive")
    assert set(sim_host.pids()) == PD_PROGRAMS - {"sglang-dsv4-router"}, "nothing was started or stopped"
    assert not (sim_host.install_root / "deploy.lock").exists()
    # Forced: the experiment runs, and the restore starts the whole original release again.
    proc = sim_host.playbook("isolate.yml", "-e", "suite=needle", *NEEDLE_2K, *FAST, *SECRET, *short_smoke,
                             "-e", "isolate_force=true")
    assert proc.returncode == 0, proc.stdout[-6000:]
    report = isolate_report(sim_host)
    assert report["verdict"] == "inconclusive" and "PD side could not be tested" in report["why"]
    assert report["sides"]["combined"]["ran"] is True
    assert_restored(sim_host, release, report)


def test_a_restore_that_fails_is_the_loudest_failure(sim_host: SimHost) -> None:
    # The combined server's GPU memory is released late (12 s), beyond the restore's wait (5 s): the original
    # cannot be started. The run fails with the manual steps and a failed report.
    release = sim_host.active_release() or ""
    proc = sim_host.playbook("isolate.yml", "-e", "suite=smoke", *FAST, *SECRET,
                             "-e", "dsv4_service_gpu_free_timeout_s=5",
                             "-e", '{"isolate_env": {"DSV4_SIM_FAULTS": "slow_release=12"}}')
    assert proc.returncode != 0
    assert f"RESTORE FAILED: release {release} is NOT serving verified" in proc.stdout
    assert f"point {sim_host.install_root}/current at releases/{release}" in proc.stdout
    report = isolate_report(sim_host)
    assert (report["status"], report["restored"], report["serving_release"]) == ("failed", False, None)
    assert "GPU memory not released" in report["restore"]["error"]
    assert "Manual steps" in report["restore"]["manual_steps"]
    md = (sim_host.reports / "isolate" / "latest" / "report.md").read_text()
    assert "**RESTORE FAILED**" in md and "## Manual steps" in md
    assert not (sim_host.install_root / "deploy.lock").exists()
    # The operator's way back: roll back to the release by hand, once the memory is free.
    back = sim_host.playbook("rollback.yml", "-e", f"release={release}", *FAST, *SECRET)
    assert back.returncode == 0, back.stdout[-5000:]
    assert sim_host.active_release() == release and set(sim_host.pids()) == PD_PROGRAMS


def experiment(host: SimHost, setup: list[str], suite: list[str]) -> tuple[str, dict]:
    """Deploy PD with `setup`, run the experiment with it; (release, report). The deploy's gates are
    readiness alone: the experiment's own suite is the subject (gate names are not part of a release)."""
    release = deploy(host, *setup, *READINESS)
    proc = host.playbook("isolate.yml", *suite, *FAST, *setup)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return release, isolate_report(host)


def test_pd_transfer_truncation_gives_pd_specific_with_the_models_limit_named(sim_host: SimHost) -> None:
    # A production whose PD transfer loses every fact beyond the window (a weak needle check would pass it).
    # Judged per length where the combined server recalls (2000, 2200), Holm-corrected; at 12000 both sides
    # miss alike: the model's limit at index_topk 1024, named apart from the verdict.
    release, report = experiment(sim_host, ["-e", "sim_faults=pd_transfer_truncate"],
                                 ["-e", "suite=needle", *NEEDLE_TRUNCATION])
    assert report["verdict"] == "pd_specific", report["why"]
    assert "at 2000, 2200 tokens" in report["why"] and "the model's limit at 12000 tokens" in report["why"]
    pd, combined = report["sides"]["pd"], report["sides"]["combined"]
    assert pd["passed"] is False and pd["failed_suites"] == ["needle"] and pd["recall_breaks_at"] == 2000
    assert combined["passed"] is True and combined["recall_breaks_at"] == 12000
    assert_restored(sim_host, release, report)


def test_recall_at_index_topk_512_past_its_reach_gives_shared_path(sim_host: SimHost) -> None:
    # The seed 000 case: recall collapses beyond about 4K tokens in PD and on one combined server alike.
    release, report = experiment(sim_host, ["-e", "index_topk=512"], ["-e", "suite=needle", *NEEDLE_512])
    assert report["verdict"] == "shared_path", report["why"]
    assert "10 and 10 of 10 prompts missed" in report["why"] and "within 2x" in report["why"], report["why"]
    assert "the model's limit at 5000, 5500 tokens" in report["why"]
    assert report["sides"]["pd"]["failed_suites"] == report["sides"]["combined"]["failed_suites"] == ["needle"]
    assert_restored(sim_host, release, report)


def test_tool_call_corruption_at_the_seeds_non_pd_share_gives_pd_amplified(sim_host: SimHost) -> None:
    # The seed 002 case: the bf16 switch and CUDA graphs corrupt on the decode and, at 2/18 of that rate, on one
    # combined server with the same environment: the bug is shared, and PD amplifies it.
    setup = ["-e", json.dumps({"server_env_extra": {"SGLANG_DSV4_BF16_INDEX_K": "1"},
                               "sim_faults_by_role": {"decode": "tool_call_corruption=0.9"}})]
    release, report = experiment(sim_host, setup, ["-e", "suite=soak", "-e", "dsv4_isolate_soak_sessions=64"])
    assert report["verdict"] == "pd_amplified", report["why"]
    assert "PD corrupts more, and the combined server too is shown above 1.0%" in report["why"], report["why"]
    # Each side's realised occupancy, read from the servers' /metrics while the soak ran, is in the report.
    for side, role in (("pd", "decode"), ("combined", "combined")):
        soak = next(g for g in report["sides"][side]["gates"] if g["name"] == "soak")
        assert any(o["role"] == role and o["mean_running"] for o in soak["evidence"]["occupancy"]), soak["evidence"]
    assert "load comparable" in report["why"] or "CONFOUNDED BY LOAD" in report["why"]
    assert_restored(sim_host, release, report)
