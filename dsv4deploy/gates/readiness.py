"""Readiness gate: every worker healthy, the router ready, the model card listed.

Only answers that mean "can serve now" count (SGLANG_CONTRACT.md): a worker's ``/health`` (503
until warm-up is done) and the router's ``/readiness`` (503 until a prefill and a decode are
healthy). The router's ``/health`` and ``/v1/models`` say yes long before that, so they are never
taken as readiness; ``/v1/models`` is only asked whether the served model name is listed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, field_validator

from dsv4deploy.gates.http import check_url, describe_error, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify
from dsv4deploy.sglang import versions

GATE = "readiness"
SUMMARY_BODY_CHARS = 160
HEARTBEAT_S = 10.0  # a load takes minutes on real GPUs: say what each server answers at least this often


class WorkerEndpoint(BaseModel):
    """One sglang server the gate waits for."""

    model_config = ConfigDict(frozen=True)

    name: str
    role: Literal["prefill", "decode", "combined"]
    url: str
    # The sglang version it runs: from 0.5.23 its /ready is asked too (older ones answer it 404).
    sglang_version: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, "worker url")


@dataclass
class _Check:
    """One URL polled until it answers the way that means ready."""

    label: str
    url: str
    kind: Literal["health", "readiness", "model_card"]
    ready: bool = False
    seconds_to_ready: float | None = None
    attempts: int = 0
    last_status: int | None = None
    last_body: str = ""
    last_error: str = ""
    models_seen: list[str] = field(default_factory=list)
    # Where the check ran: None = here (the controller), else the host that ran it.
    checked_on: str | None = None

    @classmethod
    def from_evidence(cls, entry: dict[str, Any]) -> _Check:
        """A check that ran elsewhere, rebuilt from its evidence entry."""
        return cls(label=entry["check"], url=entry["url"], kind="health", ready=bool(entry.get("ready")),
                   seconds_to_ready=entry.get("seconds_to_ready"), attempts=int(entry.get("attempts") or 0),
                   last_status=entry.get("last_status"), last_body=entry.get("last_body") or "",
                   last_error=entry.get("last_error") or "", checked_on=entry.get("checked_on"))

    def evidence(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "check": self.label,
            "url": self.url,
            "ready": self.ready,
            "seconds_to_ready": self.seconds_to_ready,
            "attempts": self.attempts,
            "last_status": self.last_status,
            "last_body": self.last_body,
        }
        if self.last_error:
            data["last_error"] = self.last_error
        if self.kind == "model_card":
            data["models_seen"] = self.models_seen
        if self.checked_on:
            data["checked_on"] = self.checked_on
        return data


def worker_paths(sglang_version: str | None) -> tuple[str, ...]:
    """What a worker answers 200 to once ready: ``/health``, and ``/ready`` where its sglang version has
    one (0.5.23 on; older ones answer it 404). The one definition, asked here and on a worker's own host
    (``dsv4_worker_check``, told these paths by ``dsv4_worker_probe``)."""
    return ("/health", "/ready") if versions.has_ready_endpoint(sglang_version) else ("/health",)


def check_readiness(
    workers: list[WorkerEndpoint],
    router_url: str | None,
    served_model_name: str,
    deadline_s: float,
    poll_interval_s: float = 0.1,
    api_key: str | None = None,
    progress: Progress | None = None,
    request_timeout_s: float = 5.0,
    settled: list[dict[str, Any]] | None = None,
    heartbeat_s: float = HEARTBEAT_S,
) -> GateResult:
    """Poll every readiness signal in parallel until all are ready or ``deadline_s`` passes.

    ``progress`` hears of each check that becomes ready and, every ``heartbeat_s`` while some are
    not, what each of those answers now (status and the start of the body, or the error).

    Checks: each worker's ``GET /health`` is 200, and its ``GET /ready`` where its sglang version has
    one (0.5.23 on); with a router, its ``GET /readiness`` is 200 and
    its ``/v1/models`` lists ``served_model_name``; without one, each worker's ``/v1/models`` does.
    Evidence holds, per check, the time to ready, the number of tries, and the last status and body.
    ``settled`` are worker checks already run elsewhere (on a worker's own host), as evidence
    entries of the same shape: they count as they are and are not asked again.
    """
    settled = settled or []
    if not workers and not settled:
        raise ValueError("check_readiness needs at least one worker endpoint")
    if not served_model_name:
        raise ValueError("served_model_name must be the name clients use (--served-model-name)")
    if deadline_s <= 0 or poll_interval_s <= 0 or request_timeout_s <= 0:
        raise ValueError("deadline_s, poll_interval_s and request_timeout_s must be positive")
    router = check_url(router_url, "router_url") if router_url is not None else None

    checks = [_Check(f"{w.name} {path}", f"{w.url}{path}", "health") for w in workers
              for path in worker_paths(w.sglang_version)]
    if router is not None:
        checks.append(_Check("router /readiness", f"{router}/readiness", "readiness"))
        checks.append(_Check("router /v1/models", f"{router}/v1/models", "model_card"))
    else:
        checks += [_Check(f"{w.name} /v1/models", f"{w.url}/v1/models", "model_card") for w in workers]

    done_elsewhere = [_Check.from_evidence(entry) for entry in settled]
    watch = Stopwatch(deadline_s)
    lock = threading.Lock()
    done = [sum(c.ready for c in done_elsewhere)]
    total = len(checks) + len(done_elsewhere)

    def on_ready(check: _Check) -> None:
        with lock:
            done[0] += 1
            notify(progress, done[0], total, f"{check.label} ready")

    with make_client(api_key, request_timeout_s) as client, ThreadPoolExecutor(len(checks)) as pool:
        futures = [
            pool.submit(_poll, client, check, watch, served_model_name, poll_interval_s, request_timeout_s, on_ready)
            for check in checks
        ]
        while wait(futures, timeout=heartbeat_s).not_done:
            with lock:
                waiting = "; ".join(_answers_now(c) for c in checks if not c.ready)
                notify(progress, done[0], total, f"waiting {watch.elapsed():.0f} s: {waiting}")
        for future in futures:
            future.result()
    checks = done_elsewhere + checks

    evidence: dict[str, Any] = {
        "served_model_name": served_model_name,
        "deadline_s": deadline_s,
        "endpoints": [check.evidence() for check in checks],
    }
    pending = [check for check in checks if not check.ready]
    if not pending:
        slowest = max(checks, key=lambda c: c.seconds_to_ready or 0.0)
        summary = (
            f"ready in {slowest.seconds_to_ready:.1f} s: {len(workers) + len(settled)} worker(s) /health 200"
            + _where(done_elsewhere)
            + (", router /readiness 200" if router else "")
            + f", model {served_model_name!r} listed (last: {slowest.label})"
        )
        return make_result(GATE, GateStatus.PASSED, watch, summary, evidence)

    evidence["failures"] = [
        {"what": check.label, "status": check.last_status, "body": check.last_body, "error": check.last_error}
        for check in pending
    ]
    reasons = "; ".join(_reason(check, served_model_name) for check in pending)
    summary = f"not ready after {deadline_s:g} s: {reasons}"
    return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)


def _poll(
    client: httpx.Client,
    check: _Check,
    watch: Stopwatch,
    model: str,
    interval_s: float,
    request_timeout_s: float,
    on_ready: Callable[[_Check], None],
) -> None:
    """Ask ``check.url`` until it is ready or the deadline passes; always at least once."""
    while True:
        check.attempts += 1
        try:
            resp = client.get(check.url, timeout=min(request_timeout_s, max(watch.remaining(), 0.2)))
            check.last_status, check.last_body, check.last_error = resp.status_code, clip(resp.text), ""
            if resp.status_code == 200 and _satisfied(check, resp.text, model):
                check.ready = True
                check.seconds_to_ready = round(watch.elapsed(), 3)
                on_ready(check)
                return
        except httpx.HTTPError as exc:
            check.last_status, check.last_body, check.last_error = None, "", describe_error(exc)
        if watch.expired():
            return
        time.sleep(min(interval_s, watch.remaining()))


def _answers_now(check: _Check) -> str:
    if check.attempts == 0:
        return f"{check.label} not asked yet"
    if check.last_status is None:
        return f"{check.label} no answer ({check.last_error or 'waiting'})"
    body = " ".join(check.last_body.split())[:100]
    return f"{check.label} {check.last_status}{f' {body}' if body else ''} ({check.attempts} tries)"


def _where(elsewhere: list[_Check]) -> str:
    """The note ' (2 checked on gpu1)' for checks that ran on the workers' own hosts ('' for none)."""
    hosts = sorted({c.checked_on for c in elsewhere if c.checked_on})
    return f" ({len(elsewhere)} checked on {', '.join(hosts)})" if hosts else ""


def _satisfied(check: _Check, text: str, model: str) -> bool:
    if check.kind != "model_card":
        return True
    try:
        cards = json.loads(text).get("data", [])
        check.models_seen = [str(card.get("id")) for card in cards if isinstance(card, dict)]
    except (ValueError, AttributeError):
        check.models_seen = []
    return model in check.models_seen


def _reason(check: _Check, model: str) -> str:
    if check.last_status is None:
        where = f" from {check.checked_on}" if check.checked_on else ""
        return f"{check.label} unreachable{where} ({check.last_error})"
    if check.kind == "model_card" and check.last_status == 200:
        return f"{check.label} does not list {model!r} (seen: {', '.join(check.models_seen) or 'none'})"
    body = " ".join(check.last_body.split())[:SUMMARY_BODY_CHARS]
    return f"{check.label} {check.last_status} {body}".rstrip()


def deadline_reason(set_s: float | None, plan: Mapping[str, Any] | None) -> str:
    """Where the readiness deadline comes from: the gate setting, the model profile, or the default."""
    if set_s is not None:
        return "readiness_deadline_s as set in the inventory or with -e"
    if (plan or {}).get("readiness_deadline_s"):
        return "the model profile (a readiness_deadline_s of the inventory overrides it)"
    return "the default (set readiness_deadline_s to change it)"


def whole_wait(result: GateResult, waited_s: float, deadline_s: float, why: str) -> GateResult:
    """Readiness as the operator sees it: the load time is the hosts' wait (`waited_s`, where the servers were
    watched while they loaded) plus the controller's checks after it, against the whole deadline and where it
    comes from; the controller's checks had what the wait left of it."""
    load_s = round(waited_s + result.seconds, 3)
    evidence = {**result.evidence, "deadline_s": deadline_s, "deadline_from": why, "load_s": load_s,
                "host_wait_s": round(waited_s, 3), "controller_deadline_s": result.evidence.get("deadline_s")}
    head = f"loaded in {load_s:.1f} s, deadline {deadline_s:g} s from {why}"
    if waited_s:
        head += f" (the hosts' wait {waited_s:.1f} s, then the controller's checks {result.seconds:.1f} s)"
    # The controller's own "ready in" counts from the end of the wait: the load time above says it whole.
    said = result.summary.split(": ", 1)[-1] if result.summary.startswith("ready in") else result.summary
    summary = f"{head}: {said}"
    if not result.passed:  # the controller's own deadline was what the wait left: say so rather than a bare figure
        left = result.evidence.get("deadline_s", 0)
        summary = f"{head}: {result.summary} (the controller's checks had the {left:g} s the wait left)"
    return result.model_copy(update={"seconds": load_s, "summary": summary, "evidence": evidence})
