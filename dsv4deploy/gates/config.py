"""Config gate: the model override was passed (log), is reported effective (server_info), and agrees.

A flag in the log proves it was passed, not that it was applied, so each server is also asked
``GET /server_info`` (retried on transient errors within the gate's deadline) for its resolved
``json_model_override_args``. Even that is only what the server reports: a server that reports the
value but computes without it (sglang's "logged but not applied") shows only in its answers. So the
result says, per override key, what proved it: the log, ``/server_info``, and behaviour
(dsv4deploy.gates.override_proof: the answers against the last good release's); an override shown
not applied fails the gate.

Prefill and decode are compared on every :data:`AGREEMENT_KEYS` setting. A key some server does
not report cannot be confirmed: the result names it, and fails when the spec sets that key (then
each server's value must also be the one the spec asked for).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, field_validator

from dsv4deploy.gates.http import check_url, describe_error, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Stopwatch, clip, make_result
from dsv4deploy.gates.transfer_log import mooncake_transport, slower_transfer_lines

GATE = "config"

# Reads both start-up formats: 0.5.18 `json_model_override_args='{...}'` (ServerArgs repr) and
# 0.5.19+ `'json_model_override_args': '{...}'` (dict repr).
OVERRIDE_IN_LOG = re.compile(r"json_model_override_args(?:=|': )'([^']*)'")
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # the second is the old alias

# Settings that must be equal on prefill and decode (unequal ones hang or garble, not fail).
AGREEMENT_KEYS = ("model_path", "page_size", "kv_cache_dtype", "context_length", "chat_template")

LIMITS_NOTE = (
    "server_info shows what the server reports, not what it computes with; only behaviour (the answers "
    "against the last good release's, and the needle gate's recall) shows an override applied"
)


class ServerConfigInput(BaseModel):
    """One server to check: its role, URL, and its log text since this start."""

    model_config = ConfigDict(frozen=True)

    name: str
    role: Literal["prefill", "decode", "combined"]
    url: str
    log_text: str
    # Answers of server_info already asked on the server's own host ({path, status, body, error}),
    # when the controller cannot reach its address; None = ask from here.
    server_info: list[dict[str, Any]] | None = None
    checked_on: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, "server url")


def parse_logged_overrides(log_text: str) -> list[str]:
    """Every ``json_model_override_args`` string in a server log, oldest first."""
    return OVERRIDE_IN_LOG.findall(log_text)


def check_config(
    expected_overrides: dict[str, Any],
    servers: list[ServerConfigInput],
    *,
    expected_settings: dict[str, dict[str, Any]] | None = None,
    expected_transports: dict[str, str] | None = None,
    behaviour: dict[str, dict[str, Any]] | None = None,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    deadline_s: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Check each server's logged and effective model override against ``expected_overrides``.

    Passes when, for every server, the last override in its log and the ``json_model_override_args``
    of its ``/server_info`` (fallback ``/get_server_info``) both parse to exactly
    ``expected_overrides``; when every setting the spec sets (``expected_settings``: server name ->
    {key: value}) is reported with that value; and when all prefill and decode servers report the
    same overrides and the same :data:`AGREEMENT_KEYS` (keys not reported are named as unconfirmed).
    A server whose spec asks for the RDMA transport (``expected_transports``: server name -> transport) fails
    when mooncake's own log line says it chose TCP. ``behaviour`` is what the answers showed per override key
    (dsv4deploy.gates.override_proof.judge); a key shown not applied fails.
    """
    if not isinstance(expected_overrides, dict):
        raise ValueError(f"expected_overrides must be a mapping, got {type(expected_overrides).__name__}")
    if not servers:
        raise ValueError("check_config needs at least one server")
    watch = Stopwatch(deadline_s)
    problems: list[str] = []
    failures: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    infos: dict[str, dict[str, Any]] = {}
    settings = expected_settings or {}

    with make_client(api_key, timeout_s) as client:
        for server in servers:
            row, info, row_problems, row_failures = _check_server(client, server, expected_overrides, watch, sleep)
            rows.append(row)
            problems += row_problems
            failures += row_failures
            if info is not None:
                infos[server.name] = info
                problems += _settings_problems(server.name, info, settings.get(server.name) or {})

    proofs = _proofs(expected_overrides, rows, behaviour)
    problems += [f"override {p['key']}={p['value']!r} is reported ({', '.join(p['reported_by'])}) but not applied: "
                 f"{p['why']}; the server computes as without it: check the name this sglang and its transformers "
                 "read the setting under (the RoPE base: rope_parameters)"
                 for p in proofs if p["behaviour"] == "not applied"]
    problems += _transport_problems(servers, expected_transports or {})
    agreement = _agreement(servers, infos)
    problems += agreement.pop("problems")
    evidence: dict[str, Any] = {
        "expected": expected_overrides,
        "servers": rows,
        "agreement": agreement,
        "proofs": proofs,
        "note": LIMITS_NOTE,
    }
    # A warning, not a failure: the transfer works, only slower than configured.
    warnings = {s.name: lines for s in servers if (lines := slower_transfer_lines(s.log_text))}
    if warnings:
        evidence["warnings"] = {"kv_transfer_fallback": warnings}
    if not problems:
        summary = f"override {_dump(expected_overrides)} logged and effective on {len(servers)} server(s)"
        if agreement["compared"]:
            summary += f", prefill and decode agree on {', '.join(agreement['compared'])}"
        if behaviour is not None and proofs:  # answers were compared: say per key what proved it
            summary += "; per key: " + "; ".join(f"{p['key']} {p['proved']}" for p in proofs)
        if agreement.get("unconfirmed"):
            summary += "; could not confirm " + "; ".join(
                f"{k} (not reported by {', '.join(who)})" for k, who in agreement["unconfirmed"].items())
        if warnings:
            name, lines = next(iter(warnings.items()))
            summary += (f"; warning: KV transfer slower than configured on {', '.join(warnings)} "
                        f"({name}: {lines[0][-160:]!r})")
        return make_result(GATE, GateStatus.PASSED, watch, summary, evidence)
    evidence["problems"] = problems
    evidence["failures"] = failures
    return make_result(GATE, GateStatus.FAILED, watch, "; ".join(problems), evidence)


