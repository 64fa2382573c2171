"""Rendered systemd units pass `systemd-analyze verify` with empty stderr (ExecStart stubbed).

systemd-analyze returns 0 for unknown keys and bad values and only warns on stderr, so stderr must
be empty. It also checks that ExecStart exists, so the units are rewritten to point at a stub.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4deploy.plan.render import render_release

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import combined_spec, pd_spec, xpyd_spec

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(SYSTEMD_ANALYZE is None,
                                reason="systemd-analyze not installed (apt-get install systemd) - units not verified")


def _units(spec, host, tmp_path: Path) -> list[Path]:
    stub = tmp_path / "stub bin" / "serve.sh"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    out = []
    for rel, text in render_release(spec, host).items():
        if rel.startswith("units/"):
            # Same unit, only the executable path swapped for one that exists on this machine.
            text, n = re.subn(r'^ExecStart=".*"$', f'ExecStart="{stub}"', text, flags=re.M)
            assert n == 1
            path = tmp_path / Path(rel).name
            path.write_text(text)
            out.append(path)
    return out


@pytest.mark.parametrize("make,host", [(pd_spec, "gpu1"), (combined_spec, "gpu1"), (xpyd_spec, "gpu1"),
                                       (xpyd_spec, "gpu3")])
def test_units_verify_clean(make, host, tmp_path):
    units = _units(make(), host, tmp_path)
    assert units
    result = subprocess.run([SYSTEMD_ANALYZE, "verify", *map(str, units)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_verify_catches_a_bad_key(tmp_path):
    # Shows the check can fail: an unknown key only warns, on stderr.
    (unit,) = _units(combined_spec(), "gpu1", tmp_path)
    unit.write_text(unit.read_text().replace("Type=exec", "Type=exec\nNoSuchKey=1"))
    result = subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "NoSuchKey" in result.stderr
