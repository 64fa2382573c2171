"""Needle gate: a context-length x depth grid of needle-in-a-haystack questions, run concurrently.

Every cell whose real prompt size (``usage.prompt_tokens``) is at most ``required_tokens`` must
recall its code; longer cells only feed the recall curve (fraction recalled per length), which is
what the report plots. This is the functional check of settings such as ``index_topk`` that the
config gate can only see as reported values.
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
from dsv4deploy.gates.haystack import DEFAULT_CHARS_PER_TOKEN, build_haystack
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify

GATE = "needle"
ANSWER_CHARS = 200
CALIBRATION_MAX_TOKENS = 4096  # calibrate on a prompt big enough to hide the template overhead, yet cheap


class NeedleCell(BaseModel):
    """One grid cell: what was asked, how big it really was, and whether the code came back."""

    context_tokens: int  # target size
    prompt_tokens: int | None = None  # real size from usage.prompt_tokens
    depth: float
    code: str
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
    calibrate: bool = True,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    request_timeout_s: float = 300.0,
    extra_body: dict[str, Any] | None = None,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Run the grid and judge it; ``required_tokens=0`` reports the curve without a requirement.

    With ``calibrate``, one request first measures the server's characters per token so targets
    land near their sizes. Each cell is retried up to ``retries`` times on transient errors (no
    status, 5xx, 429, a body without choices). Cells start shortest first, at most ``concurrency``
    at a time; cells the deadline did not reach are reported as not run. ``progress`` gets
    ``(cells done, cells total, note)``.
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
    if not served_model_name:
        raise ValueError("served_model_name must be the name clients use (--served-model-name)")

    watch = Stopwatch(deadline_s)
    with make_client(api_key, request_timeout_s) as client:

        def ask(content: str, tokens: int) -> ChatReply:
            return chat(
                client,
                base,
                served_model_name,
                content,
                max_tokens=tokens,
                timeout_s=min(request_timeout_s, max(watch.remaining(), 0.2)),
                extra_body=extra_body,
            )

        calibration = _calibrate(ask, lengths[0], seed, chars_per_token) if calibrate else None
        ratio = calibration["chars_per_token"] if calibration else chars_per_token
        cells = _run_grid(
            ask, lengths, grid_depths, seed, ratio, concurrency, max_tokens, retries, watch, progress, sleep
        )

    for cell in cells:
        cell.required = cell.size <= required_tokens
    return _judge(
        cells,
        lengths,
        required_tokens,
        watch,
        {
            "seed": seed,
            "concurrency": concurrency,
            "chars_per_token_assumed": chars_per_token,
            "chars_per_token_used": round(ratio, 4),
            "calibration": calibration,
            "deadline_s": deadline_s,
        },
    )


def _calibrate(ask: Callable[[str, int], ChatReply], smallest: int, seed: int, assumed: float) -> dict[str, Any]:
    """Measure characters per token with one request; keep the assumed ratio if it fails."""
    target = min(max(smallest, 256), CALIBRATION_MAX_TOKENS)
    hay = build_haystack(target, 0.5, seed=seed, chars_per_token=assumed)
    reply = ask(hay.content, 1)
    if reply.kind is not ReplyKind.OK or not reply.prompt_tokens:
        return {
            "chars_per_token": assumed,
            "ok": False,
            "status": reply.status,
            "body": clip(reply.body, 1000),
            "error": reply.error or "no usage.prompt_tokens",
        }
    return {
        "chars_per_token": len(hay.content) / reply.prompt_tokens,
        "ok": True,
        "chars": len(hay.content),
        "prompt_tokens": reply.prompt_tokens,
    }


def _run_grid(
    ask: Callable[[str, int], ChatReply],
    lengths: list[int],
    depths: list[float],
    seed: int,
    ratio: float,
    concurrency: int,
    max_tokens: int,
    retries: int,
    watch: Stopwatch,
    progress: Progress | None,
    sleep: Callable[[float], None],
) -> list[NeedleCell]:
    plan = [(n, d) for n in lengths for d in depths]  # shortest first: the required cells finish first
    lock = threading.Lock()
    done = [0]

    def run_cell(target: int, depth: float) -> NeedleCell:
        cell = _ask_cell(ask, target, depth, seed, ratio, max_tokens, retries, watch, sleep)
        with lock:
            done[0] += 1
            outcome = "recalled" if cell.recalled else (cell.error or "missed")
            notify(progress, done[0], len(plan), f"{target} tokens @ depth {depth:g}: {outcome}")
        return cell

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(run_cell, n, d) for n, d in plan]
        return [future.result() for future in futures]


def _ask_cell(
    ask: Callable[[str, int], ChatReply],
    target: int,
    depth: float,
    seed: int,
    ratio: float,
    max_tokens: int,
    retries: int,
    watch: Stopwatch,
    sleep: Callable[[float], None],
) -> NeedleCell:
    hay = build_haystack(target, depth, seed=seed, chars_per_token=ratio)
    cell = NeedleCell(context_tokens=target, depth=depth, code=hay.code)
    if watch.expired():
        cell.error = "not run: gate deadline reached"
        return cell
    started = time.monotonic()
    reply, cell.attempts = with_retries(lambda: ask(hay.content, max_tokens), retries, watch, sleep)
    cell.seconds = round(time.monotonic() - started, 3)
    cell.status = reply.status
    if reply.kind is not ReplyKind.OK:
        cell.error = reply.error or f"{reply.status} {' '.join(reply.body.split())[:300]}"
        cell.answer = clip(reply.body, 1000)
        return cell
    cell.prompt_tokens = reply.prompt_tokens
    # The answer is the content; a reasoning model that wrote the code only while thinking still saw it.
    cell.answer = reply.content.strip()[:ANSWER_CHARS] or f"[reasoning] {reply.reasoning.strip()[:ANSWER_CHARS]}"
    cell.recalled = hay.code.upper() in f"{reply.content}\n{reply.reasoning}".upper()
    return cell


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


def _judge(
    cells: list[NeedleCell], lengths: list[int], required_tokens: int, watch: Stopwatch, extra: dict[str, Any]
) -> GateResult:
    curve = recall_curve(cells)
    required = [c for c in cells if c.required]
    missed = sorted((c for c in required if not c.recalled), key=lambda c: (c.context_tokens, c.depth))
    beyond = [p for p in curve if any(c.context_tokens == p["context_tokens"] and not c.required for c in cells)]
    evidence: dict[str, Any] = {
        "required_tokens": required_tokens,
        "context_lengths": lengths,
        "depths": sorted({c.depth for c in cells}),
        "cells": [cell.model_dump() for cell in cells],
        "curve": curve,
        "first_failing": missed[0].model_dump() if missed else None,
        **extra,
    }
    curve_text = ", ".join(f"{p['context_tokens']}: {p['fraction']:.0%}" for p in beyond) or "none"
    if missed:
        first = missed[0]
        evidence["failures"] = [
            {
                "what": f"cell {c.context_tokens} tokens ({c.prompt_tokens} real) at depth {c.depth:g}",
                "status": c.status,
                "body": c.answer if c.error is None else f"{c.error}\n{c.answer}".strip(),
                "expected": c.code,
            }
            for c in missed
        ]
        why = f"error {first.error}" if first.error else f"answer {first.answer[:80]!r}"
        summary = (
            f"{len(missed)} of {len(required)} cells within {required_tokens} tokens missed the needle; "
            f"first: {first.context_tokens} tokens ({first.prompt_tokens} real) at depth {first.depth:g}, "
            f"expected {first.code}, {why}"
        )
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
    if required_tokens > 0 and not required:
        summary = f"no cell measured within {required_tokens} tokens, so the requirement is unproven"
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
    lead = (
        f"all {len(required)} cells within {required_tokens} tokens recalled"
        if required_tokens > 0
        else "no requirement"
    )
    return make_result(GATE, GateStatus.PASSED, watch, f"{lead}; curve beyond: {curve_text}", evidence)
