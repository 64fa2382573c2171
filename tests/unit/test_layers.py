"""The package's architecture holds: each package of `dsv4deploy/` imports only from the layers below it
(docs/interfaces.md, section 0), and the simulated host imports nothing of the tool it stands in for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dsv4deploy"

# Bottom up. A package may import from any package of a lower layer, never from its own layer or above.
LAYERS: list[set[str]] = [
    {"sglang", "net"},
    {"spec", "gates"},
    {"plan", "report", "inventory"},
    {"rollout", "isolate", "controller", "monitoring"},
    {"cli", "watch", "collection_layout"},
]
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}


def _imports(path: Path) -> set[str]:
    """The first-level names under `dsv4deploy` that `path` imports (a package, a module or PACKAGE_DIR)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dsv4deploy":
            if node.module == "dsv4deploy":
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("dsv4deploy."))
    return found


def _owner(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "__init__.py")


def test_every_package_and_top_level_module_has_a_layer() -> None:
    owners = {_owner(p) for p in _sources()} - {"sim"}
    assert owners == set(RANK), f"give each a layer in LAYERS (and docs/interfaces.md): {owners ^ set(RANK)}"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_down_the_layers_only(path: Path) -> None:
    owner = _owner(path)
    targets = _imports(path) - {owner, "PACKAGE_DIR"}
    if owner == "sim":
        assert not targets, f"the simulated host must not import the tool it stands in for: {sorted(targets)}"
        return
    upward = sorted(t for t in targets if RANK.get(t, -1) >= RANK[owner])
    assert not upward, (f"{path.relative_to(PACKAGE.parent)} ({owner}, layer {RANK[owner]}) imports "
                        f"{upward} from its own layer or above: move the code down, or the import up")


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    # The checker itself: an import of cli from plan is seen, by both import forms.
    probe = tmp_path / "probe.py"
    probe.write_text("from dsv4deploy.cli import main\nimport dsv4deploy.rollout.strategy\n"
                     "from dsv4deploy import plan\n")
    assert _imports(probe) == {"cli", "rollout", "plan"}
