"""The gated rollout end to end on the simulated host, behind the real sglang-router and supervisord.

The tests of this module run in order on one host: a good release is promoted first, and every
failing deploy after it must leave that (or the latest good) release serving and verified.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request

import httpx
import pytest

from tests.integration.simhost import REPO, SMALL_NEEDLE, SMALL_SOAK, VENV_BIN, SimHost, assert_cause_named

pytestmark = pytest.mark.integration

# Grids given after FAST replace its SMALL_NEEDLE (the last -e wins).
FAST = ["-e", "readiness_deadline_s=20", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK,
        *SMALL_NEEDLE]


RELEASES: dict[str, str] = {}  # releases later tests of this module go back to


def chat(host: SimHost, text: str = "Say OK") -> str:
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": text}], "max_tokens": 16}
    r = httpx.post(f"{host.endpoint}/v1/chat/completions", json=body, timeout=30,
                   headers={"Authorization": f"Bearer {host.api_key}"})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def assert_serving(host: SimHost, release: str) -> None:
    """`release` is active and answers through the endpoint clients use."""
    assert host.active_release() == release
    assert "OK" in chat(host)


def test_pd_deploy_with_index_topk_1024_is_promoted(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "topology=pd", "-e", "index_topk=1024", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    report = sim_host.report()
    assert report["verdict"] == "promoted"
    assert [g["name"] for g in report["gates"]] == ["readiness", "config", "smoke", "needle", "soak", "accuracy"]
    assert all(g["status"] == "passed" for g in report["gates"])
    assert report["endpoint"] == sim_host.endpoint
    assert report["needle"]["cells"], "the needle grid is in the report"
    assert sim_host.active_release() == report["release"]
    assert set(sim_host.pids()) == {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}
    assert "OK" in chat(sim_host)
    assert httpx.post(f"{sim_host.endpoint}/v1/chat/completions", json={}, timeout=30).status_code == 401
    md = (sim_host.reports / "latest" / "report.md").read_text()
    assert "PROMOTED" in md


def test_testinfra_suite_passes_on_the_deployed_host(sim_host: SimHost) -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/testinfra/test_deployed.py",
         "--hosts=local://", f"--dsv4-install-root={sim_host.install_root}",
         f"--dsv4-supervisorctl={VENV_BIN / 'supervisorctl'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    # Only the boot-enablement check may skip here: supervisord starts its programs itself.
    skipped = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
    assert all("not at boot" in ln for ln in skipped), skipped


def test_same_deploy_again_changes_nothing(sim_host: SimHost) -> None:
    before = sim_host.pids()
    release = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", "-e", "topology=pd", "-e", "index_topk=1024", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert sim_host.report()["verdict"] == "unchanged"
    assert "changed=0" in proc.stdout.split("PLAY RECAP")[-1]
    assert sim_host.pids() == before
    assert sim_host.active_release() == release


def test_check_diff_shows_the_change_and_changes_nothing(sim_host: SimHost) -> None:
    before = sim_host.pids()
    release = sim_host.active_release()
    releases = sorted(os.listdir(sim_host.install_root / "releases"))
    proc = sim_host.playbook("deploy.yml", "-e", "index_topk=512", "--check", "--diff", *FAST)
    assert "index_topk" in proc.stdout and "512" in proc.stdout  # the diff of the serve scripts
    assert sorted(os.listdir(sim_host.install_root / "releases")) == releases
    assert sim_host.active_release() == release
    assert sim_host.pids() == before


NEEDLE_5K5 = ["-e", "needle_required_tokens=5500",
              "-e", '{"needle_lengths": [2000, 5500], "needle_depths": [0.25, 0.75]}']


def test_ignored_override_is_logged_but_caught_by_recall_and_rolled_back(sim_host: SimHost) -> None:
    # The servers log index_topk 1024 and report it in /server_info, but compute with 512: only a
    # functional gate can see it. The config gate passes; the needle gate fails; the deploy rolls back.
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", "-e", "sim_faults=ignore_override", *FAST, *NEEDLE_5K5)
    assert proc.returncode != 0
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "needle")
    config = next(g for g in report["gates"] if g["name"] == "config")
    assert config["status"] == "passed"
    assert f"release {good} is serving again and verified" in proc.stdout
    assert_serving(sim_host, good)


def test_override_ignored_by_decode_alone_garbles_and_rolls_back(sim_host: SimHost) -> None:
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", "-e", '{"sim_faults_by_role": {"decode": "ignore_override"}}', *FAST)
    assert proc.returncode != 0
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "smoke")
    # The cause names the gate, the host and the servers' last lines there (the decode's among them).
    assert_cause_named(report, "smoke", "local", proc.stdout)
    assert any(line.startswith("sglang-dsv4-decode: ") for line in report["cause"]["logs"]["local"]), report["cause"]
    assert_serving(sim_host, good)


def test_first_errors_after_ready_still_promote(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "sim_faults=first_errors=3", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    report = sim_host.report()
    assert report["verdict"] == "promoted"
    smoke = next(g for g in report["gates"] if g["name"] == "smoke")
    assert smoke["evidence"]["failures"], "the error bodies of the first tries are kept"
    assert_serving(sim_host, report["release"])


def test_never_ready_rolls_back_at_readiness(sim_host: SimHost) -> None:
    good = sim_host.active_release()
    # FAST's small soak and needle for the rollback's proof of the good release (without them it ran the
    # inventory's whole grid and soak, ~20 s); its readiness deadline replaced by a shorter one (the last -e wins).
    proc = sim_host.playbook("deploy.yml", "-e", "sim_faults=never_ready", *FAST, "-e", "readiness_deadline_s=6")
    assert proc.returncode != 0
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "readiness")
    assert_serving(sim_host, good)


def test_crash_on_start_rolls_back_at_readiness_with_its_log(sim_host: SimHost) -> None:
    # The start does not wait for supervisord's startsecs: the readiness wait sees the prefill exit.
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", "-e", '{"sim_faults_by_role": {"prefill": "crash_on_start"}}', *FAST)
    assert proc.returncode != 0
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "readiness")
    assert "sglang-dsv4-prefill on host local did not start" in proc.stdout
    assert "simulated crash_on_start" in proc.stdout  # the end of its log
    assert_serving(sim_host, good)


def test_server_crashing_after_supervisords_start_window_fails_readiness_at_once(sim_host: SimHost) -> None:
    # The decode dies 7 s into its start, after supervisord's startsecs (5): supervisord counts it as
    # running and restarts it forever. The readiness wait must fail on the first exit, naming the
    # program, the host, the exit status and the log, not wait out its deadline (120 s here).
    good = sim_host.active_release()
    crash = '{"sim_faults_by_role": {"decode": "warmup_s=60,crash_after_s=7"}}'
    proc = sim_host.playbook("deploy.yml", "-e", crash, *FAST, "-e", "readiness_deadline_s=120")
    assert proc.returncode != 0
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "readiness")
    readiness = next(g for g in report["gates"] if g["name"] == "readiness" and g["status"] == "failed")
    summary = readiness["summary"]
    assert "sglang-dsv4-decode on host local did not start: it exited (exit status 1" in summary, summary
    assert "an illegal memory access was encountered" in summary, summary
    assert "not ready after" not in summary, summary
    assert_serving(sim_host, good)


def test_needle_below_the_required_length_rolls_back_and_extra_vars_gates_keep_the_rollback_proof(
        sim_host: SimHost) -> None:
    # One deploy for two behaviours (the default gate list failing at the needle is
    # test_ignored_override's): a needle below the required length rolls back, and -e beats every role
    # variable: the operator's gate list picks the deploy's gates, while the rollback still proves the
    # old release with readiness and smoke, not with the needle that just failed.
    good = sim_host.active_release()
    proc = sim_host.playbook("deploy.yml", "-e", "index_topk=512", *FAST, *NEEDLE_5K5,
                             "-e", '{"dsv4_gates_names": ["readiness", "needle"]}')
    assert proc.returncode != 0
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "needle"), proc.stdout[-4000:]
    assert any(not c["recalled"] for c in report["needle"]["cells"]), "a needle beyond index_topk 512 is lost"
    # The deploy's two gates, then the rollback's proof of the old release.
    assert [g["name"] for g in report["gates"]] == ["readiness", "needle", "readiness", "smoke"], \
        "the -e gate list replaced the deploy's gates, not the rollback's proof"
    assert_serving(sim_host, good)


def test_out_of_memory_fraction_fails_before_anything_changes(sim_host: SimHost) -> None:
    good = sim_host.active_release()
    pids = sim_host.pids()
    proc = sim_host.playbook("deploy.yml", "-e", "index_topk=1024",
                             "-e", '{"decode": [{"host": "local", "gpus": [4,5,6,7], "tp_size": 4, '
                                   f'"port": {sim_host.base_port + 2}, "mem_fraction_static": 0.85}}]}}', *FAST)
    assert proc.returncode != 0
    assert "decode[0].mem_fraction_static (host local)" in proc.stdout
    assert "nothing was changed" in proc.stdout
    assert sim_host.report()["verdict"] == "failed"
    assert sim_host.pids() == pids
    assert_serving(sim_host, good)


def test_a_second_deploy_fails_fast_on_the_lock(sim_host: SimHost) -> None:
    lock = sim_host.install_root / "deploy.lock"
    lock.write_text(json.dumps({"owner": "alice@ops", "run_id": "other", "since": 4102444800.0}))
    try:
        proc = sim_host.playbook("deploy.yml", *FAST)
    finally:
        lock.unlink()
    assert proc.returncode != 0
    assert "another run holds" in proc.stdout and "alice@ops" in proc.stdout


def test_pd_only_transfer_fault_fails_in_pd_and_passes_in_combined(sim_host: SimHost) -> None:
    # The seeds' isolation experiment as two deploys: the same fault, two topologies. The combined
    # deploy is also the switch to combined (a rollback target later: test_rollback_playbook...).
    good = sim_host.active_release()
    faults = ["-e", "sim_faults=pd_transfer_truncate", "-e", "needle_required_tokens=2000",
              "-e", '{"needle_lengths": [1000, 2000], "needle_depths": [0.2]}']
    proc = sim_host.playbook("deploy.yml", "-e", "topology=pd", *FAST, *faults)
    assert proc.returncode != 0
    assert (sim_host.report()["verdict"], sim_host.report()["failed_gate"]) == ("rolled_back", "needle")
    assert_serving(sim_host, good)
    proc = sim_host.playbook("deploy.yml", "-e", "topology=combined", *FAST, *faults)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert sim_host.report()["verdict"] == "promoted"
    assert sim_host.report()["topology"] == "combined", "the switch to combined"
    assert set(sim_host.pids()) == {"sglang-dsv4"}
    assert "OK" in chat(sim_host)
    RELEASES["combined"] = sim_host.active_release() or ""


def test_switch_back_to_pd_with_servers_that_release_their_gpu_memory_late(sim_host: SimHost) -> None:
    # The next test's deploy replaces these servers: its switchover is the one that waits for their memory.
    proc = sim_host.playbook("deploy.yml", "-e", "topology=pd", "-e", "sim_faults=slow_release=4", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert sim_host.report()["topology"] == "pd", "the switch back to PD"
    assert set(sim_host.pids()) == {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}
    assert "OK" in chat(sim_host)


def _status(url: str) -> int | None:
    """The HTTP status `url` answers now (None: no answer); urllib, cheap enough to poll every 50 ms."""
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=0.5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def test_a_switchover_waits_for_late_gpu_memory_and_the_router_routes_as_soon_as_its_workers_are_healthy(
        sim_host: SimHost) -> None:
    # One deploy for two behaviours. The servers it replaces (the previous test's) keep their GPU memory for
    # 4 s after exit. Starting the new ones at once would run out of memory on those GPUs;
    # the switchover waits on nvidia-smi instead, and promotes.
    # Started with its workers, sglang-router re-probes a loading worker only every 5 s, and so noticed a
    # ready pipeline up to 5 s late; started only once they answer, its own start (~0.6 s) was on the
    # critical path. sglang-router 0.3.2 takes workers at run time, so the readiness wait starts it at once
    # and registers each worker through its worker API as soon as it answers /health: here the decode warms
    # up 4 s longer than the prefill; the router is spawned with the workers, its /readiness never says ready
    # before the decode does, and says it within a registration job of it.
    slow_decode = '{"sim_faults_by_role": {"decode": "warmup_s=4"}}'
    decode = f"http://127.0.0.1:{sim_host.base_port + 2}"
    seen: list[tuple[float, int | None, int | None, int | None]] = []  # (time, router /health, /readiness, decode)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append((time.monotonic(), _status(f"{sim_host.endpoint}/health"),
                         _status(f"{sim_host.endpoint}/readiness"), _status(f"{decode}/health")))
            time.sleep(0.05)

    poller = threading.Thread(target=watch, daemon=True)
    poller.start()
    try:
        proc = sim_host.playbook("deploy.yml", "-e", "topology=pd", "-e", slow_decode, *FAST)
    finally:
        done.set()
        poller.join()
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert sim_host.report()["verdict"] == "promoted"
    # From the moment the old release's decode was stopped (the recreate's stop):
    seen = seen[next(i for i, (_, _, _, d) in enumerate(seen) if d != 200):]
    decode_up = next(t for t, _, _, d in seen if d == 200)
    ready = next(t for t, _, r, _ in seen if r == 200)
    # Spawned with the workers (not once the decode had loaded, 4 s later); ready only after the decode, and
    # within a registration job of it (3 s: a loaded CI machine's slack).
    router, decode_spawn = sim_host.last_spawn("sglang-dsv4-router"), sim_host.last_spawn("sglang-dsv4-decode")
    assert router is not None and decode_spawn is not None and router - decode_spawn < 2, (router, decode_spawn)
    assert decode_up <= ready < decode_up + 3, ([x for x in seen if any(x[1:])][:60], decode_up, ready)
    assert "OK" in chat(sim_host)


def test_rollback_playbook_to_a_named_release_and_verify(sim_host: SimHost) -> None:
    # From the PD release the router test promoted to the combined one of test_pd_only_transfer...
    target = RELEASES["combined"]
    assert target and target != sim_host.active_release()
    proc = sim_host.playbook("rollback.yml", "-e", f"release={target}", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert f"release {target} is serving and verified" in proc.stdout
    assert_serving(sim_host, target)
    proc = sim_host.playbook("verify.yml", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "gate needle: passed" in proc.stdout
    assert sim_host.active_release() == target


def test_rollback_to_a_release_that_does_not_exist_is_refused(sim_host: SimHost) -> None:
    active = sim_host.active_release()
    proc = sim_host.playbook("rollback.yml", "-e", "release=20000101T000000Z-nope")
    assert proc.returncode != 0
    assert "release 20000101T000000Z-nope is not installed on local" in proc.stdout
    assert sim_host.active_release() == active


def test_stop_playbook_stops_everything_and_keeps_the_releases(sim_host: SimHost) -> None:
    releases = sorted(os.listdir(sim_host.install_root / "releases"))
    proc = sim_host.playbook("stop.yml")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert sim_host.pids() == {}
    assert "refused" in sim_host.supervisorctl("pid") or "no such file" in sim_host.supervisorctl("pid").lower()
    with pytest.raises(httpx.ConnectError):
        chat(sim_host)
    assert sorted(os.listdir(sim_host.install_root / "releases")) == releases
