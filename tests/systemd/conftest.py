"""Fixtures of the systemd tier: throwaway hosts with real systemd, reached over ssh.

    python -m pytest tests/systemd          # as root; skips with the reason otherwise

`hostkit` (session) checks the machine (root, systemd-nspawn, debootstrap; installs the last two
with apt-get when root), builds or finds the cached rootfs and hands out labs:

    @pytest.fixture(scope="module")
    def lab(hostkit):
        with hostkit.lab(["gpu1"], routers=["gpu1"]) as booted:   # booted hosts, torn down after
            yield booted

    def test_x(lab, tmp_path):
        inv = lab.write_inventory(tmp_path / "inv", example="pd-single-host",
                                  host_vars={"gpu1": {"listen": "0.0.0.0"}})
        proc = lab.playbook("deploy.yml", inv, reports=tmp_path / "reports")
        lab.hosts["gpu1"].exec(["systemctl", "is-active", "sglang-dsv4-router"])

See tests/systemd/README.md.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

import pytest

from tests.systemd import hostkit as kit
from tests.systemd import rootfs as rootfs_mod


class HostKit:
    """Hands out labs on the session's rootfs; closes any left open at the end of the session."""

    def __init__(self, rootfs: rootfs_mod.Rootfs):
        self.rootfs = rootfs
        self.open: list[kit.Lab] = []

    @contextmanager
    def lab(self, names: Sequence[str], routers: Sequence[str] = ()) -> Iterator[kit.Lab]:
        """Boot hosts `names` (sglang-router's environment on `routers`); torn down on exit."""
        booted = kit.Lab(names=list(names), routers=list(routers), rootfs=self.rootfs)
        self.open.append(booted)
        try:
            booted.start()
            yield booted
        finally:
            booted.close()
            self.open.remove(booted)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # A CI timeout sends SIGTERM: turn it into KeyboardInterrupt so fixtures tear the hosts down.
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def hostkit() -> Iterator[HostKit]:
    """The kit, or a skip saying what this machine lacks."""
    reason = kit.missing_prerequisites()
    if reason:
        pytest.skip(reason)
    if not (kit.VENV_BIN / "ansible-playbook").exists():
        pytest.skip(f"{kit.VENV_BIN / 'ansible-playbook'} is missing: run ./scripts/setup.sh")
    kit.sweep()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    session = HostKit(rootfs_mod.ensure_rootfs())
    try:
        yield session
    finally:
        for booted in list(session.open):
            booted.close()
        signal.signal(signal.SIGTERM, previous)
