"""The API key, given by file or by (vault) variable, never shows: not in playbook output up to -vvv, not in
a report, and every file on the host that holds it is closed to other users.

sglang itself takes the key only as --api-key and prints it in its start line: the serve script reads it
from a root-owned 0440 file (its group reads it) at start, supervisord's logs are 0640 in 0750 folders, and
the playbook output, the failure tails and the logs the config gate reads are redacted (README, "Secrets").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from tests.integration.simhost import SMALL_NEEDLE_RULE, SMALL_SOAK, SimHost

pytestmark = pytest.mark.integration
# Small gates: the secrets are in the start lines, the failure tails and the gates' requests, not the grid.
FAST = ["-e", "needle_required_tokens=2000", "-e", '{"needle_lengths": [1000, 2000], "needle_depths": [0.2]}',
        "-e", "readiness_deadline_s=60", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK,
        *SMALL_NEEDLE_RULE]


def leaks(sim_host: SimHost, key: str, output: str) -> list[str]:
    """Where `key` shows where it must not: the output, reports, and host files others can read."""
    found = []
    if key in output:
        line = next(ln for ln in output.splitlines() if key in ln)
        found.append(f"playbook output: {line[:200]}")
    for base in (sim_host.reports, sim_host.install_root):
        for folder, _dirs, names in os.walk(base):
            for name in names:
                path = Path(folder) / name
                if path.is_symlink() or not path.is_file():
                    continue
                if key.encode() not in path.read_bytes():
                    continue
                if base == sim_host.reports:
                    found.append(f"report file {path}")
                elif path.stat().st_mode & stat.S_IRWXO or not closed_to_others(path, sim_host.install_root):
                    found.append(f"{path} (mode {oct(path.stat().st_mode & 0o777)}) is open to other users")
    return found


def closed_to_others(path: Path, root: Path) -> bool:
    """True when a folder between `root` and `path` keeps other users out (no o+x), or the file has no o+r."""
    if not path.stat().st_mode & stat.S_IROTH:
        return True
    return any(not p.stat().st_mode & stat.S_IXOTH for p in path.parents if root in (p, *p.parents))


def test_key_file_never_shows_at_vvv_even_on_a_failed_start(sim_host: SimHost) -> None:
    key = sim_host.api_key
    ok = sim_host.playbook("deploy.yml", "-vvv", *FAST)
    assert ok.returncode == 0, ok.stdout[-4000:]
    assert leaks(sim_host, key, ok.stdout + ok.stderr) == []
    # A server that dies at start: its log tail (with sglang's start line) goes into the failure message.
    bad = sim_host.playbook("deploy.yml", "-vvv", "-e", '{"sim_faults_by_role": {"decode": "crash_on_start"}}',
                            "-e", "index_topk=512", *FAST)
    assert bad.returncode != 0
    assert "ROLLED BACK" in bad.stdout
    assert leaks(sim_host, key, bad.stdout + bad.stderr) == []
    # The logs that do hold the start line are closed to other users.
    logs = sim_host.install_root / "logs"
    assert stat.S_IMODE(logs.stat().st_mode) == 0o750
    assert all(not p.stat().st_mode & stat.S_IRWXO for p in logs.iterdir())


def environ(pid: int) -> dict[str, str]:
    """The environment a running process really got."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_vault_key_and_secret_env_land_root_s_0440_the_servers_use_them_and_they_never_show(sim_host: SimHost) -> None:
    # One -vvv --diff deploy for two inputs (each deploy at -vvv is a minute on a loaded machine): the API
    # key from a vault variable, and an HF_TOKEN and a switch added for an
    # experiment.
    key = "sk-vault-" + os.urandom(8).hex()
    token = "hf_" + os.urandom(12).hex()
    extra = {"server_env_extra": {"HF_TOKEN": token},
             "server_env_extra_by_role": {"decode": {"SGLANG_DSV4_BF16_INDEX_K": "1"}},
             "api_key": {"vault_var": "dsv4_test_vault_key"}}
    # An older install's secrets/: the service user's (here nobody, as it was), holding a link it planted to a
    # root-only canary where root writes a secret env file. The deploy takes the folder back, never follows it.
    secrets = sim_host.install_root / "secrets"
    secrets.mkdir(mode=0o700, exist_ok=True)
    canary = sim_host.root / "canary"
    canary.write_text("root only\n")
    canary.chmod(0o400)
    (secrets / "sglang-dsv4-decode.env").symlink_to(canary)
    nobody = pwd.getpwnam("nobody")
    for path in (secrets, *secrets.iterdir()):
        os.lchown(path, nobody.pw_uid, nobody.pw_gid)
    canary_before = (canary.stat().st_uid, canary.stat().st_mode, canary.read_text())
    proc = sim_host.playbook("deploy.yml", "-vvv", "--diff", "-e", json.dumps(extra),
                             "-e", f"dsv4_test_vault_key={key}", *FAST)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert (canary.stat().st_uid, canary.stat().st_mode, canary.read_text()) == canary_before
    assert leaks(sim_host, key, proc.stdout + proc.stderr) == [], "the vault key shows"
    assert leaks(sim_host, token, proc.stdout + proc.stderr) == [], "the secret env shows"
    # The vault key lands root's, read-only, for the service user's group, in root's folder.
    secret = sim_host.install_root / "secrets" / "api_key"
    assert secret.read_text() == key
    assert (secret.stat().st_uid, stat.S_IMODE(secret.stat().st_mode)) == (0, 0o440)
    assert (secret.parent.stat().st_uid, stat.S_IMODE(secret.parent.stat().st_mode)) == (0, 0o750)
    # The servers really use it: the gates passed with it, and a worker asked without it refuses.
    import httpx

    worker = f"http://127.0.0.1:{sim_host.base_port + 1}/server_info"
    assert httpx.get(worker, timeout=10).status_code == 401
    assert httpx.get(worker, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
    # The secret env: in no release file, in a 0600 file per server.
    releases = sim_host.install_root / "releases"
    assert not [p for p in releases.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    for role in ("prefill", "decode"):
        path = secrets / f"sglang-dsv4-{role}.env"
        assert path.read_text() == f'HF_TOKEN="{token}"\n' and not path.is_symlink()
        assert (path.stat().st_uid, stat.S_IMODE(path.stat().st_mode)) == (0, 0o440)
    assert not (secrets / "sglang-dsv4-router.env").exists()  # server_env_extra is for the servers
    # The servers got the secret and the switches: the inventory's and the experiment's.
    pids = sim_host.pids()
    decode, prefill = environ(pids["sglang-dsv4-decode"]), environ(pids["sglang-dsv4-prefill"])
    assert decode["HF_TOKEN"] == prefill["HF_TOKEN"] == token
    assert decode["SGLANG_DSV4_BF16_INDEX_K"] == "1" and "SGLANG_DSV4_BF16_INDEX_K" not in prefill
    assert "DSV4_SIM_STATE_DIR" in decode  # the inventory's server_env is kept
    report = (sim_host.reports / "latest" / "report.md").read_text()
    assert "| env switches added (all servers) | HF_TOKEN=<secret> |" in report
    assert "| env switches added (decode) | SGLANG_DSV4_BF16_INDEX_K=1 |" in report
    # The 0644 spec.json shows the token by a digest keyed with the host's salt (root's, 0400,
    # in the 0700 folder), not by an unsalted sha256 a reader could match guesses against.
    salt_file = secrets / "digest_salt"
    assert stat.S_IMODE(salt_file.stat().st_mode) == 0o400
    salt = salt_file.read_text().strip()
    # Root's record of what it wrote there, which a purge removes (the folder itself was the older install's,
    # holding the planted link: not proven ours, so a purge leaves it and whatever else is in it).
    marker = json.loads((sim_host.install_root / ".dsv4deploy-owner.json").read_text())
    assert marker["secret_files"] == ["api_key", "digest_salt", "sglang-dsv4-decode.env", "sglang-dsv4-prefill.env"]
    shown = json.loads((sim_host.install_root / "current" / "spec.json").read_text())["deployment"]
    keyed = hmac.new(bytes.fromhex(salt), token.encode(), hashlib.sha256).hexdigest()[:12]
    assert shown["server_env_extra"]["HF_TOKEN"] == f"<secret hmac:{keyed}>"
    unsalted = hashlib.sha256(token.encode()).hexdigest()[:12]
    assert not [p for p in releases.rglob("*") if p.is_file() and unsalted.encode() in p.read_bytes()]
    # The salt is read back on the next run: the same secret is the same release (check mode writes nothing).
    again = sim_host.playbook("deploy.yml", "--check", "-e", json.dumps(extra), "-e", f"dsv4_test_vault_key={key}",
                              *FAST)
    assert again.returncode == 0, again.stdout[-4000:]
    assert "a real run would change nothing" in " ".join(again.stdout.split()), again.stdout[-4000:]
    assert salt_file.read_text().strip() == salt
    # A new vaulted key is a new release, said on the plan line (check mode: what a real run would do).
    rotated = sim_host.playbook("deploy.yml", "--check", "-e", json.dumps(extra),
                                "-e", f"dsv4_test_vault_key={key}-rotated", *FAST)
    said = " ".join(rotated.stdout.split())
    assert rotated.returncode == 0 and "a real run would install release" in said, said[-4000:]
    assert "api key changed on local: a new release restarts what reads it" in said, said[-4000:]
    assert key not in rotated.stdout
    # A purge takes from secrets/ what the record says dsv4deploy wrote there; a person's own file stays.
    (secrets / "app.env").write_text("MINE=1\n")
    purged = sim_host.playbook("stop.yml", "-e", "dsv4_stop_purge=true")
    assert purged.returncode == 0, purged.stdout[-4000:]
    assert sorted(p.name for p in secrets.iterdir()) == ["app.env"]
    assert (secrets / "app.env").read_text() == "MINE=1\n"
    assert "secrets/app.env (not a secret file dsv4deploy wrote)" in purged.stderr
