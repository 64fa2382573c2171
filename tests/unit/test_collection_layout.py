"""The repository root as the collection dsv4.deploy: what a clone finds, what the wheel and the tarball ship."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import yaml

from dsv4deploy.collection_layout import repo_root, write_collection

REPO = repo_root()


def test_collection_version_follows_the_package() -> None:
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
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


def test_a_clone_finds_the_collection_at_its_root_with_no_assembling() -> None:
    link = REPO / "ansible_collections" / "dsv4" / "deploy"
    assert link.is_symlink() and link.resolve() == REPO.resolve()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    doc = subprocess.run([str(bin_dir / "ansible-doc"), "--json", "dsv4.deploy.dsv4_service_state"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert doc.returncode == 0, doc.stderr
    assert "dsv4.deploy.dsv4_service_state" in doc.stdout
    check = subprocess.run([str(bin_dir / "ansible-playbook"), "--syntax-check", "dsv4.deploy.stop"], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_galaxy_tarball_ships_the_tree_the_wheel_ships(tmp_path: Path) -> None:
    galaxy = str(Path(sys.executable).with_name("ansible-galaxy"))
    proc = subprocess.run([galaxy, "collection", "build", "--force", "--output-path", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = (tmp_path / "out").glob("dsv4-deploy-*.tar.gz")
    with tarfile.open(tarball) as tar:
        shipped = {m.name for m in tar.getmembers() if m.isfile()}
    root = write_collection(REPO, tmp_path / "wheel")
    in_wheel = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    # galaxy.yml becomes the tarball's MANIFEST.json and FILES.json; everything else is the same tree.
    assert shipped - {"MANIFEST.json", "FILES.json"} == in_wheel - {"galaxy.yml"}
    assert any(name.startswith("plugins/modules/") for name in shipped)


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
    assert not (REPO / "plugins" / "filter").exists()


def test_the_plan_role_declares_every_spec_variable_it_reads() -> None:
    from dsv4deploy.inventory.varnames import ALLOW_VAR
    from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS

    specs = yaml.safe_load((REPO / "roles" / "dsv4_plan" / "meta" / "argument_specs.yml").read_text())
    # ...and the inventory's allow-list of its own names that only look like ours (misspelt-name check),
    # and the gate list, which the plan line reads only to say when the opt-in perf gate is left out, and the
    # strategy (blue_green_hosts plans the release on the host set that does not serve)
    assert set(specs["argument_specs"]["main"]["options"]) == (
        set(DEPLOYMENT_KEYS) | set(HOST_KEYS) | {ALLOW_VAR, "dsv4_gates_names", "dsv4_rollout_strategy"})


def test_every_role_declares_its_inputs() -> None:
    for role in (REPO / "roles").iterdir():
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
        main = specs["argument_specs"]["main"]
        assert main["short_description"] and main.get("options"), f"{role.name} documents its inputs"


def test_every_action_plugin_has_a_unit_test_file_of_its_own() -> None:
    # One test file per plugin, mirroring the code: a reader of a plugin finds its tests by name.
    tests = REPO / "tests" / "unit" / "plugins" / "action"
    lacking = [p.stem for p in sorted((REPO / "plugins" / "action").glob("dsv4_*.py"))
               if not (tests / f"test_{p.stem}.py").is_file()]
    assert not lacking, f"action plugins without tests/unit/plugins/action/test_<plugin>.py: {lacking}"
