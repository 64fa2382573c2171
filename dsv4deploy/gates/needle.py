"""Needle gate: a context-length x depth grid of needle-in-a-haystack questions, run concurrently.

The required length is a promise, not a filter. Every cell is sized by the server's own count
(``usage.prompt_tokens`` of that very request) and resized until it lands within ``size_tolerance``
of its target. The gate passes only when every cell measured at or below ``required_tokens``
recalls AND, at every depth, a cell measured at or above the required length (within the
tolerance) recalls; a grid with no length that reaches the requirement fails without asking
anything. Longer cells feed the recall curve (fraction recalled per length) the report plots.
This is the functional check of settings such as ``index_topk`` that the config gate can only see
as reported values.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

from dsv4deploy.gates.chat import ChatReply, ReplyKind, chat, with_retries
from dsv4deploy.gates.haystack import DEFAULT_CHARS_PER_TOKEN, Haystack, build_haystack
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify

GATE = "needle"
ANSWER_CHARS = 200
CALIBRATION_MAX_TOKENS = 4096  # calibrate on a prompt big enough to hide the template overhead, yet cheap
DEFAULT_TOLERANCE = 0.02


class NeedleCell(BaseModel):
    """One grid cell: what was asked, how big it really was, and whether the value came back."""

    context_tokens: int  # target size
    prompt_tokens: int | None = None  # real size from usage.prompt_tokens of the judged request
    sizes: list[int] = []  # every measured size, resizes included
    sized: bool = False  # the judged size is within the tolerance of the target
    depth: float
    code: str  # the value the answer must contain
    phrasing: str = ""  # the fact and the question, as asked
    recalled: bool = False
    answer: str = ""
    error: str | None = None
    status: int | None = None
    attempts: int = 0
    seconds: float = 0.0
    required: bool = False

    @property
    def size(self) -> int:
        """Real size when the server reported it, else the target."""
        return self.prompt_tokens if self.prompt_tokens is not None else self.context_tokens


class _Ratio:
    """Characters per token, learnt from every measured request and shared by the cells."""

    def __init__(self, value: float) -> None:
        self._value, self._lock = value, threading.Lock()

    def get(self) -> float:
        with self._lock:
            return self._value

    def learn(self, value: float) -> None:
        with self._lock:
            self._value = value


def run_needle(
    url: str,
    served_model_name: str,
    *,
    context_lengths: list[int],
    depths: list[float],
    required_tokens: int,
    deadline_s: float,
    concurrency: int = 4,
    seed: int = 0,
    api_key: str | None = None,
    max_tokens: int = 32,
    retries: int = 2,
    size_tolerance: float = DEFAULT_TOLERANCE,
    max_resizes: int = 4,
    calibrate: bool = True,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    request_timeout_s: float = 300.0,
    extra_body: dict[str, Any] | None = None,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Run the grid and judge it; ``required_tokens=0`` reports the curve without a requirement.

    With ``calibrate``, one request first measures the server's characters per token (a failure
    to measure fails the gate: there is no silent fallback). Each cell is resized up to
    ``max_resizes`` times to land within ``size_tolerance`` of its target and retried up to
    ``retries`` times on transient errors (no status, 5xx, 429, a body without choices). Cells
    start shortest first, at most ``concurrency`` at a time; cells the deadline did not reach are
    reported as not run. ``progress`` gets ``(cells done, cells total, note)``.
    """
    base = check_url(url)
    lengths = sorted(set(context_lengths))
    grid_depths = sorted(set(depths))
    if not lengths or any(n <= 0 for n in lengths):
        raise ValueError(f"context_lengths must be positive token counts, got {context_lengths}")
    if not grid_depths or any(not 0.0 <= d <= 1.0 for d in grid_depths):
        raise ValueError(f"depths must be fractions between 0 and 1, got {depths}")
    if required_tokens < 0 or deadline_s <= 0 or concurrency < 1 or retries < 0 or max_tokens < 1:
        raise ValueError("need required_tokens >= 0, deadline_s > 0, concurrency >= 1, retries >= 0")
    if not 0 < size_tolerance < 0.5 or max_resizes < 0:
        raise ValueError(f"size_tolerance must be a fraction between 0 and 0.5, got {size_tolerance}")
    if not served_model_name:
        raise ValueError("served_model_name must be the name clients use (--served-model-name)")

    watch = Stopwatch(deadline_s)
    extra = {"seed": seed, "concurrency": concurrency, "size_tolerance": size_tolerance, "deadline_s": deadline_s,
             "chars_per_token_assumed": chars_per_token}
    if required_tokens > lengths[-1]:
        summary = (f"needle_lengths {lengths} cannot reach the required {required_tokens} tokens: add a length "
                   f"of at least {required_tokens}; nothing was asked")
        evidence = {"required_tokens": required_tokens, "context_lengths": lengths, "depths": grid_depths,
                    "cells": [], "curve": [], **extra}
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)

    with make_client(api_key, request_timeout_s) as client:

        def ask(content: str, tokens: int) -> tuple[ChatReply, int]:
            def send() -> ChatReply:
                return chat(client, base, served_model_name, content, max_tokens=tokens,
                            timeout_s=min(request_timeout_s, max(watch.remaining(), 0.2)), extra_body=extra_body)

            return with_retries(send, retries, watch, sleep)

        ratio = _Ratio(chars_per_token)
        if calibrate:
            calibration = _calibrate(ask, lengths[0], seed, chars_per_token)
            extra["calibration"] = calibration
            if not calibration["ok"]:
                summary = f"cannot measure the server's token count: {calibration['error']}"
                evidence = {"required_tokens": required_tokens, "context_lengths": lengths, "depths": grid_depths,
                            "cells": [], "curve": [], "failures": [calibration["failure"]], **extra}
                return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
            ratio.learn(calibration["chars_per_token"])
        sizing = _Sizing(size_tolerance, max_resizes, ratio)
        cells = _run_grid(ask, lengths, grid_depths, seed, sizing, concurrency, max_tokens, watch, progress)

    for cell in cells:
        cell.required = cell.size <= required_tokens
    extra["chars_per_token_used"] = round(ratio.get(), 4)
    return _judge(cells, lengths, grid_depths, required_tokens, size_tolerance, watch, extra)


