"""The scale bench's inventory is one preflight accepts: it carries the stand-in model folder."""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.scale import scale_host


def test_the_scale_inventory_has_the_model_folder_its_deployment_names(tmp_path: Path) -> None:
    host = scale_host(tmp_path, hosts=2, load_s=1)
    group = host.inventory / "group_vars" / "all"
    assert yaml.safe_load((group / "deployment.yml").read_text())["model"]["path"] == "{{ inventory_dir }}/.model"
    assert (host.inventory / ".model" / "config.json").is_file()
    assert (host.inventory / ".model" / "chat_template.jinja").is_file()
