"""The collection dsv4.deploy as assembled from the repository's own layout."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from dsv4deploy.collection_layout import repo_root, write_collection

REPO = repo_root()


def test_collection_version_follows_the_package() -> None:
    galaxy = yaml.safe_load((REPO / "dsv4deploy" / "ansible" / "galaxy.yml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert (galaxy["namespace"], galaxy["name"]) == ("dsv4", "deploy")
    assert galaxy["version"] == project["version"]


def test_collection_holds_playbooks_roles_and_plugins_where_ansible_looks(tmp_path: Path) -> None:
    root = write_collection(REPO, tmp_path)
    assert root == tmp_path / "ansible_collections" / "dsv4" / "deploy"
    for playbook in ("deploy", "rollback", "verify", "stop"):
        assert (root / "playbooks" / f"{playbook}.yml").is_file()
    roles = {p.name for p in (REPO / "roles").iterdir() if p.is_dir()}
    assert {p.name for p in (root / "roles").iterdir()} == roles
    actions = {p.stem for p in (root / "plugins" / "action").glob("*.py")}
    modules = {p.stem for p in (root / "plugins" / "modules").glob("*.py")}
    assert actions and modules
    assert (root / "meta" / "runtime.yml").is_file() and (root / "galaxy.yml").is_file()
    assert not list(root.rglob("__pycache__"))


def test_rewriting_drops_files_that_are_gone(tmp_path: Path) -> None:
    root = write_collection(REPO, tmp_path)
    stale = root / "roles" / "gone.txt"
    stale.write_text("x")
    write_collection(REPO, tmp_path)
    assert not stale.exists()


def test_roles_and_playbooks_use_no_filter_of_our_own() -> None:
    # Inside a collection, filters resolve by short name only from ansible.builtin: ours would be missing.
    offenders = [f"{path.relative_to(REPO)}:{n}" for folder in ("roles", "playbooks")
                 for path in (REPO / folder).rglob("*.yml")
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"\|\s*dsv4_\w+\s*\(", line)]
    assert not offenders, f"use builtin filters instead: {offenders}"
    assert not (REPO / "dsv4deploy" / "ansible" / "filter_plugins").exists()


def test_the_plan_role_declares_every_spec_variable_it_reads() -> None:
    from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS
    from dsv4deploy.varnames import ALLOW_VAR

    specs = yaml.safe_load((REPO / "roles" / "dsv4_plan" / "meta" / "argument_specs.yml").read_text())
    # ...and the inventory's allow-list of its own names that only look like ours (misspelt-name check)
    assert set(specs["argument_specs"]["main"]["options"]) == set(DEPLOYMENT_KEYS) | set(HOST_KEYS) | {ALLOW_VAR}


def test_every_role_declares_its_inputs() -> None:
    for role in (REPO / "roles").iterdir():
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
        main = specs["argument_specs"]["main"]
        assert main["short_description"] and main.get("options"), f"{role.name} documents its inputs"