def _check_server(
    client: httpx.Client, server: ServerConfigInput, expected: dict[str, Any], watch: Stopwatch,
    sleep: Callable[[float], None],
) -> tuple[dict[str, Any], dict[str, Any] | None, list[str], list[dict[str, Any]]]:
    """Evidence row, server_info (if read), problems and raw failures for one server."""
    problems: list[str] = []
    failures: list[dict[str, Any]] = []
    logged_all = parse_logged_overrides(server.log_text)
    logged_raw = logged_all[-1] if logged_all else None  # the last start in the text wins
    logged = _parse_override(logged_raw)
    if logged_raw is None:
        problems.append(f"{server.name}: no json_model_override_args in its log since this start")
    elif logged is None:
        problems.append(f"{server.name}: logged override {logged_raw!r} is not a JSON object")
    elif logged != expected:
        problems.append(f"{server.name}: log says {_dump(logged)}, expected {_dump(expected)}")

    if server.server_info is not None:
        info, info_path, info_failure = _server_info_from(server.server_info)
    else:
        info, info_path, info_failure = _server_info_retried(client, server.url, watch, sleep)
    effective_raw: Any = None
    effective: dict[str, Any] | None = None
    if info is None:
        failures.append({"what": f"{server.name} server_info", **info_failure})
        problems.append(f"{server.name}: server_info unreadable ({_short(info_failure)})")
    else:
        effective_raw = info.get("json_model_override_args")
        effective = effective_raw if isinstance(effective_raw, dict) else _parse_override(effective_raw)
        if effective is None:
            problems.append(
                f"{server.name}: {info_path} json_model_override_args is {effective_raw!r}, not a JSON object"
            )
        elif effective != expected:
            problems.append(
                f"{server.name}: {info_path} says {_dump(effective)} while "
                + (f"the log says {_dump(logged)}" if logged is not None else "the log shows none")
                + f", expected {_dump(expected)}"
            )
    row = {
        "name": server.name,
        "role": server.role,
        "url": server.url,
        "logged": logged_raw,
        "logged_count": len(logged_all),
        "server_info_path": info_path,
        "effective": effective_raw,
        "ok": not problems,
    }
    if server.checked_on:
        row["checked_on"] = server.checked_on
    return row, info, problems, failures


