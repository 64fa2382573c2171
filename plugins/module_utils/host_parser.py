"""The host's own sglang (and router) argument parsers over every rendered command line, and sglang's own
start-up resolution of every server line, before anything stops (standard library only; O(parsers) of
dsv4_host's preflight).

dsv4deploy's flag tables are read from the releases it knows; the host may run another one, or a build with
flags of its own. Here the service's own Python (the launcher's, `PYTHON -m sglang.launch_server`) loads its
sglang's parser, as the service user with the service's PATH and PYTHONPATH, and parses each command line:
an unknown, abbreviated or deprecated flag, or an sglang other than the inventory's `sglang_version`, fails
naming host, service, flag and fix. Each server line that parses is then resolved as `sglang.launch_server`
resolves it before it loads anything: `prepare_server_args` (the post-init checks up to 0.5.18) and
`resolve_once` (0.5.23), with the model folder's config.json and the model's own hooks, and the GPU as sglang
itself asks nvidia-smi about it. No weights are read, no CUDA context is made. A refusal quotes sglang's own
message; the resolved figures (mem_fraction_static, max_running_requests, ...) come back per service. One child
process per Python: loading sglang imports torch, a few seconds each (the module returns the time in
C(parser_seconds)). A host whose Python has no sglang (or no router package) keeps dsv4deploy's tables as the
rule: fine for a release they know exactly, refused for a patch release that only the nearest table describes.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time

TIMEOUT_S = 300
# Environment of the child, from the service's own (nothing secret: no key, no server_env at large).
PASSED_ENV = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "HOME")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Resolution reads the checkpoint's config.json on disk and never downloads.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# The checks argparse does not make (shared with tests/contract/parse_argv.py, which execs this text):
# (flag, why) for the first flag that is not exactly one of the parser's, or is deprecated; ("", "") if none.
OWN_CHECK = r'''
def _own(parser, argv):
    # The real CLIs accept abbreviations and deprecated spellings; a release that drops them would not.
    actions = {o: a for a in parser._actions for o in a.option_strings}
    for arg in argv:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        action = actions.get(flag)
        if action is None:
            return flag, "is not a flag of this parser (abbreviated or unknown)"
        if type(action).__name__.startswith("Deprecated") or "deprecated" in (action.help or "").lower():
            return flag, "is deprecated"
    return "", ""
'''

# sglang's start-up resolution of one parsed server line, in this process (the service's Python): what
# `sglang.launch_server` does before it starts a process. {"resolved": figures}, {"error", "stage"} with
# sglang's own message, or {"resolve_note"} where this sglang has no such entry point.
RESOLVE = r'''
FIGURES = ("device", "kv_cache_dtype", "mem_fraction_static", "max_running_requests", "chunked_prefill_size",
           "max_prefill_tokens", "max_total_tokens", "page_size", "context_length", "attention_backend",
           "cuda_graph_max_bs", "cuda_graph_max_bs_decode", "tp_size", "dp_size", "attn_dp_size", "ep_size",
           "moe_a2a_backend", "moe_runner_backend", "speculative_algorithm", "speculative_num_steps",
           "speculative_eagle_topk", "speculative_num_draft_tokens", "schedule_policy")

def _plain(value):
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)

def _resolve(argv, env):
    import os
    try:
        from sglang.srt.server_args import prepare_server_args
    except ImportError as exc:
        return {"resolve_note": "this sglang has no prepare_server_args (%s): the line was parsed only" % exc}
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        args = prepare_server_args(list(argv))
        if hasattr(args, "resolve_once"):
            args.resolve_once()
        try:
            from sglang.srt.arg_groups.overrides import resolving_view
            view = resolving_view(args)
        except ImportError:
            view = args
        return {"resolved": {k: _plain(getattr(view, k)) for k in FIGURES if hasattr(view, k)}}
    except SystemExit as exc:
        return {"error": "exited %s" % exc.code, "stage": "resolution"}
    except Exception as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc), "stage": "resolution"}
    finally:
        # Hooks set environment switches; the next line starts from the service's own.
        os.environ.clear()
        os.environ.update(saved)
'''

# Run by the service's Python: reads [{"kind", "argv", "resolve", "env"}] on stdin, writes {"versions",
# "results"} on stdout.
PARSE_SCRIPT = r'''
import argparse, contextlib, io, json, sys
''' + OWN_CHECK + RESOLVE + r'''

def _router(module, package, prog):
    from importlib import import_module
    from importlib.metadata import version
    args = import_module(module).RouterArgs
    parser = argparse.ArgumentParser(prog=prog)
    args.add_cli_args(parser, use_router_prefix=False)
    return parser, version(package)

def _server():
    import sglang
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, sglang.__version__

BUILD = {"server": _server,
         "sglang-router": lambda: _router("sglang_router.router_args", "sglang-router", "sglang-router"),
         "smg": lambda: _router("smg.router_args", "smg", "smg launch")}

def main():
    parsers, out = {}, {"versions": {}, "results": []}
    for check in json.load(sys.stdin):
        kind = check["kind"]
        if kind not in parsers:
            try:
                with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                    parsers[kind] = BUILD[kind]()
            except Exception as exc:
                parsers[kind] = "%s: %s" % (type(exc).__name__, exc)
        got = parsers[kind]
        if isinstance(got, str):
            out["results"].append({"unavailable": got})
            continue
        parser, version = got
        out["versions"][kind] = version
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(check["argv"])
        except SystemExit:
            lines = [line for line in err.getvalue().splitlines() if line.strip()]
            out["results"].append({"error": lines[-1] if lines else "refused"})
            continue
        flag, why = _own(parser, check["argv"])
        if why:
            out["results"].append({"flag": flag, "error": why})
            continue
        if not check.get("resolve"):
            out["results"].append({})
            continue
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            out["results"].append(_resolve(check["argv"], check.get("env") or {}))
    print(json.dumps(out))

main()
'''


def _as_user(user: str, cmd: list[str]) -> list[str]:
    """`cmd` run as `user` (runuser) when this module runs as root; as it is otherwise."""
    if os.geteuid() != 0 or user in ("", "root"):
        return cmd
    try:
        pwd.getpwnam(user)
    except KeyError:
        return cmd  # created later in preflight (service_user_create): root's view is the nearest
    return [shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--", *cmd]


def _environment(env: dict) -> dict:
    out = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", **OFFLINE_ENV}
    out.update({k: str(v) for k, v in (env or {}).items() if k in PASSED_ENV})
    return out


def run_parsers(python: str, user: str, env: dict, lines: list[dict]) -> dict:
    """Parse `lines` ({kind, argv, resolve, env}) with the parsers `python` has, and resolve the server lines
    that ask for it: {"versions", "results"} (one per line), or {"unavailable": why} when the child could not run."""
    cmd = _as_user(user, [python, "-W", "ignore", "-c", PARSE_SCRIPT])
    try:
        done = subprocess.run(cmd, input=json.dumps(lines), capture_output=True, text=True, env=_environment(env),
                              timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"unavailable": f"{python} could not run ({exc})"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"unavailable": f"{python} exited {done.returncode}: {tail}"}


def _judge(host: str, check: dict, versions: dict, result: dict) -> tuple[list[str], str]:
    """(problems, note) of one command line."""
    who = f"host {host}, {check['service']}"
    expected, table = check.get("expected_version"), check.get("table_version")
    if "unavailable" in result:
        if check["kind"] == "server" and expected == table:
            return [], (f"{who}: not resolved: no sglang on the host ({result['unavailable']}); dsv4deploy's tables "
                        "are the rule")
        if check["kind"] != "server":
            return [], f"{who}: no parser on the host ({result['unavailable']}); dsv4deploy's tables are the rule"
        return [f"{who}: sglang {expected} has no flag table of its own (the flags of {table} were rendered) and "
                f"{check['python']} cannot load sglang's parser to check them ({result['unavailable']}); fix: set "
                f"sglang_version to {table} if that is what is installed, or make sglang importable by "
                f"{check['python']} for the service user"], ""
    problems = []
    found = versions.get(check["kind"])
    if check["kind"] == "server" and expected and found and found != expected:
        problems.append(f"{who}: {check['python']} has sglang {found}, the inventory says sglang_version "
                        f"{expected}; fix: set sglang_version: \"{found}\" for {host} (host_vars/{host}.yml), "
                        f"or install sglang {expected} there")
    if result.get("stage") == "resolution":
        problems.append(f"{who}: sglang {found} refuses the server line at start-up (its own resolution: the "
                        "post-init checks and the model's hooks with the model folder's config.json, before any "
                        f"weight loads): {result['error']}; fix: correct the setting sglang names (the spec setting "
                        "that renders it, or extra_args); nothing has been stopped")
        return problems, ""
    if result.get("resolve_note"):
        return problems, f"{who}: not resolved: {result['resolve_note']}"
    if result.get("error"):
        flag = f"{result['flag']} " if result.get("flag") else ""
        what = "sglang" if check["kind"] == "server" else check["kind"]
        problems.append(f"{who}: {what} {found}'s own parser refuses the command line: {flag}{result['error']}; "
                        "fix: remove or correct it (extra_args, or the spec setting that renders it)")
    return problems, ""


def check_lines(host: str, user: str, checks: list[dict]) -> dict:
    """Every check ({service, kind, python, argv, env, resolve, resolve_env, expected_version, table_version}) on
    this host: {"problems": [...], "notes": [...], "resolved": {service: figures}, "parser_seconds": float}."""
    started = time.monotonic()
    problems: list[str] = []
    notes: list[str] = []
    resolved: dict[str, dict] = {}
    by_python: dict[tuple[str, str], list[dict]] = {}
    for check in checks:
        key = (check["python"], json.dumps(_environment(check.get("env") or {}), sort_keys=True))
        by_python.setdefault(key, []).append(check)
    for (python, _env), group in by_python.items():
        answer = run_parsers(python, user, group[0].get("env") or {},
                             [{"kind": c["kind"], "argv": c["argv"], "resolve": bool(c.get("resolve")),
                               "env": {**(c.get("resolve_env") or {}), **OFFLINE_ENV}} for c in group])
        results = answer.get("results") or []
        for index, check in enumerate(group):
            # No result for a line (the child could not run): the same "unavailable" for each.
            result = results[index] if index < len(results) else {"unavailable": answer.get("unavailable", "no answer")}
            found, note = _judge(host, check, answer.get("versions") or {}, result)
            problems += found
            notes += [note] if note else []
            if result.get("resolved"):
                resolved[check["service"]] = result["resolved"]
    return {"problems": problems, "notes": notes, "resolved": resolved,
            "parser_seconds": round(time.monotonic() - started, 2)}
