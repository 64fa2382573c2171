"""sglang's ``launch_server`` command line, per version, parsed with argparse as sglang does.

The tables in ``_flag_tables.py`` come from sglang's own parsers (see gen_flag_tables.py), so
abbreviations, ambiguous prefixes (``--cuda-graph-max-bs`` from 0.5.20), invalid choices and
unknown flags fail exactly like the real server: argparse's message and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._flag_tables import TABLES

PROG = "sglang serve"


def version_key(version: str) -> tuple[int, ...]:
    """``'0.5.23'`` -> ``(0, 5, 23)``."""
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def table_version(version: str) -> str:
    """The flag table that describes ``version`` (raise ValueError if unsupported).

    0.5.12-0.5.17 -> 0.5.12; 0.5.18-0.5.19 -> 0.5.18; 0.5.20 and later -> 0.5.23 (the flag
    ``--cuda-graph-max-bs`` disappeared in 0.5.20, which is what these tables must get right).
    """
    key = version_key(version)
    if len(key) < 3 or key < (0, 5, 12):
        raise ValueError(f"unsupported sglang version {version!r} (simulated: 0.5.12 and later)")
    if key < (0, 5, 18):
        return "0.5.12"
    if key < (0, 5, 20):
        return "0.5.18"
    return "0.5.23"


def logs_server_args_as_dict(version: str) -> bool:
    """From 0.5.19 the startup line is ``server_args={...}``; before, ``server_args=ServerArgs(...)``."""
    return version_key(version) >= (0, 5, 19)


def _rows(version: str) -> list[tuple]:
    return list(TABLES[table_version(version)])


def _warn_deprecated(option: str, new_flag: str | None) -> None:
    # sglang's print_deprecated_warning: logger.warning before logging is configured.
    replacement = f" Use '{new_flag}' instead." if new_flag else ""
    msg = f"'{option}' is deprecated and will be removed in a future release.{replacement}"
    print(f"\033[1;33m{msg}\033[0m", file=sys.stderr, flush=True)


class _DeprecatedFlag(argparse.Action):
    """Store like the old flag did, and warn with sglang's wording."""

    def __init__(self, option_strings, dest, new_flag=None, store=None, **kwargs):
        self.new_flag = new_flag
        self.store = store
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(option_string or self.option_strings[0], self.new_flag)
        if self.nargs == 0:
            setattr(namespace, self.dest, self.store)
        else:
            setattr(namespace, self.dest, values)


def _human_readable_int(text: str) -> int:
    # sglang accepts e.g. "128k" / "1m" for context lengths
    t = text.strip().lower()
    mult = {"k": 1000, "m": 1000_000}.get(t[-1:], 1)
    return int(float(t[:-1]) * mult) if mult != 1 else int(t)


_TYPES = {"int": int, "float": float, "hint": _human_readable_int, "str": str}


def build_parser(version: str) -> argparse.ArgumentParser:
    """An ArgumentParser with the flags of ``version`` (``allow_abbrev`` left True, as sglang)."""
    parser = argparse.ArgumentParser(prog=PROG)
    for opts, dest, kind, typ, default, nargs, choices, new_flag in _rows(version):
        kw: dict[str, Any] = {"dest": dest, "default": default}
        if kind == "store_true":
            parser.add_argument(*opts, action="store_true", **kw)
        elif kind == "bool_optional":
            parser.add_argument(opts[0], action=argparse.BooleanOptionalAction, **kw)
        elif kind in ("deprecated_true", "deprecated_noop"):
            parser.add_argument(*opts, action=_DeprecatedFlag, nargs=0, store=True,
                                new_flag=new_flag, **kw)
        elif kind == "deprecated_const" and not choices:
            const = (new_flag or "=").split("=", 1)[-1] or True
            parser.add_argument(*opts, action=_DeprecatedFlag, nargs=0, store=const,
                                new_flag=new_flag, **kw)
        elif kind in ("deprecated_alias", "deprecated_const"):
            parser.add_argument(*opts, action=_DeprecatedFlag, type=_TYPES[typ], nargs=nargs,
                                choices=choices, new_flag=new_flag, **kw)
        else:
            if opts[0] == "--model-path":
                kw["required"] = True
            parser.add_argument(*opts, type=_TYPES[typ], nargs=nargs, choices=choices, **kw)
    return parser


def parse_server_args(argv: list[str], version: str) -> dict[str, Any]:
    """Parse ``argv`` like ``sglang.launch_server`` of ``version``; SystemExit(2) on error."""
    return vars(build_parser(version).parse_args(argv))