def _calibrate(ask: Callable[[str, int], tuple[ChatReply, int]], smallest: int, seed: int,
               assumed: float) -> dict[str, Any]:
    """Measure characters per token with one request (retried on transient errors)."""
    target = min(max(smallest, 256), CALIBRATION_MAX_TOKENS)
    hay = build_haystack(target, 0.5, seed=seed, chars_per_token=assumed)
    reply, _ = ask(hay.content, 1)
    if reply.kind is not ReplyKind.OK or not reply.prompt_tokens:
        error = reply.error or (f"status {reply.status}" if reply.kind is not ReplyKind.OK
                                else "the answer has no usage.prompt_tokens")
        failure = reply.failure(f"calibration request of {target} tokens")
        return {"ok": False, "error": error, "failure": failure}
    return {"ok": True, "chars_per_token": len(hay.content) / reply.prompt_tokens, "chars": len(hay.content),
            "prompt_tokens": reply.prompt_tokens}


class _Sizing:
    """How cells reach their size: tolerance, resizes allowed, the shared ratio."""

    def __init__(self, tolerance: float, max_resizes: int, ratio: _Ratio) -> None:
        self.tolerance, self.max_resizes, self.ratio = tolerance, max_resizes, ratio

    def fits(self, size: int, target: int) -> bool:
        return abs(size - target) <= self.tolerance * target


def _run_grid(
    ask: Callable[[str, int], tuple[ChatReply, int]],
    lengths: list[int],
    depths: list[float],
    seed: int,
    sizing: _Sizing,
    concurrency: int,
    max_tokens: int,
    watch: Stopwatch,
    progress: Progress | None,
) -> list[NeedleCell]:
    plan = [(n, d) for n in lengths for d in depths]  # shortest first: the required cells finish first
    lock = threading.Lock()
    done = [0]

    def run_cell(target: int, depth: float) -> NeedleCell:
        cell = _ask_cell(ask, target, depth, seed, sizing, max_tokens, watch)
        with lock:
            done[0] += 1
            outcome = "recalled" if cell.recalled else (cell.error or "missed")
            notify(progress, done[0], len(plan), f"{target} tokens ({cell.prompt_tokens} real) @ depth {depth:g}: "
                                                 f"{outcome}")
        return cell

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(run_cell, n, d) for n, d in plan]
        return [future.result() for future in futures]


def _ask_cell(
    ask: Callable[[str, int], tuple[ChatReply, int]],
    target: int,
    depth: float,
    seed: int,
    sizing: _Sizing,
    max_tokens: int,
    watch: Stopwatch,
) -> NeedleCell:
    ratio = sizing.ratio.get()
    hay = build_haystack(target, depth, seed=seed, chars_per_token=ratio)
    cell = NeedleCell(context_tokens=target, depth=depth, code=hay.value, phrasing=hay.phrasing)
    if watch.expired():
        cell.error = "not run: gate deadline reached"
        return cell
    started = time.monotonic()
    for _ in range(sizing.max_resizes + 1):
        reply, attempts = ask(hay.content, max_tokens)
        cell.attempts += attempts
        cell.status = reply.status
        if reply.kind is not ReplyKind.OK:
            cell.error = reply.error or f"{reply.status} {' '.join(reply.body.split())[:300]}"
            cell.answer = clip(reply.body, 1000)
            break
        if reply.prompt_tokens is None:
            cell.error = "the answer has no usage.prompt_tokens, so the cell's real size is unknown"
            break
        cell.sizes.append(reply.prompt_tokens)
        _read_answer(cell, hay, reply)
        learnt = ratio * target / reply.prompt_tokens  # the ratio that would have hit the target
        sizing.ratio.learn(learnt)
        cell.sized = sizing.fits(reply.prompt_tokens, target)
        if cell.sized or watch.expired():
            break
        ratio = learnt
        hay = build_haystack(target, depth, seed=seed, chars_per_token=ratio)
        cell.code, cell.phrasing = hay.value, hay.phrasing
    cell.seconds = round(time.monotonic() - started, 3)
    return cell


