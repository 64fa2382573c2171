"""A start of some programs leaves the other running programs as they are, even when their file changed.

blue_green starts the new workers at home while the production router, whose own settings may change,
goes on serving through its worker API; it is replaced only later, on purpose (supervisord's own update
would have stopped it at the workers' start). Real supervisord, two `sleep` programs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import Supervisor

PROGRAM = "[program:{name}]\ncommand=/bin/sleep {seconds}\nautostart=false\nstopwaitsecs=2\n"


def _pid(sup: Supervisor, name: str) -> int:
    return int(sup.rpc().supervisor.getProcessInfo(name)["pid"])


def test_a_changed_running_program_named_in_keep_goes_on_until_a_plain_reload(tmp_path: Path) -> None:
    beside = Path(sys.executable).parent / "supervisord"  # the venv's, from the sim extra
    supervisord = str(beside) if beside.exists() else shutil.which("supervisord")
    if supervisord is None:
        pytest.skip("supervisord is not installed (the sim extra installs it)")
    programs = tmp_path / "current" / "supervisor"
    programs.mkdir(parents=True)
    for name in ("router", "worker"):
        (programs / f"{name}.conf").write_text(PROGRAM.format(name=name, seconds=300))
    sup = Supervisor(str(tmp_path), str(Path(supervisord).parent))
    try:
        sup.ensure()
        sup.reload()
        assert sup.start_all(["router", "worker"]) == {}
        router = _pid(sup, "router")
        # Both files change (a new release); the start of the worker keeps the running router as it is.
        for name in ("router", "worker"):
            (programs / f"{name}.conf").write_text(PROGRAM.format(name=name, seconds=301))
        assert sup.reload(keep=frozenset({"router"})) is True
        assert _pid(sup, "router") == router, "the kept router was restarted"
        assert sup.status("worker")["state"] == "STOPPED", "the changed worker was not reloaded"
        # Asked for without keep (the router's own replacement), the change takes effect.
        assert sup.reload() is True
        assert sup.status("router")["state"] == "STOPPED"
        assert sup.start_all(["router"]) == {} and _pid(sup, "router") != router
    finally:
        sup.shutdown()
