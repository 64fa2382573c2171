"""`dsv4deploy gate`: any gate by hand against a live server or router."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dsv4deploy.cli.common import EXIT_OK, CliError

EXIT_GATE_FAILED = 1
SERVER_ROLES = ("prefill", "decode", "combined")
DEFAULT_MODEL = "deepseek-v4-flash"


def _gate_defaults() -> Any:
    from dsv4deploy.gates.runner import GateSettings

    return GateSettings()


def parse_pairs(values: list[str] | None, option: str) -> list[tuple[str, str]]:
    """`role=VALUE` options as (role, value), roles checked; CliError otherwise."""
    pairs = []
    for raw in values or []:
        role, sep, value = raw.partition("=")
        if not sep or role not in SERVER_ROLES or not value:
            raise CliError([f"{option} {raw!r}: expected ROLE=VALUE with ROLE one of {', '.join(SERVER_ROLES)}"])
        pairs.append((role, value))
    return pairs


def named(pairs: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(name, role, value): names as the services are called, `prefill`, `prefill-2`, ..."""
    seen: dict[str, int] = {}
    out = []
    for role, value in pairs:
        seen[role] = seen.get(role, 0) + 1
        out.append((role if seen[role] == 1 else f"{role}-{seen[role]}", role, value))
    return out


def parse_numbers(text: str, option: str, kind: type[int] | type[float]) -> list[Any]:
    """A comma-separated list such as `1000,2000` for `option`; CliError otherwise."""
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError([f"{option} {text!r}: expected comma-separated {kind.__name__}s such as "
                        f"{'1000,2000,4000' if kind is int else '0.1,0.5,0.9'}"]) from None
    if not values:
        raise CliError([f"{option}: give at least one value"])
    return values


def read_api_key(path: Path | None) -> str | None:
    """The key in `path` (stripped), None without a path; CliError when unreadable or empty."""
    if path is None:
        return None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CliError([f"--api-key-file {path}: cannot read it ({exc.strerror or exc})"]) from None
    if not key:
        raise CliError([f"--api-key-file {path}: the file is empty"])
    return key


def checked_url(url: str | None, option: str) -> str:
    """`url` as the gates accept it; CliError naming the option otherwise."""
    from dsv4deploy.gates.http import check_url

    if url is None:
        raise CliError([f"{option} is required"])
    try:
        return check_url(url, option)
    except ValueError as exc:
        raise CliError([str(exc)]) from None


def stderr_progress(gate: str) -> Callable[[int, int, str], None]:
    """A progress callback printing `gate: [done/total] note` to stderr."""
    def progress(done: int, total: int, note: str) -> None:
        where = f"{done}/{total}" if total else str(done)
        print(f"{gate}: [{where}] {note}", file=sys.stderr, flush=True)
    return progress