def _proofs(expected: dict[str, Any], rows: list[dict[str, Any]],
            behaviour: dict[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Per override key: what reported it (every server's log, every server's server_info) and what the
    answers showed (``behaviour``), with a phrase for the summary."""
    out = []
    for key, value in expected.items():
        logged = all(key in (found := _parse_override(r["logged"]) or {}) and found[key] == value for r in rows)
        effective = [r["effective"] if isinstance(r["effective"], dict) else _parse_override(r["effective"]) or {}
                     for r in rows]
        reported = all(key in e and e[key] == value for e in effective)
        by = [name for name, ok in (("log", logged), ("/server_info", reported)) if ok]
        shown = (behaviour or {}).get(key) or {"shown": "not shown", "why": "no comparison of answers was made "
                                               "(the parity gate's record of a last good release gives one)"}
        words = {"applied": "shown applied in behaviour", "not applied": "NOT applied (behaviour)",
                 "not shown": "not shown in behaviour"}[shown["shown"]]
        out.append({"key": key, "value": value, "log": logged, "server_info": reported, "reported_by": by,
                    "behaviour": shown["shown"], "why": shown["why"],
                    "proved": f"reported by {' and '.join(by) or 'nothing'}, {words}"})
    return out


def _transport_problems(servers: list[ServerConfigInput], wanted: dict[str, str]) -> list[str]:
    """mooncake's TCP fallback where the spec asked for RDMA, with mooncake's line (no line: no verdict)."""
    out = []
    for server in servers:
        chosen = mooncake_transport(server.log_text) if wanted.get(server.name) == "rdma" else None
        if chosen and chosen[0] == "tcp":
            out.append(f"{server.name}: mooncake fell back to TCP, the spec asks for transport rdma "
                       f"({chosen[1][-200:]!r}); fix: check ib_device names an InfiniBand device the host has "
                       "(ibv_devices) and the service may use it, or set transport: tcp")
    return out


def _server_info(client: httpx.Client, url: str) -> tuple[dict[str, Any] | None, str | None, dict[str, Any]]:
    """``(info, path, failure)``: the first server_info path that answers a JSON object."""
    answers: list[dict[str, Any]] = []
    for path in SERVER_INFO_PATHS:
        try:
            resp = client.get(f"{url}{path}")
        except httpx.HTTPError as exc:
            answers.append({"path": path, "status": None, "body": "", "error": describe_error(exc)})
            break
        answers.append({"path": path, "status": resp.status_code, "body": resp.text})
        if resp.status_code != 404:  # older servers only have the alias
            break
    return _server_info_from(answers)


def _server_info_retried(client: httpx.Client, url: str, watch: Stopwatch, sleep: Callable[[float], None],
                         ) -> tuple[dict[str, Any] | None, str | None, dict[str, Any]]:
    """:func:`_server_info`, asked again after transient failures (no answer, 429, 5xx) until the deadline."""
    tries, pause = 0, 0.5
    while True:
        tries += 1
        info, path, failure = _server_info(client, url)
        transient = failure.get("status") is None or failure.get("status") == 429 or failure.get("status", 0) >= 500
        if info is not None or not transient or watch.remaining() <= pause:
            if failure:
                failure["tries"] = tries
            return info, path, failure
        sleep(pause)
        pause = min(pause * 2, 4.0)


def _settings_problems(name: str, info: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """A setting the spec sets that this server reports otherwise, or does not report at all."""
    problems = []
    for key, value in wanted.items():
        if key not in info:
            problems.append(f"{name}: cannot confirm {key}={value!r}, which the spec sets: server_info does not "
                            "report it")
        elif str(info[key]) != str(value):
            problems.append(f"{name}: server_info says {key}={info[key]!r}, the spec sets {value!r}")
    return problems


def _server_info_from(answers: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None, dict[str, Any]]:
    """``(info, path, failure)`` from the answers of the server_info paths, asked in order."""
    failure: dict[str, Any] = {}
    for answer in answers:
        if answer.get("status") is None:
            return None, None, {"status": None, "body": "", "error": answer.get("error") or "no answer"}
        body = str(answer.get("body") or "")
        failure = {"status": answer["status"], "body": clip(body), "path": answer.get("path")}
        if answer["status"] != 200:
            continue
        try:
            info = json.loads(body)
        except ValueError:
            break
        if isinstance(info, dict):
            return info, answer.get("path"), {}
        break
    return None, None, failure


def _agreement(servers: list[ServerConfigInput], infos: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Compare model-affecting settings across prefill and decode servers; name what cannot be compared."""
    pd = [s for s in servers if s.role in ("prefill", "decode") and s.name in infos]
    roles = {s.role for s in pd}
    if roles != {"prefill", "decode"}:
        return {"compared": [], "values": {}, "problems": [], "skipped": "no prefill/decode pair"}
    unconfirmed = {k: [s.name for s in pd if k not in infos[s.name]] for k in AGREEMENT_KEYS}
    unconfirmed = {k: who for k, who in unconfirmed.items() if who}
    keys = ["json_model_override_args"] + [k for k in AGREEMENT_KEYS if k not in unconfirmed]
    values: dict[str, dict[str, Any]] = {}
    # An unreported key the spec sets already fails per server (_settings_problems); the rest are named.
    problems: list[str] = []
    for key in keys:
        per_server = {s.name: infos[s.name].get(key) for s in pd}
        values[key] = per_server
        normal = {s.name: _normal(key, per_server[s.name]) for s in pd}
        if len({json.dumps(v, sort_keys=True, default=str) for v in normal.values()}) > 1:
            shown = ", ".join(f"{name}={value!r}" for name, value in per_server.items())
            problems.append(f"prefill and decode disagree on {key}: {shown}")
    return {"compared": keys, "values": values, "problems": problems, "unconfirmed": unconfirmed}


def _normal(key: str, value: Any) -> Any:
    if key == "json_model_override_args" and isinstance(value, str):
        parsed = _parse_override(value)
        return parsed if parsed is not None else value
    return value


def _parse_override(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _short(failure: dict[str, Any]) -> str:
    if failure.get("error"):
        return str(failure["error"])
    return f"{failure.get('status')} {' '.join(str(failure.get('body', '')).split())[:120]}".strip()
