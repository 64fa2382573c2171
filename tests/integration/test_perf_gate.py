"""The gates against the last good release in real deploys on the simulated host, perf and parity: the first
release's rounds and its parity record (greedy tokens, top-5 logprobs) are kept in state.json, not judged (perf is
skipped, never passed); the next clean release (an environment switch only) is judged against them and passes; a
release whose decode is 1.5 times slower (slow_decode=1.5) is refused with its figures and rolled back; one whose KV
transfer loses entries (pd_transfer_truncate) fails parity and is rolled back; one that changes index_topk is not
compared, naming the setting. These tests run in order on one host."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.simhost import SMALL_NEEDLE_RULE_VARS, VENV_BIN, SimHost
from tests.integration.test_deploy_flow import assert_serving

pytestmark = pytest.mark.integration

# Every gate, the needle and soak kept small (they are other tests' subject); the parity gate and the perf gate
# (both opt-in) at their defaults, parity before perf (perf last and alone).
GATES = ["-e", json.dumps({"needle_lengths": [500], "needle_depths": [0.5], "needle_required_tokens": 0,
                           "soak_enabled": False, **SMALL_NEEDLE_RULE_VARS,
                           "dsv4_gates_names": ["readiness", ["config", "smoke"], ["needle", "soak"], "parity",
                                                "perf"]}),
         "-e", "readiness_deadline_s=30", "-e", "smoke_deadline_s=30", "-e", "topology=pd", "-e", "index_topk=1024"]


def _perf(report: dict) -> dict:
    return next(g for g in report["gates"] if g["name"] == "perf")


def _parity(report: dict) -> dict:
    return next(g for g in report["gates"] if g["name"] == "parity")


def _bake(report: dict) -> dict:
    return next(g for g in report["gates"] if g["name"] == "bake")


def _state(host: SimHost) -> dict:
    return json.loads((host.install_root / "state.json").read_text())


def _release_with(switch: str) -> list[str]:
    # A harmless experiment switch makes a release of different content (not "unchanged").
    return ["-e", json.dumps({"server_env_extra": {"DSV4_PERF_TEST": switch}})]


def test_the_first_release_is_recorded_not_judged(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", *GATES, *_release_with("1"))
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "perf gate not run" not in proc.stdout
    report = sim_host.report()
    perf = _perf(report)
    assert report["verdict"] == "promoted" and perf["status"] == "skipped", perf["summary"]
    assert perf["summary"].startswith("recorded, not judged (no earlier figures"), perf["summary"]
    print(f"perf gate: {perf['seconds']:.2f} s")  # what it adds to a deploy (shown with -s)
    assert perf["evidence"]["judged"] is False
    figures = perf["evidence"]["figures"]
    client = figures["client"]
    assert all(client[k] and client[k] > 0 for k in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "output_tokens_per_s"))
    # The servers' own histograms, from their /metrics (--enable-metrics rendered): the decode saw every
    # request of each round and its inter-token latency is one decode step of a small batch (10 ms and more).
    decode = figures["servers"]["sglang-dsv4-decode"]
    assert decode["requests"] == 16 and 0.008 < decode["itl_p50_s"] < 0.2, decode
    # Every round's figures, the samples the next release is judged against.
    assert figures["rounds"] == 5 and len(figures["samples"]["client"]["itl_p50_s"]) == 5
    # Recorded on the host with the release's state, for the next deploy.
    release = sim_host.active_release()
    recorded = _state(sim_host)["perf"][release]
    assert recorded["release"] == release and recorded["client"] == client
    # The parity gate's record too: the fixed set's greedy tokens and top-5 logprobs, and what decides them.
    parity = _parity(report)
    assert parity["status"] == "passed" and parity["summary"].startswith(
        "recorded 9 prompts' greedy outputs and top-5 logprobs; no last good release's record"), parity["summary"]
    print(f"parity gate, recording: {parity['seconds']:.2f} s, {parity['evidence']['requests']} requests")
    kept = _state(sim_host)["parity"][release]
    assert kept["release"] == release and kept["outputs"] == parity["evidence"]["record"]["outputs"]
    assert kept["outputs"]["plain-3200"]["tokens"] and len(kept["outputs"]["tools-1"]["top"][0]) == 5


def test_a_clean_release_is_judged_against_the_last_good_one_and_passes_perf_and_the_bake(
        sim_host: SimHost) -> None:
    # One deploy for two promises (they were two cases, a deploy each): the perf gate judges the clean
    # release against the first one's figures and passes, and its short bake passes after it.
    first = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", *GATES, *_release_with("2"), "-e",
                             json.dumps({"dsv4_bake_s": 3, "dsv4_bake_interval_s": 1}))
    assert proc.returncode == 0, proc.stdout[-5000:]
    report = sim_host.report()
    assert report["verdict"] == "promoted"
    perf = _perf(report)
    assert perf["status"] == "passed" and perf["evidence"]["judged"] is True, perf["summary"]
    assert re.match(rf"\d+ figure\(s\) judged, none slower than release {first} \(one-sided Mann-Whitney U",
                    perf["summary"]), perf["summary"]
    assert perf["evidence"]["regressions"] == []
    # Only an environment switch changed: the parity gate compared the outputs with the first release's.
    parity = _parity(report)
    assert parity["status"] == "passed" and parity["summary"].startswith(
        "0 of 9 prompts out of tolerance 0.05 (this release against the last good release)"), parity["summary"]
    assert (parity["evidence"]["decision"]["events"], parity["evidence"]["decision"]["trials"]) == (0, 9)
    assert all(r["first_divergent"] is None and r["max_delta"] == 0 for r in parity["evidence"]["prompts"])
    print(f"parity gate, comparing: {parity['seconds']:.2f} s against {first}")
    bake = _bake(report)
    assert bake["status"] == "passed", bake["summary"]
    assert bake["summary"].startswith("baked 3 s: 3 successful, 0 failed, 0 inconclusive"), bake["summary"]
    intervals = bake["evidence"]["intervals"]
    # What a bake interval costs (shown with -s): the probes' time, the rest of the interval is a wait.
    print(f"bake: {bake['seconds']:.2f} s; intervals of 1 s took {[i['seconds'] for i in intervals]} s")
    # Every analysis of every interval judged something: the router and the servers counted the probes.
    analyses = {a["name"]: a for a in intervals[-1]["analyses"]}
    assert set(analyses) == {"error rate", "abort rate", "transfer failures", "canary needle", "tool-call probe"}
    assert all(a["phase"] == "successful" for i in intervals for a in i["analyses"]), intervals
    assert analyses["error rate"]["value"] == 0 and analyses["abort rate"]["value"] == 0
    release = sim_host.active_release()
    assert release in _state(sim_host)["good"]
    # Recorded baked: state.json and `dsv4deploy releases` say so, and the next perf gate judges against it.
    assert _state(sim_host)["baked"][release] == "passed"
    listed = subprocess.run([str(VENV_BIN / "dsv4deploy"), "releases", "-i", str(sim_host.inventory), "--json"],
                            capture_output=True, text=True, timeout=300, cwd="/")
    rows = {r["id"]: r["status"] for r in json.loads(listed.stdout)["local"]["releases"]}
    assert rows[release] == "baked", listed.stdout + listed.stderr


def test_a_one_and_a_half_times_slower_decode_is_refused_with_its_figures(sim_host: SimHost) -> None:
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", *GATES, *_release_with("3"), "-e", "sim_faults=slow_decode=1.5")
    assert proc.returncode != 0
    report = sim_host.report()
    assert report["verdict"] == "rolled_back" and report["failed_gate"] == "perf", report["verdict"]
    perf = _perf(report)
    assert perf["status"] == "failed"
    assert f"slower than release {good} (one-sided Mann-Whitney U at alpha 0.02" in perf["summary"]
    regressed = {(r["where"], r["figure"]) for r in perf["evidence"]["regressions"]}
    assert ("sglang-dsv4-decode", "itl_p50_s") in regressed, perf["summary"]
    itl = next(r for r in perf["evidence"]["regressions"] if r["figure"] == "itl_p50_s")
    assert itl["factor"] >= 1.25 and itl["p_value"] < 0.02, itl
    # Its figures against the last good release's (shown with -s), as the report's table gives them.
    now, before = perf["evidence"]["figures"], perf["evidence"]["baseline"]
    for where, figs in [("client", now["client"]), *sorted(now["servers"].items())]:
        was = before["client"] if where == "client" else before["servers"].get(where, {})
        print(f"slow_decode=1.5 {where}: " + ", ".join(f"{k} {v:.4g} (was {was.get(k) or 0:.4g})"
                                                     for k, v in figs.items() if isinstance(v, float)))
    # The report compares it with the last good release, as a table (regressions marked) and a plot.
    md = (sim_host.reports / "latest" / "report.md").read_text()
    assert f"Judged against release {good} (the last good one on these hosts)" in md, md
    assert any(line.startswith("| client |") and line.endswith("✗ |") for line in md.splitlines()), md
    assert (sim_host.reports / "latest" / "perf-vs-previous.png").read_bytes().startswith(b"\x89PNG")
    assert "ROLLED BACK" in proc.stdout and "perf" in proc.stdout
    assert sim_host.active_release() == good
    assert_serving(sim_host, good)
    # The refused release's figures are kept beside its failure; the last good one's stay the baseline.
    state = _state(sim_host)
    failed = next(r for r in state["failed"] if r != good)
    assert state["failed"][failed] == "perf" and (state["perf"][failed]["client"]["itl_p50_s"]
                                                   > perf["evidence"]["baseline"]["client"]["itl_p50_s"])


def test_verify_judges_what_serves_against_its_own_figures(sim_host: SimHost) -> None:
    good = sim_host.active_release()
    proc = sim_host.playbook("verify.yml", *GATES)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "gate perf: passed in" in proc.stdout and f"none slower than release {good}" in proc.stdout
    # What serves is compared with its own parity record from its deploy.
    assert "gate parity: passed in" in proc.stdout and "0 of 9 prompts out of tolerance" in proc.stdout

    # The retired perf_enabled still means what it said, and says what to do instead.
    proc = sim_host.playbook("verify.yml", *GATES, "-e", "perf_enabled=false")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "gate perf: skipped" in proc.stdout and "perf_enabled is false (retired" in proc.stdout
    assert "'perf_enabled' is no longer read: the perf gate is opt-in" in proc.stdout + proc.stderr


# The bake (docs/bake.md): short intervals, the probes sized so that a degrade_after=200 release crosses its
# 200th generation a few intervals into the bake (the gates above stay well below it).
BAKE = ["-e", json.dumps({"dsv4_bake_s": 30, "dsv4_bake_interval_s": 1, "dsv4_bake_probe_sessions": 40,
                          "dsv4_bake_canary_tokens": 500})]


def test_a_release_degrading_after_200_requests_passes_the_gates_and_is_rolled_back_in_the_bake(
        sim_host: SimHost) -> None:
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", *GATES, *BAKE, *_release_with("5"), "-e", "sim_faults=degrade_after=200")
    assert proc.returncode != 0
    report = sim_host.report()
    assert report["verdict"] == "rolled_back" and report["failed_gate"] == "bake", proc.stdout[-3000:]
    names = [g["name"] for g in report["gates"]]
    # Every gate before the bake passed (the rollback's own readiness and smoke follow it).
    before = report["gates"][:names.index("bake")]
    assert [g["name"] for g in before] == ["readiness", "config", "smoke", "needle", "soak", "parity", "perf"], names
    assert all(g["status"] in ("passed", "skipped") for g in before), before
    bake = _bake(report)
    intervals = bake["evidence"]["intervals"]
    # Good at first, then wrong answers: two failed intervals (more than failure_limit 1) end it early.
    assert intervals[0]["phase"] == "successful" and [i["phase"] for i in intervals[-2:]] == ["failed"] * 2
    assert len(intervals) < 30 and bake["summary"].startswith(f"failed after {len(intervals)} of 30 interval(s)")
    failed = {a["name"] for a in intervals[-1]["analyses"] if a["phase"] == "failed"}
    assert failed & {"canary needle", "tool-call probe"}, intervals[-1]
    assert "ROLLED BACK" in proc.stdout and "bake" in proc.stdout
    assert sim_host.active_release() == good
    assert_serving(sim_host, good)
    # The release that degraded is recorded failed by its bake (a rollback to it by hand is refused).
    assert _state(sim_host)["failed"][report["release"]] == "bake"


def test_a_bake_that_cannot_read_the_servers_metrics_ends_in_error_and_rolls_back(sim_host: SimHost) -> None:
    # The servers serve right but their /metrics fail: the bake cannot measure the abort rate or the transfers.
    # Argo's way: "could not measure" is an error, kept apart from inconclusive, and never a pass.
    good = sim_host.active_release()
    gates = [*GATES, "-e", json.dumps({"dsv4_gates_names": ["readiness", ["config", "smoke"], ["needle", "soak"]]})]
    bake = {"dsv4_bake_s": 3, "dsv4_bake_interval_s": 1, "dsv4_bake_error_limit": 2}
    proc = sim_host.playbook("deploy.yml", *gates, *_release_with("6"), "-e", "sim_faults=metrics_error",
                             "-e", json.dumps(bake))
    assert proc.returncode != 0, proc.stdout[-5000:]
    # Left out of the gates, perf is said to be opt-in on the plan line (with it, as above, it is not).
    assert "perf gate not run: it is opt-in (live traffic beside its load would fail a clean release)" \
        in " ".join(proc.stdout.split()), proc.stdout[:3000]
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "bake"), proc.stdout[-3000:]
    bake = _bake(report)
    assert bake["status"] == "error", bake["summary"]
    assert bake["summary"].startswith("error: 2 interval(s) in a row could not be measured"), bake["summary"]
    analyses = {a["name"]: a for a in bake["evidence"]["intervals"][-1]["analyses"]}
    assert analyses["abort rate"]["phase"] == "error", analyses
    assert analyses["abort rate"]["detail"] == "no servers metrics could be read", analyses
    assert analyses["canary needle"]["phase"] == analyses["tool-call probe"]["phase"] == "successful"
    assert sim_host.active_release() == good


# Readiness and smoke only beside the parity gate: the deploys below are the parity gate's subject.
PARITY = ["-e", json.dumps({"dsv4_gates_names": ["readiness", "smoke", "parity"]})]


def test_a_release_whose_kv_transfer_loses_entries_fails_parity_and_is_rolled_back(sim_host: SimHost) -> None:
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", *GATES, *PARITY, *_release_with("7"), "-e",
                             "sim_faults=pd_transfer_truncate")
    assert proc.returncode != 0
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "parity"), proc.stdout[-3000:]
    parity = _parity(report)
    assert parity["status"] == "failed"
    assert "prompts out of tolerance 0.05 (this release against the last good release)" in parity["summary"]
    rows = {r["prompt"]: r for r in parity["evidence"]["prompts"]}
    # The shortest prompt fits the sliding window the truncated KV keeps; the longest diverges.
    assert rows["plain-24"]["within_tolerance"] and not rows["plain-3200"]["within_tolerance"], rows
    assert "ROLLED BACK" in proc.stdout
    assert_serving(sim_host, good)
    state = _state(sim_host)
    assert state["failed"][report["release"]] == "parity" and report["release"] not in state["parity"]


def test_a_release_that_changes_index_topk_is_not_compared_for_parity_and_says_why(sim_host: SimHost) -> None:
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", *GATES, *PARITY, "-e", "index_topk=512", *_release_with("8"))
    assert proc.returncode == 0, proc.stdout[-5000:]
    report = sim_host.report()
    parity = _parity(report)
    assert report["verdict"] == "promoted" and parity["status"] == "skipped", parity["summary"]
    assert parity["summary"].startswith("not compared with the last good release: a model-affecting setting "
                                        "differs ("), parity["summary"]
    assert "index_topk" in parity["summary"], parity["summary"]
    # Its own record is the reference from now on (the next deploy has its settings).
    release = sim_host.active_release()
    assert release != good and _state(sim_host)["parity"][release]["release"] == release


def test_continuous_verification_writes_textfile_metrics_a_prometheus_parser_reads(sim_host: SimHost,
                                                                                   tmp_path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    release = sim_host.active_release()
    config = tmp_path / "watch.json"
    config.write_text(json.dumps({"deployment": "local", "endpoint": sim_host.endpoint,
                                  "model": "deepseek-v4-flash",  # the embedded inventory's served_name
                                  "textfile_dir": str(tmp_path / "textfile"),
                                  "install_root": str(sim_host.install_root),
                                  "api_key_file": str(sim_host.root / "api_key"), "canary_tokens": 500}))
    proc = subprocess.run([str(VENV_BIN / "python"), "-m", "dsv4deploy.watch", "--config", str(config), "--once"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "textfile" / "dsv4deploy-local.prom").read_text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("dsv4deploy_release_info", (("deployment", "local"), ("release", release)))] == 1
    for gate in ("canary_needle", "tool_calls"):
        assert samples[("dsv4deploy_gate_passed", (("deployment", "local"), ("gate", gate)))] == 1
    assert samples[("dsv4deploy_corruption_rate", (("deployment", "local"),))] == 0
    assert samples[("dsv4deploy_last_verification_timestamp_seconds", (("deployment", "local"),))] > 0


def _watch_processes(config: Path) -> list[int]:
    """PIDs of processes whose command line names `config` (settings file; its folder: the publish step too)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(config).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue  # ended meanwhile
    return found


