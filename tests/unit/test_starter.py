"""`dsv4deploy init`: the starter inventories, written from the package's examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4deploy.cli import main
from dsv4deploy.inventory import spec_from_inventory
from dsv4deploy.starter import EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_is_a_valid_inventory(tmp_path: Path, example: str) -> None:
    assert main(["init", str(tmp_path / "site"), "--example", example]) == 0
    spec = spec_from_inventory([str(tmp_path / "site")], [])
    assert spec.hosts_in_use()


def test_local_example_keeps_its_state_under_the_new_folder(tmp_path: Path) -> None:
    assert main(["init", str(tmp_path / "site")]) == 0
    spec = spec_from_inventory([str(tmp_path / "site")], [])
    assert Path(spec.host("local").install_root) == tmp_path / "site" / ".state"


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
