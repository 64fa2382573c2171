"""Preflight tells when /proc shows the API key on our command lines to every local user."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils.proc_mount import exposure_warning, proc_hidepid
from tests.unit.plugins.runner import run_module

LINE = "22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc {}"


@pytest.mark.parametrize(("options", "value"), [("rw", None), ("rw,hidepid=invisible", "invisible"),
                                                ("rw,hidepid=2,gid=4", "2"), ("rw,hidepid=0", "0")])
def test_the_hidepid_of_the_proc_mount_is_read(options: str, value: str | None) -> None:
    other = "30 22 0:5 / /dev rw - devtmpfs udev rw,hidepid=2"
    assert proc_hidepid(f"{other}\n{LINE.format(options)}\n") == value


@pytest.mark.parametrize(("options", "warned"), [("rw", True), ("rw,hidepid=0", True), ("rw,hidepid=off", True),
                                                 ("rw,hidepid=invisible", False), ("rw,hidepid=1", False),
                                                 ("rw,hidepid=ptraceable", False)])
def test_a_proc_without_hidepid_is_named_with_the_fix(tmp_path: Path, options: str, warned: bool) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(LINE.format(options) + "\n")
    warning = exposure_warning(str(info))
    assert (warning is not None) == warned
    if warning:
        assert "/proc/PID/cmdline" in warning and "hidepid=invisible" in warning and "--api-key" in warning


def test_preflight_warns_on_this_host_when_its_proc_shows_every_process(tmp_path: Path) -> None:
    hidden = proc_hidepid(Path("/proc/self/mountinfo").read_text()) in ("1", "2", "invisible", "noaccess")
    out = run_module("dsv4_host", tmp_path, gpu_query_command=["nvidia-smi"], state="check",
                     key_on_command_line=True)
    assert out["proc_hidepid"] is hidden
    assert ("--api-key" in str(out.get("warnings", []))) is not hidden
    quiet = run_module("dsv4_host", tmp_path, gpu_query_command=["nvidia-smi"], state="check")
    assert "proc_hidepid" not in quiet and not quiet.get("warnings")
