"""Stop, rollback, verify and isolate act on what is installed, not on the inventory's next spec.

One simulated host for the module, tests in order. A promoted PD release (A), a deploy that fails its
needle gate and is rolled back (B), a promoted combined release (C). Then the inventory is edited, to
an invalid value and to other ports: stop, rollback and verify still work, and a rollback gates the
restored release's own endpoints. Check mode of rollback and isolate changes nothing and says so; a
rollback to a failed release is refused unless asked for; an experiment never prunes a release.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.simhost import READINESS, SMALL_NEEDLE_RULE, SMALL_SOAK, SimHost, assign_ports
from tests.integration.test_check_mode import one_line, snapshot
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

FAST = ["-e", "readiness_deadline_s=30", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK,
        *SMALL_NEEDLE_RULE]
WEAK_NEEDLE = ["-e", "needle_required_tokens=120", "-e", '{"needle_lengths": [100, 120], "needle_depths": [0.5]}']
# Beyond what index_topk 512 can ever recall, within 1024's certain range: index_topk=512 fails it.
NEEDLE_5K = ["-e", "needle_required_tokens=5500", "-e", '{"needle_lengths": [5000, 5500], "needle_depths": [0.5]}']
RELEASES: dict[str, str] = {}


def chat(url: str, key: str) -> str:
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "Say OK"}], "max_tokens": 8}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30, headers={"Authorization": f"Bearer {key}"})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def state(host: SimHost) -> dict:
    return json.loads((host.install_root / "state.json").read_text())


def releases(host: SimHost) -> list[str]:
    return sorted(os.listdir(host.install_root / "releases"))


def deploy(host: SimHost, *extra: str) -> str:
    proc = host.playbook("deploy.yml", *FAST, *extra)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert host.report()["verdict"] in ("promoted", "unchanged")
    return host.active_release() or ""


def test_a_promoted_pd_release_a_failed_one_and_a_combined_one(sim_host: SimHost) -> None:
    RELEASES["a"] = deploy(sim_host, "-e", "topology=pd", *WEAK_NEEDLE)
    failed = sim_host.playbook("deploy.yml", "-e", "topology=pd", "-e", "index_topk=512", *NEEDLE_5K, *FAST)
    assert failed.returncode != 0
    assert (sim_host.report()["verdict"], sim_host.report()["failed_gate"]) == ("rolled_back", "needle")
    RELEASES["b"] = sim_host.report()["release"]
    assert sim_host.active_release() == RELEASES["a"]
    # The release records its services at install time, beside its spec.
    record = json.loads((sim_host.install_root / "releases" / RELEASES["a"] / "services.json").read_text())
    assert [(s["name"], s["role"], s["drain_rank"]) for s in record["services"]] == [
        ("sglang-dsv4-router", "router", 0), ("sglang-dsv4-decode", "decode", 1),
        ("sglang-dsv4-prefill", "prefill", 2)]
    assert record["services"][0]["endpoint"] == sim_host.endpoint
    assert state(sim_host)["failed"] == {RELEASES["b"]: "needle"}


def test_isolate_in_check_mode_runs_no_suite_and_changes_nothing(sim_host: SimHost) -> None:
    before = snapshot(sim_host)
    proc = sim_host.playbook("isolate.yml", "--check", "-e", "suite=smoke", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert snapshot(sim_host) == before, "files, reports and the running servers are untouched"
    assert not (sim_host.reports / "isolate").exists(), "check mode writes no experiment report"
    (line,) = one_line(proc.stdout, "CHECK MODE")
    assert f"a real run would run smoke on release {RELEASES['a']}" in line and "no report was written" in line
    ran = re.search(r"TASK \[dsv4_gates : (Gate|Host side of the gates): [^\]]*\] \**\n(ok|changed|fatal)", proc.stdout)
    assert ran is None, f"a gate ran against production in check mode: {ran.group(0) if ran else ''}"


def test_rollback_to_a_release_that_failed_its_gates_is_refused_unless_asked(sim_host: SimHost) -> None:
    RELEASES["c"] = deploy(sim_host, "-e", "topology=combined", *WEAK_NEEDLE, *READINESS)
    before = snapshot(sim_host)
    proc = sim_host.playbook("rollback.yml", "-e", f"dsv4_rollback_release={RELEASES['b']}", *FAST)
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert f"release {RELEASES['b']} failed its gate needle on local" in out, out[-3000:]
    assert "-e dsv4_rollback_allow_failed=true" in out
    assert snapshot(sim_host) == before and sim_host.active_release() == RELEASES["c"]
    # Said explicitly, it is accepted (checked in check mode: nothing changes).
    asked = sim_host.playbook("rollback.yml", "--check", "-e", f"release={RELEASES['b']}",
                              "-e", "dsv4_rollback_allow_failed=true", *FAST)
    assert asked.returncode == 0, asked.stdout[-5000:]
    (line,) = one_line(asked.stdout, "CHECK MODE")
    assert f"to {RELEASES['b']}" in line and snapshot(sim_host) == before
    # The old name still works, and says which name replaces it.
    said = " ".join((asked.stdout + asked.stderr).split())
    assert "'release' is deprecated" in said and "use 'dsv4_rollback_release' instead" in said


def test_rollback_in_check_mode_claims_nothing_and_changes_nothing(sim_host: SimHost) -> None:
    before = snapshot(sim_host)
    report_before = sim_host.report()
    proc = sim_host.playbook("rollback.yml", "--check", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert snapshot(sim_host) == before
    assert sim_host.report() == report_before, "no rolled_back report for a rollback that never happened"
    (line,) = one_line(proc.stdout, "CHECK MODE")
    assert f"would switch local from release {RELEASES['c']} to {RELEASES['a']}" in line
    assert "ROLLED BACK" not in proc.stdout


def test_verify_and_stop_in_check_mode_change_nothing_and_say_so(sim_host: SimHost) -> None:
    before = snapshot(sim_host)
    report_before = sim_host.report()
    verify = sim_host.playbook("verify.yml", "--check", *FAST)
    assert verify.returncode == 0, verify.stdout[-5000:]
    (line,) = one_line(verify.stdout, "CHECK MODE")
    assert f"no gate was run: a real run would gate release {RELEASES['c']}" in line
    assert "gate smoke: passed" not in verify.stdout
    stop = sim_host.playbook("stop.yml", "--check")
    assert stop.returncode == 0, stop.stdout[-5000:]
    (line,) = one_line(stop.stdout, "CHECK MODE")
    assert "a real run would stop sglang-dsv4 (router first)" in line
    assert snapshot(sim_host) == before and sim_host.report() == report_before


def test_an_invalid_inventory_blocks_neither_verify_nor_rollback_nor_stop(sim_host: SimHost) -> None:
    broken = sim_host.inventory / "group_vars" / "all" / "zz_broken.yml"
    broken.write_text(yaml.safe_dump({"topology": "bogus", "index_topk": 2048}))
    try:
        refused = sim_host.playbook("deploy.yml", *FAST)
        assert refused.returncode != 0 and "topology" in refused.stdout
        proc = sim_host.playbook("verify.yml", "-e", '{"dsv4_gates_names": ["readiness", "smoke"]}', *FAST)
        assert proc.returncode == 0, proc.stdout[-5000:]
        assert "gate smoke: passed" in proc.stdout
        proc = sim_host.playbook("rollback.yml", *FAST)
        assert proc.returncode == 0, proc.stdout[-5000:]
        assert f"release {RELEASES['a']} is serving and verified" in proc.stdout
        assert sim_host.active_release() == RELEASES["a"] and "OK" in chat(sim_host.endpoint, sim_host.api_key)
        proc = sim_host.playbook("stop.yml")
        assert proc.returncode == 0, proc.stdout[-5000:]
        assert sim_host.pids() == {}
    finally:
        broken.unlink()


def test_a_rollback_gates_the_restored_release_at_its_own_endpoints(sim_host: SimHost) -> None:
    assert deploy(sim_host, "-e", "topology=pd", *WEAK_NEEDLE, *READINESS) == RELEASES["a"]
    other = free_port_block(5)
    assign_ports(sim_host.inventory, other)
    try:
        proc = sim_host.playbook("rollback.yml", *FAST)
        assert proc.returncode == 0, proc.stdout[-5000:]
        assert sim_host.active_release() == RELEASES["c"]
        report = sim_host.report()
        assert report["verdict"] == "rolled_back" and report["endpoint"] == sim_host.endpoint
        assert "OK" in chat(sim_host.endpoint, sim_host.api_key)
        with pytest.raises(httpx.ConnectError):
            chat(f"http://127.0.0.1:{other}", sim_host.api_key)
        proc = sim_host.playbook("verify.yml", "-e", '{"dsv4_gates_names": ["readiness", "smoke"]}', *FAST)
        assert proc.returncode == 0, proc.stdout[-5000:]
        proc = sim_host.playbook("stop.yml")
        assert proc.returncode == 0, proc.stdout[-5000:]
        assert sim_host.pids() == {}
    finally:
        assign_ports(sim_host.inventory, sim_host.base_port)


def test_an_experiment_prunes_no_release(sim_host: SimHost) -> None:
    # Three releases installed (A, B, C), A the oldest and serving, and three kept (dsv4_release_keep): the
    # experiment's temporary release makes four, and a pruning switch would delete the oldest one that is not
    # protected (B).
    keep = ["-e", "dsv4_release_keep=3"]
    serving = deploy(sim_host, "-e", "topology=pd", *WEAK_NEEDLE, *READINESS, *keep)
    assert serving == RELEASES["a"]
    installed = releases(sim_host)
    assert len(installed) == 3 and RELEASES["b"] in installed
    proc = sim_host.playbook("isolate.yml", "-e", "suite=smoke", *FAST, *keep)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert releases(sim_host) == installed, "the experiment deleted no release"
    assert sim_host.active_release() == RELEASES["a"]
    assert not Path(sim_host.install_root / "deploy.lock").exists()
