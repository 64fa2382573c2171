"""The Ansible collection `dsv4.deploy` is the repository itself; this module says which of its files ship.

The repository root is laid out as the collection: `galaxy.yml`, `meta/runtime.yml`,
`plugins/{modules,action,module_utils,doc_fragments}`, `roles/`, `playbooks/`, beside the Python package
`dsv4deploy/`. A clone uses that tree as it is: the committed link `ansible_collections/dsv4/deploy -> ../..`
and ansible.cfg's `collections_path = .` let ansible-core find `dsv4.deploy` at the root, with no
assembling step. What ships is the same tree, named once here (`COLLECTION_CONTENT`):

- the wheel build (`setup.py`) copies those entries into the wheel's `ansible_collections/dsv4/deploy`,
  where ansible-core finds it on `sys.path` with no configuration, and puts the templates and example
  inventories inside the `dsv4deploy` package;
- `ansible-galaxy collection build`, run at the repository root, packs the same entries (galaxy.yml's
  `build_ignore` leaves out everything else; a unit test keeps the two lists equal);
- `python -m dsv4deploy.collection_layout OUT` copies them to `OUT/ansible_collections/dsv4/deploy`, a
  tree outside git for `ansible-test sanity` (inside a git checkout it lists only git's files).

Standard library only: `setup.py` loads this file by path before any dependency is installed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

NAMESPACE = "dsv4"
NAME = "deploy"
COLLECTION_DIR = Path("ansible_collections") / NAMESPACE / NAME

# The entries of the repository root that make up the collection, as the wheel and the tarball ship it
# (tests/sanity: ansible-test's ignore files, each entry with its reason).
COLLECTION_CONTENT: tuple[str, ...] = (
    "galaxy.yml", "README.md", "CHANGELOG.md", "meta", "plugins", "roles", "playbooks", "tests/sanity",
)
# Package data assembled into the installed `dsv4deploy` package (source -> folder in the package).
PACKAGE_TREES: dict[str, str] = {
    "templates": "templates",
    "inventory/examples": "examples",
    "inventory/local/group_vars": "examples/local/group_vars",
    # The embedded host's stand-in checkpoint (`init --example local` writes it as DIR/.model).
    "inventory/local/.model": "examples/local/model",
}

_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


def _copy_tree(src: Path, dst: Path) -> list[Path]:
    """Copy `src` into `dst` (merging), returning the files written."""
    shutil.copytree(src, dst, ignore=_SKIP, dirs_exist_ok=True)
    return [p for p in dst.rglob("*") if p.is_file()]


def _copy_file(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    return dst


def write_collection(source: Path, out: Path) -> Path:
    """Copy the collection's entries of the tree at `source` under `out` (a collections root); its path.

    `out/ansible_collections/dsv4/deploy` is replaced, so removed files do not linger.
    """
    root = out / COLLECTION_DIR
    if root.exists():
        shutil.rmtree(root)
    for entry in COLLECTION_CONTENT:
        src = source / entry
        if not src.exists():
            raise FileNotFoundError(f"the collection needs {src}, which is missing from the source tree")
        if src.is_dir():
            _copy_tree(src, root / entry)
        else:
            _copy_file(src, root / entry)
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