def _verification(prom: Path, deadline_s: float, after: float = 0) -> dict:
    """The samples of the textfile once a verification ended after `after` (Unix time)."""
    from prometheus_client.parser import text_string_to_metric_families

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if prom.exists():
            samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                       for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}
            stamp = next(v for (n, _), v in samples.items() if n == "dsv4deploy_last_verification_timestamp_seconds")
            if stamp > after:
                return samples
        time.sleep(0.5)
    raise AssertionError(f"no verification after {after} in {prom} within {deadline_s} s")


def _assert_published(prom: Path, source: Path) -> None:
    """`prom` is the publish step's: a regular file of root's, 0644, naming the file it was copied from."""
    st = os.lstat(prom)
    assert stat.S_ISREG(st.st_mode) and (st.st_uid, st.st_mode & 0o777) == (0, 0o644), (prom, st)
    assert prom.read_text().splitlines()[0] == f"# Published by dsv4deploy from {source}"


def _timer_args(textfile_dir: Path, python: Path | str = VENV_BIN / "python") -> list[str]:
    return ["-e", "dsv4_verify_timer_host=local", "-e", f"dsv4_verify_timer_textfile_dir={textfile_dir}",
            "-e", f"dsv4_verify_timer_python={python}", "-e", "dsv4_verify_timer_interval_s=2",
            "-e", "dsv4_verify_timer_canary_tokens=500", "-e", "dsv4_verify_timer_probe_sessions=1"]


