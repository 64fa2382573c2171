"""The plan step's YAML reader: the same data as yaml.safe_load, each file parsed again once it changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dsv4deploy.inventory import yaml_fast

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("path", sorted([*REPO.glob("roles/*/meta/argument_specs.yml"),
                                         *REPO.glob("inventory/local/group_vars/all/*.yml")]),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_same_data_as_safe_load(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert yaml_fast.safe_load(text) == yaml.safe_load(text)


def test_bad_yaml_raises_yaml_error() -> None:
    with pytest.raises(yaml.YAMLError):
        yaml_fast.safe_load("a: [1, 2\nb: c")


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text("index_topk: 1024\n", encoding="utf-8")
    assert yaml_fast.load_file(path) == {"index_topk": 1024}
    path.write_text("index_topk: 512\nmodel: x\n", encoding="utf-8")
    assert yaml_fast.load_file(path) == {"index_topk": 512, "model": "x"}


def test_a_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        yaml_fast.load_file(tmp_path / "absent.yml")
