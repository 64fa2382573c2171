"""A broken YAML file of an inventory is named with its line and column, whichever file it is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dsv4deploy.inventory import InventoryError, load_inventory_vars

EXAMPLE = Path(__file__).resolve().parents[3] / "inventory" / "examples" / "pd-single-host"
BROKEN_LIST = "prefill:\n  - host: gpu1\n   gpus: [0]\n"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE, tmp_path / "site")
    return tmp_path / "site"


def message(paths: list[str], extra: list[str] | None = None) -> str:
    with pytest.raises(InventoryError) as err:
        load_inventory_vars(paths, extra or [])
    return str(err.value)


def test_a_group_vars_file_is_named_with_line_and_column(site):
    deployment = site / "group_vars" / "all" / "deployment.yml"
    lines = deployment.read_text().count("\n")
    deployment.write_text(deployment.read_text() + BROKEN_LIST)
    text = message([str(site)])
    assert text.startswith(f"{deployment}:{lines + 3}:4: not valid YAML: did not find expected '-' indicator "
                           f"(while parsing a block collection started at line {lines + 2}): 'gpus: [0]'; fix: ")


@pytest.mark.parametrize("where", ["hosts.yml", "host_vars/gpu1.yml"])
def test_the_hosts_file_and_host_vars_are_named_too(site, where):
    (site / where).write_text((site / where).read_text() + "broken: [\n")
    assert message([str(site)]).startswith(f"{site / where}:")


def test_an_extra_vars_file_is_named(site, tmp_path):
    extra = tmp_path / "more.yml"
    extra.write_text(BROKEN_LIST)
    assert message([str(site)], [f"@{extra}"]).startswith(f"{extra}:3:4: not valid YAML")