def test_continuous_verification_runs_under_the_hosts_supervisord_and_its_removal_leaves_nothing_running(
        sim_host: SimHost, tmp_path: Path) -> None:
    release = sim_host.active_release()
    textfile_dir = tmp_path / "textfile"
    textfile_dir.mkdir()  # node_exporter's (a folder the role created it removes when empty)
    config = sim_host.install_root / "verify-timer" / "watch.json"
    args = _timer_args(textfile_dir)
    try:
        proc = sim_host.playbook("verify_timer.yml", *args)
        assert proc.returncode == 0, proc.stdout[-5000:]
        program = json.loads(config.read_text())["deployment"]
        # The playbook returned once supervisord called it RUNNING (alive for its startsecs).
        status = sim_host.supervisorctl("status", f"dsv4-verify-{program}")
        assert "RUNNING" in status, status
        prom = textfile_dir / f"dsv4deploy-{program}.prom"
        first = _verification(prom, 60)
        labels = (("deployment", program),)
        assert first[("dsv4deploy_release_info", (*labels, ("release", release)))] == 1
        for gate in ("canary_needle", "tool_calls"):
            assert first[("dsv4deploy_gate_passed", (*labels, ("gate", gate)))] == 1
        assert first[("dsv4deploy_corruption_rate", labels)] == 0
        # node_exporter reads root's own copy, published by root's program beside the verification: a regular
        # file, never a link into the service user's folder.
        _assert_published(prom, sim_host.install_root / "verify-timer" / "metrics" / prom.name)
        assert "RUNNING" in sim_host.supervisorctl("status", f"dsv4-verify-{program}-publish")
        # It runs again by itself, every interval.
        _verification(prom, 30, after=first[("dsv4deploy_last_verification_timestamp_seconds", labels)])
        assert _watch_processes(config), "the program runs the watch with its settings"
    finally:
        removed = sim_host.playbook("verify_timer.yml", *args, "-e", "dsv4_verify_timer_state=absent")
    assert removed.returncode == 0, removed.stdout[-5000:]
    assert f"dsv4-verify-{program}" not in sim_host.supervisorctl("status")
    assert _watch_processes(config) == [] and _watch_processes(config.parent) == []  # the publish step too
    assert not (sim_host.install_root / "verify-timer").exists() and not prom.exists()
    assert textfile_dir.is_dir()  # the textfile directory stays (node_exporter's, not ours)
    # The release's programs still serve.
    assert_serving(sim_host, release)


