"""Every module and action plugin is documented the way ansible-doc shows it, and every action plugin's
argument spec says what its documentation says."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
MODULES = sorted((PLUGINS / "modules").glob("*.py"))
ACTIONS = sorted((PLUGINS / "action").glob("*.py"))
OPTION_KEYS = {"type", "elements", "required", "default", "choices", "description", "no_log", "aliases", "suboptions"}
SPEC_KEYS = ("type", "elements", "required", "default", "choices")
FRAGMENTS = PLUGINS / "doc_fragments" / "dsv4deploy.py"


def doc_blocks(path: Path) -> dict[str, str]:
    """DOCUMENTATION, EXAMPLES and RETURN of a plugin file, read without running it."""
    tree = ast.parse(path.read_text())
    return {node.targets[0].id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant)}


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_doc_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fragments(doc: dict) -> list[dict]:
    """The shared fragments (`dsv4.deploy.dsv4deploy.<NAME>`) a module's documentation names, parsed."""
    out = []
    for ref in doc.get("extends_documentation_fragment") or []:
        assert ref.startswith("dsv4.deploy.dsv4deploy."), f"{ref}: a fragment of the collection's own, by its FQCN"
        out.append(yaml.safe_load(getattr(load(FRAGMENTS).ModuleDocFragment, ref.rsplit(".", 1)[1].upper())))
    return out


def fragment_attributes(doc: dict) -> set[str]:
    """The attributes a module documents, its shared fragments' included."""
    names = set(doc.get("attributes") or {})
    for fragment in fragments(doc):
        names |= set(fragment["attributes"])
    return names


def documented_options(doc: dict) -> dict:
    """The options ansible-doc shows: the module's own, then its fragments' (the module's own win)."""
    options: dict = {}
    for fragment in reversed(fragments(doc)):
        options.update(fragment.get("options") or {})
    return {**options, **(doc.get("options") or {})}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_is_documented_with_examples_return_and_modes(path: Path) -> None:
    blocks = doc_blocks(path)
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, f"{path.name}: missing {blocks.keys()}"
    doc = yaml.safe_load(blocks["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert {"check_mode", "diff_mode", "platform"} <= fragment_attributes(doc)
    for name, option in doc["options"].items():
        # A flow mapping cut at a comma shows up as a stray key.
        assert set(option) <= OPTION_KEYS, f"{path.stem} option {name}: unexpected {set(option) - OPTION_KEYS}"
        assert option.get("description"), f"{path.stem} option {name} has no description"
    examples = yaml.safe_load(blocks["EXAMPLES"])
    assert any(f"dsv4.deploy.{path.stem}" in task for task in examples), "an example calls it by its FQCN"
    assert yaml.safe_load(blocks["RETURN"])


@pytest.mark.parametrize("path", ACTIONS, ids=lambda p: p.stem)
def test_action_plugin_has_a_documentation_stub_matching_its_argument_spec(path: Path) -> None:
    stub = PLUGINS / "modules" / path.name
    assert stub.is_file(), f"action {path.stem} needs modules/{path.name} with its DOCUMENTATION, EXAMPLES, RETURN"
    options = documented_options(yaml.safe_load(doc_blocks(stub)["DOCUMENTATION"]))
    if "def main(" in stub.read_text():
        # An action in front of a real module of its name (like ansible.builtin.template): the module's
        # argument spec validates, and the module's documentation is the action's.
        assert not hasattr(load(path), "ARGUMENT_SPEC"), "one argument spec, the module's"
        return
    spec = load(path).ARGUMENT_SPEC
    assert set(options) == set(spec)
    for name, arg in spec.items():
        documented = {k: options[name][k] for k in SPEC_KEYS if k in options[name]}
        declared = {k: arg[k] for k in SPEC_KEYS if k in arg}
        documented.setdefault("required", False)
        declared.setdefault("required", False)
        assert documented == declared, f"{path.stem} option {name}"


def test_the_api_key_is_never_logged() -> None:
    spec = load(PLUGINS / "action" / "dsv4_run_gates.py").ARGUMENT_SPEC
    assert spec["api_key"]["no_log"] is True


def test_ansible_doc_merges_the_shared_fragments_in_a_clone_and_in_the_collection(tmp_path: Path) -> None:
    from dsv4deploy.collection_layout import repo_root, write_collection

    repo = repo_root()
    write_collection(repo, tmp_path)
    ansible_doc = str(Path(sys.executable).with_name("ansible-doc"))
    names = ["dsv4_run_gates", "dsv4_access", "dsv4_worker_probe"]
    runs = {
        # A clone: ansible.cfg names the modules' folder (short names) and the root as the collections path
        # (the fragments are named by their FQCN).
        "clone": ([ansible_doc, "--json", *names], {"ANSIBLE_CONFIG": str(repo / "ansible.cfg")}, ""),
        # The collection as the wheel carries it, found by its full name from anywhere.
        "collection": ([ansible_doc, "--json", *(f"dsv4.deploy.{n}" for n in names)],
                       {"ANSIBLE_COLLECTIONS_PATH": str(tmp_path)}, "dsv4.deploy."),
    }
    for where, (argv, env, prefix) in runs.items():
        # Outside the clone, no ansible.cfg: only the collection's own names resolve.
        base = {k: v for k, v in os.environ.items() if k != "ANSIBLE_CONFIG"}
        proc = subprocess.run(argv, cwd=repo if where == "clone" else tmp_path, capture_output=True, text=True,
                              env={**base, **env}, timeout=120)
        assert proc.returncode == 0, f"{where}: {proc.stderr}"
        docs = json.loads(proc.stdout)
        gate, access, probe = (docs[prefix + n]["doc"] for n in names)
        assert gate["attributes"]["platform"]["description"] == "The controller.", where
        assert gate["attributes"]["check_mode"]["support"] == "none", f"{where}: the module's own entry wins"
        assert any("pip install dsv4deploy" in note for note in gate["notes"]), where
        assert access["attributes"]["check_mode"]["description"] == "Only reads.", where
        assert "dsv4_worker_check" in probe["attributes"]["action"]["description"], where
        assert probe["attributes"]["platform"]["description"] == "Any host with Python 3.", where
