"""Import stubs for the contract harness's child processes: a module named here imports as an empty stand-in
whose every attribute is another stand-in (the CPU wheel sets lack GPU kernels and some extras that sglang
imports at module level but never calls while it parses or resolves its arguments)."""
import importlib.abc
import importlib.machinery
import sys
import types


class Stub(types.ModuleType):
    """A module whose attributes, and whose calls, are stubs too."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        return self


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def install(names):
    """Stub the top-level modules `names` (and everything under them) for the rest of this process."""
    sys.meta_path.insert(0, _Finder(names))