def test_the_verification_timer_is_refused_for_a_host_not_in_the_play(sim_host: SimHost) -> None:
    before = sorted(p.name for p in sim_host.install_root.iterdir())
    proc = sim_host.playbook("verify_timer.yml", "-e", "dsv4_verify_timer_host=gpu9")
    assert proc.returncode != 0
    assert 'dsv4_verify_timer_host "gpu9" is not one of this play\'s hosts (local)' in proc.stdout
    assert sorted(p.name for p in sim_host.install_root.iterdir()) == before  # nothing written


# Last in this module: it removes the deployment.
def test_a_verification_that_cannot_start_fails_with_its_log_and_a_purge_removes_the_one_that_runs(
        sim_host: SimHost, tmp_path: Path) -> None:
    textfile_dir = tmp_path / "textfile"
    textfile_dir.mkdir()
    other = textfile_dir / "node.prom"  # another collector's file, beside ours
    other.write_text("node_custom 1\n")
    config = sim_host.install_root / "verify-timer" / "watch.json"
    # An interpreter whose environment differs between the role's import check and supervisord's start (as a
    # PYTHONPATH set in the login shell but not in supervisord's): the check passes, the watch exits at once with an
    # ImportError. -S: no site-packages, wherever this machine has it installed. (A Python without dsv4deploy at
    # all is refused before anything is written: test_verify_timer_privilege.)
    bare = tmp_path / "python-without-dsv4deploy"
    bare.write_text(f'#!/bin/sh\n[ "$1" = -c ] && exec {VENV_BIN / "python"} "$@"\nexec /usr/bin/python3 -S "$@"\n')
    bare.chmod(0o755)
    proc = sim_host.playbook("verify_timer.yml", *_timer_args(textfile_dir, python=bare))
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert config.exists(), out[-3000:]
    program = json.loads(config.read_text())["deployment"]
    assert f"host local: the verification program dsv4-verify-{program} does not run" in out, out[-3000:]
    assert "No module named" in out and "dsv4deploy" in out, out[-3000:]
    assert f"pip install dsv4deploy for {bare}" in out, out[-3000:]
    # Stopped: supervisord does not keep retrying it.
    assert "RUNNING" not in sim_host.supervisorctl("status", f"dsv4-verify-{program}")
    assert _watch_processes(config) == []

    # With an interpreter that has dsv4deploy it runs; then a purge removes it with the deployment.
    proc = sim_host.playbook("verify_timer.yml", *_timer_args(textfile_dir))
    assert proc.returncode == 0, proc.stdout[-5000:]
    prom = textfile_dir / f"dsv4deploy-{program}.prom"
    _verification(prom, 60)
    _assert_published(prom, sim_host.install_root / "verify-timer" / "metrics" / prom.name)
    proc = sim_host.playbook("stop.yml", "-e", "dsv4_stop_purge=true")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert _watch_processes(config.parent) == [] and sim_host.pids() == {}  # the publish step too
    assert not prom.exists() and not (sim_host.install_root / "verify-timer").exists()
    assert other.read_text() == "node_custom 1\n" and sorted(p.name for p in textfile_dir.iterdir()) == ["node.prom"]
    # Nothing of the verification's was left for the install root's purge to warn about.
    warned = [line for line in (proc.stdout + proc.stderr).splitlines() if "left in" in line]
    assert not any("verify-timer" in line for line in warned), warned
