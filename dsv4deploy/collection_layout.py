"""Lay out the Ansible collection `dsv4.deploy` (and the package's data) from the source tree.

The repository keeps its own layout (top-level `playbooks/`, `roles/`, `templates/`, `inventory/`,
the plugins under `dsv4deploy/ansible/`). A collection needs another one
(`ansible_collections/dsv4/deploy/{playbooks,roles,plugins/...}`), so it is assembled from those
same files when it is needed, never kept as a second copy in the repository:

- the wheel build (`setup.py`) writes it into the wheel, where ansible-core finds it on `sys.path`
  with no configuration (its collection finder scans `sys.path` for `ansible_collections/`), and
  puts the templates and example inventories inside the `dsv4deploy` package;
- `python -m dsv4deploy.collection_layout OUT` writes `OUT/ansible_collections/dsv4/deploy` for
  `ansible-galaxy collection build` and `ansible-test sanity`.

Standard library only: `setup.py` loads this file by path before any dependency is installed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

NAMESPACE = "dsv4"
NAME = "deploy"
COLLECTION_DIR = Path("ansible_collections") / NAMESPACE / NAME

# Source folder (relative to the repository) -> folder in the collection, copied recursively.
COLLECTION_TREES: dict[str, str] = {
    "playbooks": "playbooks",
    "roles": "roles",
    "dsv4deploy/ansible/modules": "plugins/modules",
    "dsv4deploy/ansible/action_plugins": "plugins/action",
    "dsv4deploy/ansible/doc_fragments": "plugins/doc_fragments",
    "dsv4deploy/ansible/meta": "meta",
    # ansible-test's ignore files (tests/sanity/ignore-<ansible-core>.txt), each entry with its reason.
    "dsv4deploy/ansible/tests": "tests",
}
# Single files: source -> place in the collection.
COLLECTION_FILES: dict[str, str] = {
    "dsv4deploy/ansible/galaxy.yml": "galaxy.yml",
    "README.md": "README.md",
}
# Package data assembled into the installed `dsv4deploy` package (source -> folder in the package).
PACKAGE_TREES: dict[str, str] = {
    "templates": "templates",
    "inventory/examples": "examples",
    "inventory/local/group_vars": "examples/local/group_vars",
}

_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
# Modules name the shared documentation fragments `dsv4deploy.<NAME>`, which a clone finds through
# ansible.cfg's doc_fragment_plugins; inside the collection a fragment is found by its full name.
_FRAGMENTS = re.compile(r"^extends_documentation_fragment:\n(?:  - .*\n)+", re.M)
_SHORT_FRAGMENT = re.compile(r"^  - dsv4deploy\.", re.M)


def _copy_tree(src: Path, dst: Path) -> list[Path]:
    """Copy `src` into `dst` (merging), returning the files written."""
    shutil.copytree(src, dst, ignore=_SKIP, dirs_exist_ok=True)
    return [p for p in dst.rglob("*") if p.is_file()]


def _copy_file(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    return dst


def qualify_fragments(text: str) -> str:
    """A module's source with its `dsv4deploy.<NAME>` documentation fragments named as the collection's."""
    return _FRAGMENTS.sub(lambda m: _SHORT_FRAGMENT.sub(f"  - {NAMESPACE}.{NAME}.dsv4deploy.", m.group(0)), text)


def _pairs(source: Path, trees: dict[str, str], files: dict[str, str]) -> Iterator[tuple[Path, str, bool]]:
    for src, dst in trees.items():
        yield source / src, dst, True
    for src, dst in files.items():
        yield source / src, dst, False


def write_collection(source: Path, out: Path) -> Path:
    """Write the collection from the tree at `source` under `out` (a collections root); its path.

    `out/ansible_collections/dsv4/deploy` is replaced, so removed files do not linger.
    """
    root = out / COLLECTION_DIR
    if root.exists():
        shutil.rmtree(root)
    for src, dst, is_tree in _pairs(source, COLLECTION_TREES, COLLECTION_FILES):
        if not src.exists():
            raise FileNotFoundError(f"the collection needs {src}, which is missing from the source tree")
        if is_tree:
            _copy_tree(src, root / dst)
        else:
            _copy_file(src, root / dst)
    for module in (root / "plugins" / "modules").glob("*.py"):
        module.write_text(qualify_fragments(module.read_text()))
    return root


def write_package_data(source: Path, package_dir: Path) -> list[Path]:
    """Copy the templates and the example inventories into the built `dsv4deploy` package."""
    written: list[Path] = []
    for src, dst in PACKAGE_TREES.items():
        written += _copy_tree(source / src, package_dir / dst)
    return written


def repo_root() -> Path:
    """The source tree this module lives in (a clone or an unpacked sdist)."""
    return Path(__file__).resolve().parent.parent


def installed_collection() -> Path | None:
    """The collection an installed wheel holds (`site-packages/ansible_collections/dsv4/deploy`), if any."""
    for entry in sys.path:
        root = Path(entry or ".") / COLLECTION_DIR
        if (root / "galaxy.yml").is_file():
            return root
    return None


def copy_installed(installed: Path, out: Path) -> Path:
    """Write `out/ansible_collections/dsv4/deploy` as a copy of an installed collection; its path."""
    root = out / COLLECTION_DIR
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(installed, root, ignore=_SKIP)
    return root


def main(argv: list[str] | None = None) -> int:
    """`python -m dsv4deploy.collection_layout OUT`: write OUT/ansible_collections/dsv4/deploy."""
    parser = argparse.ArgumentParser(prog="python -m dsv4deploy.collection_layout", description=main.__doc__)
    parser.add_argument("out", type=Path, help="collections root to write (e.g. build/collections)")
    parser.add_argument("--source", type=Path, default=None,
                        help="source tree (default: this clone; from an installed wheel, the collection it holds)")
    args = parser.parse_args(argv)
    source = args.source or repo_root()
    if args.source is None and not (source / "playbooks").is_dir():
        # Run from an installed wheel: there is no source tree, but the wheel holds the collection laid out.
        installed = installed_collection()
        if installed is None:
            parser.error(f"no source tree at {source} and no installed collection dsv4.deploy; fix: pass --source "
                         "CLONE (a clone of dsv4deploy)")
        print(copy_installed(installed, args.out))
        return 0
    try:
        print(write_collection(source, args.out))
    except FileNotFoundError as exc:
        parser.error(f"{exc}; fix: pass --source CLONE (a clone of dsv4deploy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
