"""The changelog fragments (changelogs/fragments/*.yml) are valid antsibull-changelog fragments: a wrong section or
a fragment that is not a list of strings would break the release that builds CHANGELOG.md from them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = Path(sys.executable).with_name("antsibull-changelog")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(TOOL), "lint"], cwd=root, capture_output=True, text=True, timeout=120, check=False)


def test_every_fragment_lints_clean() -> None:
    run = lint(REPO)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_a_fragment_with_an_unknown_section_is_refused(tmp_path: Path) -> None:
    shutil.copy(REPO / "galaxy.yml", tmp_path / "galaxy.yml")
    shutil.copytree(REPO / "changelogs", tmp_path / "changelogs")
    (tmp_path / "changelogs" / "fragments" / "bad.yml").write_text("fixes:\n  - not a section antsibull knows\n")
    run = lint(tmp_path)
    assert run.returncode != 0 and "bad.yml" in run.stdout + run.stderr, run.stdout + run.stderr
