"""YAML reading for the plan step: libyaml's C loader where PyYAML has it (about ten times the pure-Python
loader's speed), the same safe loader's results either way.

The plan step (the dsv4_build_plan action, `dsv4deploy validate` and `plan`) reads every role's
argument_specs and defaults and the inventory's vars files to find misspelt names; with the pure-Python
loader that was most of the plan's time.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

# CSafeLoader builds the same objects as SafeLoader (PyYAML's own C binding of libyaml).
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """yaml.safe_load(text), with libyaml's loader when it is there; raises yaml.YAMLError as safe_load does."""
    return yaml.load(text, Loader=_LOADER)  # a safe loader, C or Python


def load_file(path: Path) -> Any:
    """The YAML data of `path`, parsed once per content (cached by path, size and mtime); OSError,
    UnicodeDecodeError and yaml.YAMLError as reading and safe_load raise them."""
    stat = path.stat()
    return _load_cached(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, size: int, mtime_ns: int) -> Any:
    return safe_load(Path(path).read_text(encoding="utf-8"))