def _read_answer(cell: NeedleCell, hay: Haystack, reply: ChatReply) -> None:
    cell.prompt_tokens = reply.prompt_tokens
    # The answer is the content; a reasoning model that wrote the value only while thinking still saw it.
    cell.answer = reply.content.strip()[:ANSWER_CHARS] or f"[reasoning] {reply.reasoning.strip()[:ANSWER_CHARS]}"
    cell.recalled = hay.value.upper() in f"{reply.content}\n{reply.reasoning}".upper()


def recall_curve(cells: list[NeedleCell]) -> list[dict[str, Any]]:
    """Per target length: real sizes seen and the fraction of cells that recalled."""
    curve = []
    for target in sorted({c.context_tokens for c in cells}):
        row = [c for c in cells if c.context_tokens == target]
        sizes = [c.prompt_tokens for c in row if c.prompt_tokens is not None]
        recalled = sum(c.recalled for c in row)
        curve.append(
            {
                "context_tokens": target,
                "prompt_tokens": int(statistics.median(sizes)) if sizes else None,
                "cells": len(row),
                "recalled": recalled,
                "errors": sum(c.error is not None for c in row),
                "fraction": round(recalled / len(row), 4),
            }
        )
    return curve


def _what(c: NeedleCell) -> str:
    return f"cell {c.context_tokens} tokens ({c.prompt_tokens} real) at depth {c.depth:g}; asked: {c.phrasing}"


def _judge(cells: list[NeedleCell], lengths: list[int], depths: list[float], required_tokens: int,
           tolerance: float, watch: Stopwatch, extra: dict[str, Any]) -> GateResult:
    curve = recall_curve(cells)
    required = [c for c in cells if c.required]
    failing = sorted((c for c in required if not c.recalled or c.error), key=lambda c: (c.context_tokens, c.depth))
    reach = required_tokens * (1 - tolerance)
    unproven = [d for d in depths if not any(
        c.depth == d and c.error is None and c.recalled and (c.prompt_tokens or 0) >= reach for c in cells)]
    beyond = [p for p in curve if p["context_tokens"] > required_tokens]
    evidence: dict[str, Any] = {
        "required_tokens": required_tokens,
        "context_lengths": lengths,
        "depths": depths,
        "cells": [cell.model_dump() for cell in cells],
        "curve": curve,
        "first_failing": failing[0].model_dump() if failing else None,
        **extra,
    }
    curve_text = ", ".join(f"{p['context_tokens']}: {p['fraction']:.0%}" for p in beyond) or "none"
    if required_tokens > 0 and (failing or unproven):
        evidence["failures"] = [
            {"what": _what(c), "status": c.status, "expected": c.code,
             "body": c.answer if c.error is None else f"{c.error}\n{c.answer}".strip()}
            for c in failing
        ]
        evidence["unproven_depths"] = unproven
    if failing and required_tokens > 0:
        first = failing[0]
        why = f"error {first.error}" if first.error else f"answer {first.answer[:80]!r}"
        summary = (
            f"{len(failing)} of {len(required)} cells within {required_tokens} tokens missed the needle; "
            f"first: {first.context_tokens} tokens ({first.prompt_tokens} real) at depth {first.depth:g}, "
            f"expected {first.code}, {why}"
        )
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
    if required_tokens > 0 and unproven:
        tried = sorted({f"{c.context_tokens}->{c.prompt_tokens}" for c in cells if c.depth == unproven[0]
                        and (c.prompt_tokens or 0) >= reach})
        summary = (f"no cell of at least {required_tokens} tokens (within {tolerance:.0%}) recalled at depth "
                   f"{', '.join(f'{d:g}' for d in unproven)}, so the requirement is unproven"
                   f" (grid {lengths}; cells that long at depth {unproven[0]:g}: {', '.join(tried) or 'none'})")
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
    lead = (
        f"all {len(required)} cells within {required_tokens} tokens recalled, and a cell of at least "
        f"{required_tokens} at every depth"
        if required_tokens > 0
        else "no requirement"
    )
    return make_result(GATE, GateStatus.PASSED, watch, f"{lead}; curve beyond: {curve_text}", evidence)
