"""The API key, given by file or by (vault) variable, never shows: not in playbook output up to -vvv, not in
a report, and every file on the host that holds it is closed to other users.

sglang itself takes the key only as --api-key and prints it in its start line: the serve script reads it
from a 0600 file at start, supervisord's logs are 0640 in 0750 folders, and the playbook output, the
failure tails and the logs the config gate reads are redacted (README, "Secrets").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.integration.simhost import SimHost

pytestmark = pytest.mark.integration
# Small gates: the secrets are in the start lines, the failure tails and the gates' requests, not the grid.
FAST = ["-e", "needle_required_tokens=2000", "-e", '{"needle_lengths": [1000, 2000], "needle_depths": [0.2]}',
        "-e", "readiness_deadline_s=60", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120"]


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


def test_key_from_a_vault_variable_never_shows_and_lands_0600(sim_host: SimHost) -> None:
    key = "sk-vault-" + os.urandom(8).hex()
    proc = sim_host.playbook("deploy.yml", "-vvv", "-e", '{"api_key": {"vault_var": "dsv4_test_vault_key"}}',
                             "-e", f"dsv4_test_vault_key={key}", *FAST)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert leaks(sim_host, key, proc.stdout + proc.stderr) == []
    secret = sim_host.install_root / "secrets" / "api_key"
    assert secret.read_text() == key
    assert stat.S_IMODE(secret.stat().st_mode) == 0o400  # the service user's, read-only
    assert stat.S_IMODE(secret.parent.stat().st_mode) == 0o700
    # The servers really use it: the gates passed with it, and a worker asked without it refuses.
    import httpx

    worker = f"http://127.0.0.1:{sim_host.base_port + 1}/server_info"
    assert httpx.get(worker, timeout=10).status_code == 401
    assert httpx.get(worker, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
