"""`dsv4deploy init`: the starter inventories, written from the package's examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4deploy.cli import main
from dsv4deploy.inventory import spec_from_inventory
from dsv4deploy.inventory.starter import EXAMPLES, RECIPE_EXAMPLES
from dsv4deploy.plan.memory import check_memory
from dsv4deploy.plan.render import render_all


@pytest.fixture
def short_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a short path: the local example's supervisord socket must stay under 108 bytes,
    which a long test name (or a pytest-xdist worker's folder) would otherwise exceed."""
    return tmp_path_factory.mktemp("s")


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_is_a_valid_inventory(short_dir: Path, example: str) -> None:
    assert main(["init", str(short_dir / "site"), "--example", example]) == 0
    spec = spec_from_inventory([str(short_dir / "site")], [])
    assert spec.hosts_in_use()


def test_local_example_keeps_its_state_under_the_new_folder(short_dir: Path) -> None:
    assert main(["init", str(short_dir / "site")]) == 0
    spec = spec_from_inventory([str(short_dir / "site")], [])
    assert Path(spec.host("local").install_root) == short_dir / "site" / ".state"


def test_init_again_changes_nothing_but_refuses_a_different_folder(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    assert main(["init", str(site)]) == 0
    (site / ".state").mkdir()  # what a deploy leaves there does not matter
    assert main(["init", str(site)]) == 0
    (site / "hosts.yml").write_text("# edited\n")
    assert main(["init", str(site), "--example", "local"]) == 2
    assert "already holds different hosts.yml" in capsys.readouterr().err
    assert (site / "hosts.yml").read_text() == "# edited\n"


@pytest.mark.parametrize("example", RECIPE_EXAMPLES)
def test_every_recipe_example_plans_and_renders(short_dir: Path, example: str) -> None:
    assert main(["init", str(short_dir / "site"), "--example", example]) == 0
    spec = spec_from_inventory([str(short_dir / "site")], [])
    assert all(r.feasible for r in check_memory(spec)), [r.explanation for r in check_memory(spec)]
    releases = render_all(spec)
    assert set(releases) == set(spec.hosts_in_use())
    scripts = "".join(text for files in releases.values() for path, text in files.items() if path.startswith("bin/"))
    assert "--speculative-algorithm" in scripts or "--nnodes" in scripts
