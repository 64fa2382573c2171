"""execution-environment.yml is a definition ansible-builder accepts: its own validation (`ansible-builder
create`, which writes the build context without a container engine) passes, and the image it describes
installs the dsv4deploy wheel (the collection and its Python dependencies)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILDER = Path(sys.executable).parent / "ansible-builder"

pytestmark = pytest.mark.skipif(not BUILDER.exists(), reason="ansible-builder is not installed (the test extra)")


def create(tmp_path: Path, definition: str) -> subprocess.CompletedProcess[str]:
    """`ansible-builder create` on `definition`, with a stand-in for the wheel `pip wheel -w dist .` makes."""
    (tmp_path / "dist").mkdir(exist_ok=True)
    (tmp_path / "dist" / "dsv4deploy-0.0.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "execution-environment.yml").write_text(definition, encoding="utf-8")
    return subprocess.run([str(BUILDER), "create", "-f", "execution-environment.yml", "--context", "context"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def test_ansible_builder_accepts_the_definition_and_the_image_installs_the_wheel(tmp_path: Path) -> None:
    done = create(tmp_path, (ROOT / "execution-environment.yml").read_text(encoding="utf-8"))
    assert done.returncode == 0, done.stdout + done.stderr
    [build_file] = [p for p in (tmp_path / "context").iterdir() if p.name in ("Containerfile", "Dockerfile")]
    steps = build_file.read_text(encoding="utf-8")
    assert "pip install --no-cache-dir /build/wheels/dsv4deploy-*.whl" in steps
    assert "ansible-galaxy collection list dsv4.deploy" in steps
    assert (tmp_path / "context" / "_build" / "wheels" / "dsv4deploy-0.0.0-py3-none-any.whl").exists()


def test_the_validation_is_the_builders_own_and_refuses_a_wrong_key(tmp_path: Path) -> None:
    definition = (ROOT / "execution-environment.yml").read_text(encoding="utf-8")
    done = create(tmp_path, definition.replace("version: 3\n", "version: 3\nbase_image: x\n"))
    assert done.returncode != 0 and "'base_image' was unexpected" in done.stdout + done.stderr
    shutil.rmtree(tmp_path / "context", ignore_errors=True)
