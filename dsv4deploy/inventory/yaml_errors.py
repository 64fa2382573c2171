"""YAML errors of an inventory named by file, line and column, before Ansible reads it.

Ansible's own message for a broken group_vars file is "YAML parsing failed: While parsing a block collection
did not find expected '-' indicator", with no file; an inventory file gets its place only inside warnings
from every plugin that tried it. Here each YAML file of the inventory (its YAML sources, group_vars/ and
host_vars/, and `-e @FILE`) is parsed first, and the first error of each is told where it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from dsv4deploy.inventory import yaml_fast

YAML_SUFFIXES = (".yml", ".yaml", ".json")
VARS_FOLDERS = ("group_vars", "host_vars")


def inventory_yaml_files(sources: Iterable[str], extra_vars: Iterable[str] = ()) -> Iterator[Path]:
    """The YAML files Ansible will read for these inventory sources and `-e` arguments."""
    for source in sources:
        path = Path(source)
        if "," in source and not path.exists():
            continue  # a host list
        if path.is_file():
            if path.suffix in YAML_SUFFIXES:
                yield path
            base = path.parent
        else:
            base = path
            yield from (p for p in sorted(base.iterdir()) if p.is_file() and p.suffix in YAML_SUFFIXES
                        and not p.name.startswith("."))
        for folder in VARS_FOLDERS:
            root = base / folder
            if root.is_dir():
                yield from (p for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")
                            and (p.suffix in YAML_SUFFIXES or not p.suffix))
    for arg in extra_vars:
        if arg.startswith("@") and Path(arg[1:]).is_file():
            yield Path(arg[1:])


def yaml_problems(files: Iterable[Path]) -> list[str]:
    """One line per file that is not valid YAML: `FILE:LINE:COLUMN: what; fix: ...` (with the line itself)."""
    out = []
    for path in dict.fromkeys(files):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # unreadable or binary: Ansible says so itself
        try:
            yaml_fast.safe_load(text)
        except yaml.YAMLError as exc:
            out.append(describe(path, text, exc))
    return out


def describe(path: Path, text: str, exc: yaml.YAMLError) -> str:
    """A YAML error as `FILE:LINE:COLUMN: problem (context at LINE); the line; fix`."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if mark is None:
        return f"{path}: not valid YAML: {problem}; fix: correct the file"
    where = f"{path}:{mark.line + 1}:{mark.column + 1}"
    lines = text.splitlines()
    shown = lines[mark.line] if mark.line < len(lines) else ""
    since = f" ({context} started at line {context_mark.line + 1})" if context and context_mark is not None else ""
    quoted = f": {shown.strip()!r}" if shown.strip() else " (the end of the file)"
    return (f"{where}: not valid YAML: {problem}{since}{quoted}; fix: correct that line (the keys of "
            "one mapping or list item line up under each other; indent with spaces, not tabs)")
