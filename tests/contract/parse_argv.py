"""Parse command lines with the real sglang / sglang-router parsers (run by the contract venv's python).

Reads JSON from stdin: a list of {"kind": "server"|"router", "argv": [...]} (argv without the
launcher). Writes JSON to stdout: for each, {"ok": bool, "error": str}. Besides what argparse refuses
(unknown, removed or ambiguous flags, bad choices and types), it refuses abbreviated flags and
deprecated ones, which the real CLIs accept.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys


def _server_parser() -> tuple[argparse.ArgumentParser, object]:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, lambda ns: ServerArgs.from_cli_args(ns)


def _router_parser() -> tuple[argparse.ArgumentParser, object]:
    from sglang_router.router_args import RouterArgs

    parser = argparse.ArgumentParser(prog="sglang-router")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser, lambda ns: RouterArgs.from_cli_args(ns, use_router_prefix=False)


def _own_checks(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    actions = {opt: action for action in parser._actions for opt in action.option_strings}
    for arg in argv:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        action = actions.get(flag)
        if action is None:
            return f"{flag}: not an exact flag of this parser (abbreviated or unknown)"
        if type(action).__name__.startswith("Deprecated") or "deprecated" in (action.help or "").lower():
            return f"{flag}: deprecated"
    return ""


def check(kind: str, argv: list[str], parsers: dict) -> dict:
    parser, build = parsers[kind]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build(parser.parse_args(argv))
    except SystemExit as exc:
        return {"ok": False, "error": f"exit {exc.code}: {err.getvalue().strip()}"}
    except Exception as exc:  # a refusal after parsing (from_cli_args / __post_init__)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    problem = _own_checks(parser, argv)
    return {"ok": not problem, "error": problem}


def main() -> int:
    items = json.load(sys.stdin)
    parsers = {}
    kinds = {item["kind"] for item in items}
    if "server" in kinds:
        parsers["server"] = _server_parser()
    if "router" in kinds:
        parsers["router"] = _router_parser()
    results = [check(item["kind"], item["argv"], parsers) for item in items]
    sys.stdout.write(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
