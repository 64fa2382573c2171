"""Parse command lines with the real sglang / router parsers (run by a contract environment's python).

Reads JSON from stdin: a list of {"kind": "server"|"sglang-router"|"smg", "argv": [...]} (argv without
the launcher). Writes JSON to stdout: {"versions": {kind: version}, "results": [{"ok": bool,
"error": str}, ...]}. Besides what argparse refuses (unknown, removed or ambiguous flags, bad choices
and types), it refuses abbreviated flags and deprecated ones, which the real CLIs accept.

Which sglang answers is the environment's business (the 0.5.23 venv, or an older sglang folder first on
PYTHONPATH); `versions` says which one did, so the caller can check it got the one it asked for.

With `--dump`, the output also holds "actions": the server parser's actions (the input of
dsv4deploy/sim/gen_flag_tables.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys


def _server_parser() -> tuple[argparse.ArgumentParser, object, str]:
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, lambda ns: ServerArgs.from_cli_args(ns), sglang.__version__


def _sglang_router_parser() -> tuple[argparse.ArgumentParser, object, str]:
    from importlib.metadata import version

    from sglang_router.router_args import RouterArgs

    parser = argparse.ArgumentParser(prog="sglang-router")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser, lambda ns: RouterArgs.from_cli_args(ns, use_router_prefix=False), version("sglang-router")


def _smg_parser() -> tuple[argparse.ArgumentParser, object, str]:
    from importlib.metadata import version

    from smg.router_args import RouterArgs

    parser = argparse.ArgumentParser(prog="smg launch")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser, lambda ns: RouterArgs.from_cli_args(ns, use_router_prefix=False), version("smg")


PARSERS = {"server": _server_parser, "sglang-router": _sglang_router_parser, "smg": _smg_parser}


def _own_checks(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """Preflight's own check (plugins/module_utils/host_parser.py OWN_CHECK, loaded by path: this runs in a
    contract environment without the collection): 'FLAG: why', or ''."""
    flag, why = _preflight_own_check()(parser, argv)
    return f"{flag}: {why}" if why else ""


def _preflight_own_check():
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "host_parser.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    [text] = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
              and getattr(node.targets[0], "id", "") == "OWN_CHECK"]
    namespace: dict = {}
    exec(compile(text, str(source), "exec"), namespace)  # our own file's check, read by path
    return namespace["_own"]


def _after_parsing_is_fine(exc: Exception) -> bool:
    # sglang up to 0.5.18 ends from_cli_args with an accelerator check: parsing had succeeded.
    return isinstance(exc, RuntimeError) and str(exc).startswith("No accelerator")


def check(kind: str, argv: list[str], parsers: dict) -> dict:
    """Parse `argv` with the `kind` parser: {"ok", "error"}."""
    parser, build, _ = parsers[kind]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build(parser.parse_args(argv))
    except SystemExit as exc:
        return {"ok": False, "error": f"exit {exc.code}: {err.getvalue().strip()}"}
    except Exception as exc:  # a refusal after parsing (from_cli_args / __post_init__)
        if not _after_parsing_is_fine(exc):
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    problem = _own_checks(parser, argv)
    return {"ok": not problem, "error": problem}


def dump_actions(parser: argparse.ArgumentParser) -> list[dict]:
    """Every action of `parser` as plain JSON (what gen_flag_tables reads)."""
    out = []
    for a in parser._actions:
        out.append({
            "opts": list(a.option_strings), "dest": a.dest, "default": _plain(a.default),
            "type": getattr(a.type, "__name__", None) if a.type else None, "nargs": _plain(a.nargs),
            "choices": _choices(a.choices),
            "action": type(a).__name__, "const": _plain(a.const), "new_flag": getattr(a, "new_flag", None),
        })
    return out


def _choices(choices: object) -> list | None:
    if not choices:
        return None
    # A set's order changes from run to run; sort it so regenerated tables are stable.
    items = sorted(choices, key=str) if isinstance(choices, (set, frozenset)) else list(choices)
    return [_plain(c) for c in items]


def _plain(value: object) -> object:
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return f"<{type(value).__name__}>"


def main() -> int:
    items = json.load(sys.stdin)
    kinds = {item["kind"] for item in items}
    dump = "--dump" in sys.argv[1:]
    if dump:
        kinds.add("server")
    parsers = {kind: PARSERS[kind]() for kind in sorted(kinds)}
    out: dict = {"versions": {kind: version for kind, (_, _, version) in parsers.items()},
                 "results": [check(item["kind"], item["argv"], parsers) for item in items]}
    if dump:
        out["actions"] = dump_actions(parsers["server"][0])
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
