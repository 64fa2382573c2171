"""Import stub for torchvision: sglang 0.5.12 and 0.5.18 import it at module level, and their
argument parsers never use it. Only on PYTHONPATH in the contract harness's child process."""
from stub_finder import Stub, install

install(("torchvision",))  # its submodules; this package is the stub itself
__version__ = "0.0.0"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return Stub(f"torchvision.{name}")
