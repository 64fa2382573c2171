"""Day two on the embedded host, over one deployment: rotate the API key (a new release, gated, the new key
served and the old one refused), restart what serves when nothing changed (new processes, gates, same
release), and read what serves where (`dsv4deploy status`).

The tests run in order on one module host: each starts from what the one before left.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.integration.simhost import READINESS, REPO, SMALL_NEEDLE_RULE, SMALL_SOAK, VENV_BIN, SimHost

pytestmark = pytest.mark.integration
# Small gates: the subject is which release serves and with which key, not the grid.
FAST = ["-e", "needle_required_tokens=2000", "-e", '{"needle_lengths": [1000, 2000], "needle_depths": [0.2]}',
        "-e", "readiness_deadline_s=60", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK,
        *SMALL_NEEDLE_RULE]


def answer(sim_host: SimHost, key: str) -> int:
    """The HTTP status a client presenting `key` gets from the router (a chat completion) and from each worker."""
    auth = {"Authorization": f"Bearer {key}"}
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    codes = {"router": httpx.post(f"{sim_host.endpoint}/v1/chat/completions", json=body, headers=auth,
                                  timeout=30).status_code}
    for port in (sim_host.base_port + 1, sim_host.base_port + 2):
        url = f"http://127.0.0.1:{port}/server_info"
        codes[f"worker {port}"] = httpx.get(url, headers=auth, timeout=10).status_code
    assert len(set(codes.values())) == 1, f"the router and the workers disagree on the key: {codes}"
    return codes["router"]


@pytest.fixture(scope="module")
def deployed(sim_host: SimHost) -> SimHost:
    """The embedded host with a release promoted under its key file."""
    sim_host.playbook("deploy.yml", *FAST, check=True)
    return sim_host


def test_a_rotated_key_file_makes_a_new_gated_release_that_serves_the_new_key(deployed: SimHost) -> None:
    sim_host = deployed
    before, old = sim_host.active_release(), sim_host.api_key
    assert answer(sim_host, old) == 200
    new = "sk-rotated-" + os.urandom(8).hex()
    (sim_host.root / "api_key").write_text(new + "\n")
    proc = sim_host.playbook("deploy.yml", *FAST)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "api key changed on local: a new release restarts what reads it" in out, out[-3000:]
    assert "PROMOTED" in out and "UNCHANGED" not in out, out[-3000:]
    assert sim_host.active_release() != before
    assert sim_host.report()["verdict"] == "promoted"
    assert answer(sim_host, new) == 200
    assert answer(sim_host, old) == 401
    # The key never shows, and the same key again is the same release.
    assert new not in proc.stdout
    again = sim_host.playbook("deploy.yml", "--check", *FAST)
    assert "a real run would change nothing" in " ".join(again.stdout.split()), again.stdout[-3000:]


def test_restart_starts_every_program_anew_gated_and_keeps_the_release(deployed: SimHost) -> None:
    sim_host = deployed
    release, pids = sim_host.active_release(), sim_host.pids()
    preview = sim_host.playbook("restart.yml", "--check")
    said = " ".join(preview.stdout.split())
    assert preview.returncode == 0, preview.stdout[-3000:]
    assert f"a real run would restart release {release} on local" in said, said[-3000:]
    assert sim_host.pids() == pids  # check mode restarted nothing
    # A spec that differs from the active release is refused, with the command that applies it.
    changed = sim_host.playbook("restart.yml", "--check", "-e", "index_topk=512")
    said = " ".join(changed.stdout.split())
    assert changed.returncode != 0, said[-3000:]
    assert (f"local: the inventory differs from the active release {release}; a restart applies no change; "
            "fix: ansible-playbook playbooks/deploy.yml") in said, said[-3000:]
    proc = sim_host.playbook("restart.yml", *READINESS)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert f"RESTARTED: release {release} serves on local" in out, out[-3000:]
    after = sim_host.pids()
    assert set(after) == set(pids) and not set(after.values()) & set(pids.values()), (pids, after)
    assert sim_host.active_release() == release
    assert answer(sim_host, sim_host.api_key) == 200


def test_status_says_what_serves_where(deployed: SimHost) -> None:
    sim_host = deployed
    proc = subprocess.run([str(VENV_BIN / "dsv4deploy"), "status", "-i", str(sim_host.inventory), "--json"],
                          capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    local = json.loads(proc.stdout)["local"]
    assert local["active"] == sim_host.active_release()
    assert local["release_status"] == "verified"
    # Seconds after the restart above, a program may still be within supervisord's startsecs: starting, never stopped.
    states = {s["name"]: s["state"] for s in local["services"]}
    assert set(states) == {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}, states
    assert set(states.values()) <= {"running", "starting"}, states
    table = subprocess.run([str(VENV_BIN / "dsv4deploy"), "status", "-i", str(sim_host.inventory)],
                           capture_output=True, text=True, timeout=300, cwd="/")
    assert table.returncode == 0 and f"release {local['active']} (verified" in table.stdout, table.stdout


def test_a_playbook_whose_inventory_has_no_host_in_the_group_fails_naming_it(tmp_path: Path) -> None:
    # The wrong folder, no -i, a misspelt group: Ansible alone says "skipping: no hosts matched" and exits 0.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpus:\n      hosts:\n        gpu1:\n")
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "playbooks/deploy.yml", "-i", str(inventory)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    said = " ".join(proc.stdout.split())
    assert proc.returncode != 0, said
    assert f"no host matched the group dsv4 in the inventory {inventory}; nothing was changed" in said, said
