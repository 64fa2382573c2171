"""`dsv4deploy init`: write a starter inventory into a folder, to be used as `-i FOLDER`.

The examples are the repository's `inventory/examples/<name>/`; `local` is the embedded simulated
host (`inventory/local`'s variables), with its state kept under the new folder. An installed package
carries them inside `dsv4deploy/examples/` (see collection_layout.py); a clone reads the originals.
"""

from __future__ import annotations

from pathlib import Path

from dsv4deploy import PACKAGE_DIR

EXAMPLES = ("local", "pd-single-host", "1p1d-three-hosts", "2p1d",
            # sglang's DeepSeek-V4 cookbook cells on H200 (docs/recipes.md).
            "h200-tp4", "h200-dp-attention", "h200-fp8", "multi-node-pd")
RECIPE_EXAMPLES = EXAMPLES[4:]

# The embedded host's inventory file: this machine, reached without ssh, state under the inventory.
LOCAL_HOSTS = """\
# The embedded simulated GPU host: this machine, reached without ssh. Servers are dsv4deploy's
# simulated SGLang (group_vars/all/sim.yml), the router is the real sglang-router, supervisord runs
# them under dsv4_local_root (releases, logs, simulated GPUs); no root needed.
all:
  children:
    dsv4:
      hosts:
        local:
          ansible_connection: local
          ansible_host: 127.0.0.1
          ansible_python_interpreter: "{{ ansible_playbook_python }}"
      vars:
        dsv4_local_root: "{{ inventory_dir }}/.state"
        # smg (-e router_implementation=smg) runs from a venv of its own: pip install smg==1.13.0 there.
        dsv4_smg_python: "{{ inventory_dir }}/.smg-venv/bin/python"
"""

class StarterError(ValueError):
    """The starter cannot be written (unknown example, folder not empty)."""


def examples_dir() -> Path:
    """Where the example inventories are: inside the installed package, else the clone's inventory/."""
    here = PACKAGE_DIR
    packaged = here / "examples"
    return packaged if packaged.is_dir() else here.parent / "inventory" / "examples"


def _local_group_vars() -> Path:
    here = PACKAGE_DIR
    packaged = here / "examples" / "local" / "group_vars"
    return packaged if packaged.is_dir() else here.parent / "inventory" / "local" / "group_vars"


def _local_model() -> Path:
    packaged = PACKAGE_DIR / "examples" / "local" / "model"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / "inventory" / "local" / ".model"


def starter_files(example: str) -> dict[str, bytes]:
    """The files of example `example`: path relative to the inventory folder -> content."""
    if example not in EXAMPLES:
        raise StarterError(f"unknown example {example!r}; choose one of {', '.join(EXAMPLES)}")
    if example == "local":
        src = _local_group_vars()
        files = {f"group_vars/{p.relative_to(src)}": p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}
        files["hosts.yml"] = LOCAL_HOSTS.encode()
        # A dot folder: Ansible reads no inventory from it (its config.json would parse as one).
        model = _local_model()
        files.update({f".model/{p.relative_to(model)}": p.read_bytes()
                      for p in sorted(model.rglob("*")) if p.is_file()})
        return files
    src = examples_dir() / example
    return {str(p.relative_to(src)): p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}


def write_starter(target: Path, example: str) -> list[Path]:
    """Write example `example` as an inventory into `target`; the files written.

    Writing the same example again changes nothing; a folder where any of those files differs (edited, or
    another example) is refused untouched.
    """
    files = starter_files(example)
    if target.exists() and not target.is_dir():
        raise StarterError(f"{target} exists and is not a folder; choose a new one (nothing was written)")
    differ = [rel for rel, content in files.items()
              if (target / rel).exists() and (not (target / rel).is_file() or (target / rel).read_bytes() != content)]
    if differ:
        names = ", ".join(differ[:3]) + (", ..." if len(differ) > 3 else "")
        raise StarterError(f"{target} already holds different {names}; choose a new folder (nothing was written)")
    for rel, content in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return [target / rel for rel in sorted(files)]
