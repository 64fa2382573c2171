"""Build hook: the wheel also carries the Ansible collection dsv4.deploy and the package's data.

Everything else is declared in pyproject.toml. The repository root is the collection; the entries that
ship (the same as galaxy's tarball) and the data are named by dsv4deploy/collection_layout.py (loaded by
path: nothing is installed yet).
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _layout():
    path = HERE / "dsv4deploy" / "collection_layout.py"
    spec = importlib.util.spec_from_file_location("_dsv4_collection_layout", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithCollection(build_py):
    """build_py, then the collection (ansible_collections/dsv4/deploy) and dsv4deploy's data files."""

    def run(self) -> None:
        super().run()
        # An editable install runs from the clone, where ansible.cfg and the top-level folders serve.
        if getattr(self, "editable_mode", False):
            return
        layout = _layout()
        build_lib = Path(self.build_lib)
        layout.write_collection(HERE, build_lib)
        layout.write_package_data(HERE, build_lib / "dsv4deploy")


setup(cmdclass={"build_py": BuildWithCollection})