def _gate_readiness(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import WorkerEndpoint, check_readiness

    url = checked_url(args.url, "--url")
    workers = [WorkerEndpoint(name=name, role=role, url=checked_url(value, "--worker"))
               for name, role, value in named(parse_pairs(args.worker, "--worker"))]
    router = url if workers else None
    if not workers:  # --url alone is a combined server
        workers = [WorkerEndpoint(name="combined", role="combined", url=url)]
    deadline = args.deadline or _gate_defaults().readiness_deadline()
    return check_readiness(workers, router, args.model, deadline, api_key=api_key,
                           progress=stderr_progress("readiness"))


def _read_log(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CliError([f"--log-file {path}: cannot read it ({exc.strerror or exc})"]) from None


def _gate_config(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import ServerConfigInput, check_config

    servers = named(parse_pairs(args.server, "--server"))
    if not servers:
        raise CliError(["config needs at least one --server ROLE=URL"])
    logs = {name: path for name, _, path in named(parse_pairs(args.log_file, "--log-file"))}
    missing = [name for name, _, _ in servers if name not in logs]
    if missing:
        raise CliError([f"no --log-file for server {name} (give one per --server, in the same order)"
                        for name in missing])
    expected = parse_expected(args.expected)
    inputs = [ServerConfigInput(name=name, role=role, url=checked_url(url, "--server"), log_text=_read_log(logs[name]))
              for name, role, url in servers]
    return check_config(expected, inputs, api_key=api_key, timeout_s=args.deadline or 10.0,
                        deadline_s=args.deadline or _gate_defaults().config_deadline_s)


def parse_expected(text: str | None) -> dict[str, Any]:
    """--expected as a JSON object; CliError otherwise."""
    if text is None:
        raise CliError(["config needs --expected JSON, the override every server must run with, "
                        "e.g. '{\"index_topk\": 1024}' ('{}' for none)"])
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CliError([f"--expected {text!r} is not JSON: {exc}"]) from None
    if not isinstance(value, dict):
        raise CliError([f"--expected {text!r} must be a JSON object"])
    return value


def _gate_smoke(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import run_smoke

    deadline = args.deadline or _gate_defaults().smoke_deadline_s
    return run_smoke(checked_url(args.url, "--url"), args.model, deadline, api_key=api_key,
                     progress=stderr_progress("smoke"))


def _gate_needle(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import run_needle

    defaults = _gate_defaults()
    lengths = parse_numbers(args.lengths, "--lengths", int) if args.lengths else defaults.needle_lengths
    depths = parse_numbers(args.depths, "--depths", float) if args.depths else defaults.needle_depths
    required = defaults.required_tokens(args.index_topk) if args.required_tokens is None else args.required_tokens
    if required > max(lengths):
        raise CliError([f"--lengths {lengths} cannot reach the required {required} tokens: add a length of at least "
                        f"{required} (or lower --required-tokens)"])
    return run_needle(checked_url(args.url, "--url"), args.model, context_lengths=lengths, depths=depths,
                      required_tokens=required, deadline_s=args.deadline or defaults.needle_deadline_s,
                      concurrency=args.concurrency or defaults.needle_concurrency, api_key=api_key,
                      progress=stderr_progress("needle"))


def _gate_soak(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates import run_soak

    d = _gate_defaults()

    def given(value: Any, default: Any) -> Any:
        return default if value is None else value

    return run_soak(checked_url(args.url, "--url"), args.model, sessions=given(args.sessions, d.soak_sessions),
                    turns=given(args.turns, d.soak_turns), concurrency=given(args.concurrency, d.soak_concurrency),
                    max_corruption_rate=given(args.max_corruption_rate, d.soak_max_corruption_rate),
                    design=d.soak_design(), deadline_s=args.deadline or d.soak_deadline_s, api_key=api_key,
                    progress=stderr_progress("soak"))


def _gate_accuracy(args: argparse.Namespace, api_key: str | None) -> Any:
    from dsv4deploy.gates.quality_runner import accuracy_gate
    from dsv4deploy.gates.runner import GateSettings
    from dsv4deploy.plan.memory import load_profile

    models = load_profile().models
    if args.model_profile not in models:
        raise CliError([f"--model-profile {args.model_profile!r}: choose one of {', '.join(sorted(models))}"])
    chosen = {"accuracy_questions": args.questions, "accuracy_task": args.task,
              "accuracy_expected": args.expected_score, "accuracy_count": args.count,
              "accuracy_concurrency": args.concurrency, "accuracy_deadline_s": args.deadline}
    settings = GateSettings(**{k: v for k, v in chosen.items() if v is not None})
    # The gate's plan: where to ask, and the model profile's reference scores it judges the score by.
    plan = {"endpoint": checked_url(args.url, "--url"), "served_model_name": args.model,
            "reference_scores": dict(models[args.model_profile].reference_scores)}
    return accuracy_gate(plan, settings, api_key=api_key, progress=stderr_progress("accuracy"))


GATE_RUNNERS: dict[str, Callable[[argparse.Namespace, str | None], Any]] = {
    "accuracy": _gate_accuracy,
    "readiness": _gate_readiness,
    "config": _gate_config,
    "smoke": _gate_smoke,
    "needle": _gate_needle,
    "soak": _gate_soak,
}


def format_gate(result: Any) -> list[str]:
    """A result as lines: `name: status in N s: summary`, then the raw body of every failure."""
    lines = [f"{result.name}: {result.status} in {result.seconds:.1f} s: {result.summary}"]
    for failure in result.evidence.get("failures", []) if not result.passed else []:
        what = failure.get("what", "?")
        lines.append(f"  {what}: status {failure.get('status')} {failure.get('error') or ''}".rstrip())
        lines += [f"    {line}" for line in str(failure.get("body") or "").splitlines()]
    return lines


def add_gate(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Run one gate by hand against a live server or router; exit 0 passed, 1 failed or "
                          "inconclusive, 2 bad input. Progress goes to stderr.")
    parser.add_argument("gate", choices=sorted(GATE_RUNNERS), help="which gate")
    parser.add_argument("--url", help="the router (PD) or the combined server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"served model name (default {DEFAULT_MODEL})")
    parser.add_argument("--api-key-file", type=Path, metavar="PATH", help="file holding the API key")
    parser.add_argument("--deadline", type=float, metavar="SECONDS",
                        help="give up after this long (default: the deploy's; for config the request timeout)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON (summary to stderr)")
    parser.add_argument("--worker", action="append", metavar="ROLE=URL",
                        help="readiness: a worker behind the router at --url (repeatable); none: --url is combined")
    parser.add_argument("--server", action="append", metavar="ROLE=URL", help="config: a server (repeatable)")
    parser.add_argument("--log-file", action="append", metavar="ROLE=PATH",
                        help="config: a server's log since its start, one per --server in the same order")
    parser.add_argument("--expected", metavar="JSON",
                        help="config: the expected override, e.g. '{\"index_topk\":1024}'")
    parser.add_argument("--lengths", metavar="N,N,...", help="needle: context lengths in tokens")
    parser.add_argument("--depths", metavar="F,F,...", help="needle: needle depths between 0 and 1")
    parser.add_argument("--required-tokens", type=int, metavar="N",
                        help="needle: every cell up to N must recall, and one of at least N at every depth "
                             "(default: 5500 with --index-topk 1024, 2000 with 512)")
    parser.add_argument("--index-topk", type=int, metavar="N", help="needle: the server's index_topk, for the "
                        "default requirement (default 512, DeepSeek-V4's own)")
    parser.add_argument("--concurrency", type=int, metavar="N",
                        help="needle cells / soak or accuracy requests at a time")
    parser.add_argument("--sessions", type=int, metavar="N", help="soak: conversations to run")
    parser.add_argument("--turns", type=int, metavar="N", help="soak: tool-call turns per conversation")
    parser.add_argument("--max-corruption-rate", type=float, metavar="RATE",
                        help="soak: highest corrupted-session rate that passes (0 to 1)")
    parser.add_argument("--questions", metavar="builtin|PATH",
                        help="accuracy: the built-in questions (default) or a GSM8K-format JSONL file")
    parser.add_argument("--task", metavar="NAME", help="accuracy: the reference task the score is judged against "
                        "(default builtin for the built-in questions, gsm8k for a file)")
    parser.add_argument("--expected-score", type=float, metavar="FRACTION",
                        help="accuracy: the expected score (default: the model profile's for --task)")
    parser.add_argument("--count", type=int, metavar="N", help="accuracy: questions to ask at most (default 200)")
    parser.add_argument("--model-profile", default="deepseek-v4-flash", metavar="NAME",
                        help="accuracy: the model profile whose reference scores apply (default deepseek-v4-flash)")


def run_gate(args: argparse.Namespace) -> int:
    if args.deadline is not None and args.deadline <= 0:
        raise CliError([f"--deadline {args.deadline:g}: must be positive"])
    api_key = read_api_key(args.api_key_file)
    try:
        result = GATE_RUNNERS[args.gate](args, api_key)
    except ValidationError as exc:
        raise CliError([err["msg"].removeprefix("Value error, ") for err in exc.errors()]) from None
    except ValueError as exc:
        raise CliError([str(exc)]) from None
    summary = "\n".join(format_gate(result))
    if args.json:
        print(result.model_dump_json(indent=2))
        print(summary, file=sys.stderr)
    else:
        print(summary)
    return EXIT_OK if result.passed else EXIT_GATE_FAILED
