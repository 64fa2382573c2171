"""Hostile specs through the real deploy.yml against a host that serves: each ends in a validation error
naming the field, no traceback, nothing executed, and the install root unchanged byte for byte.

The full corpus and the fuzzing run against the validator directly (tests/unit/spec/test_hostile_spec.py); here a
sample of each kind goes the whole way through Ansible, as a user would run it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.integration.simhost import SMALL_NEEDLE_RULE, SimHost

pytestmark = pytest.mark.integration
CANARY = Path("/tmp/dsv4-hostile-deploy-canary")
GRID = ["-e", "needle_required_tokens=2000", "-e", '{"needle_lengths": [1000, 2000], "needle_depths": [0.2]}',
        "-e", "soak_enabled=false", *SMALL_NEEDLE_RULE]

CASES = [
    ("install_root (host local)", {"install_root": "/opt/x%(here)s"}),
    ("install_root (host local)", {"install_root": "/"}),
    ("install_root (host local)", {"install_root": "relative/root"}),
    ("service_user (host local)", {"service_user": "root\\"}),
    ("service_user (host local)", {"service_user": ""}),
    ("model.served_name", {"model": {"path": "/models/m", "served_name": f"$(touch {CANARY})"}}),
    ("chat_template", {"chat_template": f"/x\n[Service]\nExecStartPre=/bin/touch {CANARY}"}),
    ("listen (host local)", {"listen": "0.0.0.0", "api_key": None}),
    ("router.listen (host local)", {"api_key": None, "router": {"host": "local", "listen": "0.0.0.0"}}),
    ("api_key.file", {"api_key": {"file": f"key; touch {CANARY}"}}),
    ("router.extra_args", {"router": {"host": "local", "extra_args": ["--api-key=sk-inline"]}}),
    ("server_env", {"server_env": {f"X;touch {CANARY}": "1"}}),
    # What the refusal must say.
    ("index_top_k: is not a variable dsv4deploy reads (set in -e); fix: did you mean index_topk?",
     {"index_top_k": 1024}),
    ("sever_env: is not a variable dsv4deploy reads (set in -e); fix: did you mean server_env?", {"sever_env": {}}),
    ("fix: did you mean sglang_version?", {"sglang_versoin": "0.5.18"}),
    # before, this one passed validation and failed at preflight after writing the release
    ("api_key.vault_var: the variable 'dsv4_key_nobody_set' is not defined in the inventory or -e",
     {"api_key": {"vault_var": "dsv4_key_nobody_set"}}),
    ("server_env: -e server_env replaces the inventory's server_env",
     {"server_env": {"SGLANG_DSV4_BF16_INDEX_K": "1"}}),
    ("fix: set topology to pd or combined (lower case: pd)", {"topology": "PD"}),
    ("server_env_extra.HF_TOKEN: a secret value contains a control", {"server_env_extra": {"HF_TOKEN": "hf_a\nb"}}),
    ("server_env_extra_by_role.docode: Input should be", {"server_env_extra_by_role": {"docode": {"X": "1"}}}),
    ("server_env_extra: 'X;touch", {"server_env_extra": {f"X;touch {CANARY}": "1"}}),
    # Roots a purge would share with others.
    ("install_root (host local)", {"install_root": "/home/alice"}),
    ("install_root (host local)", {"install_root": "/var/lib/docker/dsv4"}),
    # Root's modules and a key the home's owner could swap (the modules run as root, the servers as nobody).
    ("api_key.file (host local): '/home/alice/api_key' lies inside the home folder /home/alice",
     {"api_key": {"file": "/home/alice/api_key"}, "service_user": "nobody"}),
    ("server_env_extra.HTTPS_PROXY: the value is a URL holding a user name and password",
     {"server_env_extra": {"HTTPS_PROXY": "http://u:pw@proxy:3128"}}),
]
# Continuous verification's settings, written into units, programs and paths root creates.
NOT_PLAIN = "a continuous-verification setting is not plain"
VERIFY_CASES = [
    (NOT_PLAIN, {"dsv4_verify_timer_textfile_dir": f"/tmp/x\n[program:injected]\ncommand=/bin/touch {CANARY}"}),
    (NOT_PLAIN, {"dsv4_verify_timer_textfile_dir": "/var/lib/../../etc"}),
    (NOT_PLAIN, {"dsv4_verify_timer_python": f"/usr/bin/python3 -c 'open(\"{CANARY}\", \"w\")'"}),
    # `$` matched before a final line break: a trailing newline passed as plain.
    (NOT_PLAIN, {"dsv4_verify_timer_textfile_dir": "/var/lib/node-exporter\n"}),
    # The role's argument spec refuses it first.
    ("dsv4_verify_timer_interval_s'' is of type str and we were unable to convert to int",
     {"dsv4_verify_timer_interval_s": "5\n[program:injected]"}),
]


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file and link under the install root but the servers' own logs and GPU state."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("logs", "sim-gpus")]
        for name in names:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if rel.startswith("supervisor/") and rel.endswith((".log", ".sock", ".pid")):
                continue
            out[rel] = ("link:" + os.readlink(path)) if path.is_symlink() else \
                hashlib.sha256(path.read_bytes()).hexdigest()
    link = root / "current"
    out["current"] = os.readlink(link) if link.is_symlink() else ""
    return out


@pytest.fixture(scope="module")
def serving(sim_host: SimHost) -> SimHost:
    proc = sim_host.playbook("deploy.yml", *GRID)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return sim_host


@pytest.mark.parametrize(("field", "extra"), CASES, ids=[f"{f[:30]}={json.dumps(e)[:40]}" for f, e in CASES])
def test_hostile_spec_through_the_playbook_changes_nothing(serving: SimHost, field: str, extra: dict) -> None:
    host = serving
    CANARY.unlink(missing_ok=True)
    before, pids = snapshot(host.install_root), host.pids()
    proc = host.playbook("deploy.yml", "-e", json.dumps(extra), *GRID)
    assert proc.returncode != 0
    assert "the deployment spec is invalid; nothing was changed" in proc.stdout
    assert field in proc.stdout, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not CANARY.exists(), "a hostile value was executed"
    assert snapshot(host.install_root) == before
    assert host.pids() == pids


@pytest.mark.parametrize(("said", "extra"), VERIFY_CASES, ids=[json.dumps(e)[:50] for _, e in VERIFY_CASES])
def test_hostile_verification_settings_are_refused_before_anything_is_written(serving: SimHost, said: str,
                                                                              extra: dict) -> None:
    host = serving
    CANARY.unlink(missing_ok=True)
    before = snapshot(host.install_root)
    proc = host.playbook("verify_timer.yml", "-e", "dsv4_verify_timer_host=local", "-e", json.dumps(extra))
    assert proc.returncode != 0
    assert said in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not CANARY.exists() and not (host.install_root / "verify-timer").exists()
    assert snapshot(host.install_root) == before


def test_a_misspelt_variable_in_group_vars_is_named_with_its_file(serving: SimHost) -> None:
    host = serving
    typo = host.inventory / "group_vars" / "all" / "experiment.yml"
    typo.write_text("index_top_k: 1024\n")
    try:
        before = snapshot(host.install_root)
        proc = host.playbook("deploy.yml", *GRID)
        assert proc.returncode != 0
        assert f"index_top_k: is not a variable dsv4deploy reads (set in {typo}); fix: did you mean index_topk?" \
            in proc.stdout, proc.stdout[-3000:]
        assert snapshot(host.install_root) == before
        # The inventory may keep a name of its own that only looks like ours.
        typo.write_text("index_top_k: 1024\ndsv4_allow_vars: [index_top_k]\n")
        proc = host.playbook("deploy.yml", *GRID)
        assert proc.returncode == 0, proc.stdout[-3000:]
    finally:
        typo.unlink()


def test_purge_takes_the_lock_and_removes_only_what_dsv4deploy_created(serving: SimHost) -> None:
    host = serving
    keep = host.install_root / "models" / "weights.bin"
    keep.parent.mkdir()
    keep.write_text("not ours")
    proc = host.playbook("stop.yml", "-e", "purge=true")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert host.pids() == {}
    assert keep.read_text() == "not ours"
    left = sorted(os.listdir(host.install_root))
    assert "releases" not in left and "current" not in left and "state.json" not in left and "models" in left
    assert "what dsv4deploy did not create" in proc.stdout + proc.stderr
