"""blue_green with a secret env value and an API key from a vault variable, through the playbook on the
embedded host (one host for the module, test_blue_green's setup: tp 2 per role, both slots' ports reserved).

The other slot's release reads its secret env files and the key's file under {root}/slot-b, written there by
the release's own install tasks with the same modes as at home, and removed when the slot stops. Clients see
no failed request, and neither the key nor the secret shows in the playbook's output at -vvv or the report.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from dsv4deploy.rollout.downtime import DowntimeClient
from tests.integration.simhost import SimHost
from tests.integration.test_blue_green import (  # noqa: F401  (bg_host is the module's host fixture)
    FAST,
    PORT_OFFSET,
    _listening,
    _slot,
    bg_host,
)
from tests.integration.test_secrets import environ, leaks

pytestmark = pytest.mark.integration

VAULT_VAR = "dsv4_test_vault_key"


def _secrets(key: str, token: str) -> list[str]:
    return ["-e", json.dumps({"api_key": {"vault_var": VAULT_VAR}, VAULT_VAR: key,
                              "server_env_extra": {"HF_TOKEN": token}})]


class _SlotWatch(threading.Thread):
    """What the other slot's secrets folder holds while the rollout runs: file name -> (mode, content)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder, self.seen, self.done = folder, {}, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            try:
                for path in self.folder.iterdir():
                    self.seen[path.name] = (stat.S_IMODE(path.stat().st_mode), path.read_text())
            except OSError:
                continue  # not there yet, or removed while read


def test_blue_green_promotes_with_a_secret_env_and_a_vault_key(bg_host: SimHost) -> None:  # noqa: F811
    key, old, new = ("sk-vault-" + os.urandom(8).hex(), "hf_" + os.urandom(12).hex(), "hf_" + os.urandom(12).hex())
    # Nothing serves yet: the first release starts as recreate starts it (readiness alone).
    bg_host.playbook("deploy.yml", *FAST, "-e", '{"dsv4_gates_names": ["readiness"]}', *_secrets(key, old), check=True)
    first = bg_host.active_release()
    watch = _SlotWatch(_slot(bg_host) / "secrets")
    watch.start()
    try:
        with DowntimeClient(bg_host.endpoint, "deepseek-v4-flash", api_key=key, concurrency=2) as client:
            proc = bg_host.playbook("deploy.yml", "-vvv", *FAST, *_secrets(key, new))
    finally:
        watch.done.set()
        watch.join(timeout=5)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "PROMOTED" in out and "Gates, through the preview router" in out
    print(f"blue_green with secrets under the continuous client: {client.figures.line()}")
    assert client.figures.sent > 10 and client.figures.failed == 0, client.figures.line()
    report = bg_host.report()
    assert report["verdict"] == "promoted" and report["downtime"]["failed"] == 0, report["downtime"]
    # The slot's release had the same secret files as home, with the same modes, while it served the gates...
    envs = {name: seen for name, seen in watch.seen.items() if name.endswith(".env")}
    assert sorted(n.rsplit("-", 1)[1] for n in envs) == ["decode.env", "prefill.env"], watch.seen.keys()
    assert set(envs.values()) == {(0o440, f'HF_TOKEN="{new}"\n')}, envs
    assert watch.seen.get("api_key") == (0o440, key), watch.seen.get("api_key", "no api_key in the slot")
    # ...and they went with it; home holds the new release's, which its servers read.
    assert not (_slot(bg_host) / "secrets").exists()
    assert not _listening(bg_host.base_port + PORT_OFFSET)
    second = bg_host.active_release()
    assert second and second != first
    home = bg_host.install_root / "secrets"
    assert (home / "api_key").read_text() == key
    assert {environ(pid)["HF_TOKEN"] for name, pid in bg_host.pids().items() if "router" not in name} == {new}
    # Neither the key nor a secret shows in the output at -vvv, the report, or a host file others can read.
    for secret in (key, old, new):
        assert leaks(bg_host, secret, out) == [], secret[:6]
