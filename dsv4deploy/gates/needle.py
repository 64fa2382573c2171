"""Needle gate: a context-length x depth grid of needle-in-a-haystack questions, run concurrently.

The required length is a promise, not a filter. Every cell is sized by the server's own count
(``usage.prompt_tokens`` of that very request) and resized until it lands within ``size_tolerance``
of its target. A cell is asked up to ``needle_trials`` independent trials (another needle, phrasing
and jittered depth each, dsv4deploy.gates.haystack) and recalls by a k-of-n rule whose risks are
stated (dsv4deploy.gates.recall_rule, docs/evidence.md). The gate passes only when every cell
measured at or below ``required_tokens`` recalls AND, at every depth, a cell measured at or above
the required length (within the tolerance) recalls; a required cell the deadline left undecided
makes it inconclusive, never passed. Transport retries are counted: more than
``needle_max_retry_share`` of the requests fail the gate, so a retry cannot hide an intermittent PD
failure. A grid with no length that reaches the requirement fails without asking anything.
Longer cells feed the recall curve (share of trials recalled per length) the report plots.
This is the functional check of settings such as ``index_topk`` that the config gate can only see
as reported values.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from pydantic import BaseModel

from dsv4deploy.gates.chat import ChatReply, ReplyKind, chat, with_retries
from dsv4deploy.gates.evidence import Decision, Outcome, exact_interval
from dsv4deploy.gates.haystack import DEFAULT_CHARS_PER_TOKEN, DEPTH_JITTER, Haystack, build_haystack
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.recall_rule import RecallRule
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify

GATE = "needle"
ANSWER_CHARS = 200
CALIBRATION_MAX_TOKENS = 4096  # calibrate on a prompt big enough to hide the template overhead, yet cheap
DEFAULT_TOLERANCE = 0.02
#: Transient failures retried, as a share of the requests sent, above which the gate fails (as the soak).
DEFAULT_MAX_RETRY_SHARE = 0.05


class NeedleTrial(BaseModel):
    """One trial of a cell: its own needle, phrasing and (jittered) depth, how big it was, what came back."""

    trial: int
    depth: float  # where the fact really was (the cell's depth, jittered after the first trial)
    prompt_tokens: int | None = None  # real size from usage.prompt_tokens of the judged request
    sizes: list[int] = []  # every measured size, resizes included
    sized: bool = False  # the judged size is within the tolerance of the target
    code: str  # the value the answer must contain
    phrasing: str = ""  # the fact and the question, as asked
    recalled: bool = False
    answer: str = ""
    error: str | None = None
    status: int | None = None
    attempts: int = 0
    seconds: float = 0.0


class NeedleCell(BaseModel):
    """One grid cell: its trials and the k-of-n verdict on them (dsv4deploy.gates.recall_rule).

    ``outcome`` is ``recalled`` (the rule passed), ``missed`` (it failed), ``error`` (a trial could not be
    asked) or ``inconclusive`` (the deadline stopped it undecided; never a pass). The flat fields
    (``code``, ``answer``, ``phrasing``, ...) are those of the trial that decided a missed cell, else the
    first trial's, so a report can show one prompt per cell."""

    context_tokens: int  # target size
    depth: float
    trials: list[NeedleTrial] = []
    outcome: str = "inconclusive"
    recalled: bool = False  # the rule passed
    recalled_trials: int = 0
    asked_trials: int = 0  # trials with an answer (errors excluded)
    interval: tuple[float, float] | None = None  # exact 95 % interval of the cell's recall
    prompt_tokens: int | None = None  # median real size over the trials
    sized: bool = False
    code: str = ""
    phrasing: str = ""
    answer: str = ""
    error: str | None = None
    status: int | None = None
    attempts: int = 0
    seconds: float = 0.0
    required: bool = False
    judged: bool = True  # False: a curve cell past the requirement, asked a fixed number of trials, never judged

    @property
    def size(self) -> int:
        """Real size when the server reported it, else the target."""
        return self.prompt_tokens if self.prompt_tokens is not None else self.context_tokens

    def settle(self, rule: RecallRule, stopped: str | None) -> None:
        """Fill the verdict and the flat fields from the trials (``stopped``: why no more were asked)."""
        self.trials.sort(key=lambda t: t.trial)
        answered = [t for t in self.trials if t.error is None]
        self.attempts = sum(t.attempts for t in self.trials)
        self.seconds = round(sum(t.seconds for t in self.trials), 3)
        sizes = [t.prompt_tokens for t in self.trials if t.prompt_tokens is not None]
        self.prompt_tokens = int(statistics.median(sizes)) if sizes else None
        self.sized = bool(answered) and all(t.sized for t in answered)
        failed = next((t for t in self.trials if t.error is not None), None)
        # The verdict reads the trials in their order, up to the first gap (a trial the deadline cut), so it
        # is the rule's own sequential decision whatever order the answers came back in.
        verdict, used, recalled = rule.replay(_in_order(self.trials))
        self.asked_trials, self.recalled_trials = used, recalled
        self.interval = exact_interval(self.recalled_trials, self.asked_trials) if self.asked_trials else None
        if not self.judged:
            # The curve's cell: every answered trial counts; "curve", never a verdict a reader could take for one.
            self.asked_trials, self.recalled_trials = len(answered), sum(t.recalled for t in answered)
            self.interval = exact_interval(self.recalled_trials, self.asked_trials) if self.asked_trials else None
        if failed is not None:
            self.outcome, self.error = "error", failed.error
        elif not self.judged:
            self.outcome = "curve"
        elif verdict is Outcome.PASSED:
            self.outcome = "recalled"
        elif verdict is Outcome.FAILED:
            self.outcome = "missed"
        else:
            self.outcome = "inconclusive"
            self.error = stopped or "undecided"
        self.recalled = self.outcome == "recalled" or (
            self.outcome == "curve" and self.asked_trials > 0 and self.recalled_trials == self.asked_trials)
        shown = (failed or next((t for t in self.trials if not t.recalled), None)) if not self.recalled else None
        shown = shown or (self.trials[0] if self.trials else None)
        if shown is not None:
            self.code, self.phrasing, self.answer, self.status = shown.code, shown.phrasing, shown.answer, shown.status

    def stats(self) -> str:
        """``9/9 recalled (95% interval 66%-100%)``."""
        if not self.asked_trials or self.interval is None:
            return "no trial answered"
        low, high = self.interval
        return f"{self.recalled_trials}/{self.asked_trials} recalled (95% interval {low:.0%}-{high:.0%})"


def _in_order(trials: list[NeedleTrial]) -> list[bool]:
    """Whether each trial recalled, in trial order, up to the first one missing or unanswered."""
    out: list[bool] = []
    for t in sorted(trials, key=lambda t: t.trial):
        if t.trial != len(out) or t.error is not None:
            break
        out.append(t.recalled)
    return out


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
    rule: RecallRule | None = None,
    max_retry_share: float = DEFAULT_MAX_RETRY_SHARE,
    curve_trials: int = 1,
) -> GateResult:
    """Run the grid and judge it; ``required_tokens=0`` reports the curve without a requirement.

    Each cell is asked up to ``rule.trials`` independent trials (dsv4deploy.gates.recall_rule) and recalls
    when ``rule.min_recalled`` of them do; it stops being asked once its verdict is certain. With
    ``calibrate``, one request first measures the server's characters per token (a failure to measure
    fails the gate: there is no silent fallback). Each trial is resized up to ``max_resizes`` times to
    land within ``size_tolerance`` of its target and retried up to ``retries`` times on transient errors
    (no status, 5xx, 429, a body without choices); more retries than ``max_retry_share`` of the requests
    sent fail the gate. Cells start shortest first, at most ``concurrency`` requests at a time; cells the
    deadline left undecided are inconclusive. With a requirement, cells longer than the first length that
    reaches it are the recall curve: asked ``curve_trials`` trials each once every judged cell has been
    asked, never judged. ``progress`` gets ``(trials done, trials at most, note)``.
    """
    base = check_url(url)
    rule = rule or RecallRule()
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
    if curve_trials < 1:
        raise ValueError(f"curve_trials must be at least 1, got {curve_trials}")
    if not 0 <= max_retry_share <= 1:
        raise ValueError(f"max_retry_share must be a fraction between 0 and 1, got {max_retry_share}")
    if not served_model_name:
        raise ValueError("served_model_name must be the name clients use (--served-model-name)")

    watch = Stopwatch(deadline_s)
    tries = [0, 0]  # requests sent (retries included), and of them retries of a transient failure
    extra: dict[str, Any] = {"seed": seed, "concurrency": concurrency, "size_tolerance": size_tolerance,
                             "deadline_s": deadline_s, "chars_per_token_assumed": chars_per_token,
                             "rule": rule.risks(), "max_retry_share": max_retry_share}
    if required_tokens > lengths[-1]:
        summary = (f"needle_lengths {lengths} cannot reach the required {required_tokens} tokens: add a length "
                   f"of at least {required_tokens}; nothing was asked")
        evidence = {"required_tokens": required_tokens, "context_lengths": lengths, "depths": grid_depths,
                    "cells": [], "curve": [], **extra}
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)

    lock = threading.Lock()
    with make_client(api_key, request_timeout_s) as client:

        def ask(content: str, tokens: int) -> tuple[ChatReply, int]:
            def send() -> ChatReply:
                return chat(client, base, served_model_name, content, max_tokens=tokens,
                            timeout_s=min(request_timeout_s, max(watch.remaining(), 0.2)), extra_body=extra_body)

            reply, attempts = with_retries(send, retries, watch, sleep)
            with lock:
                tries[0] += attempts
                tries[1] += attempts - 1
            return reply, attempts

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
        # Past the first length that reaches the requirement, the grid only draws the curve.
        reach = next(n for n in lengths if n >= required_tokens)
        judged = [n for n in lengths if not required_tokens or n <= reach]
        grid = _Grid(ask, rule, seed, sizing, max_tokens, watch, progress)
        cells = grid.run(judged, [n for n in lengths if n not in judged], grid_depths, concurrency, curve_trials)

    for cell in cells:
        # The grid's own cell at the required length stays required when sizing landed it a few tokens
        # over (4000 -> 4006, within the tolerance): its miss breaks the promise, it does not just leave it unproven.
        cell.required = cell.judged and min(cell.size, cell.context_tokens) <= required_tokens
    extra["chars_per_token_used"] = round(ratio.get(), 4)
    # Transient failures retried: an intermittent PD failure a retry hides still counts here.
    extra.update({"attempts": tries[0], "transport_retries": tries[1],
                  "retry_share": round(tries[1] / tries[0], 4) if tries[0] else 0.0})
    extra["rule"] = rule.risks(sum(c.required for c in cells))
    judged = _judge(cells, lengths, grid_depths, required_tokens, size_tolerance, watch, extra, rule)
    if judged.status is not GateStatus.FAILED and tries[1] > max_retry_share * tries[0]:
        summary = (f"{tries[1]} of {tries[0]} requests were retries of a transient failure "
                   f"({extra['retry_share']:.1%}), above needle_max_retry_share {max_retry_share:g}: the path "
                   f"fails intermittently; otherwise: {judged.summary}")
        return make_result(GATE, GateStatus.FAILED, watch, summary, judged.evidence)
    return judged


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


class _Grid:
    """Asks the cells' trials: at most ``concurrency`` at once, shortest cells first, a cell no further
    than its verdict needs (never more in flight than could still decide it, never beyond its n)."""

    def __init__(self, ask: Callable[[str, int], tuple[ChatReply, int]], rule: RecallRule, seed: int,
                 sizing: _Sizing, max_tokens: int, watch: Stopwatch, progress: Progress | None) -> None:
        self.ask, self.rule, self.seed, self.sizing = ask, rule, seed, sizing
        self.max_tokens, self.watch, self.progress = max_tokens, watch, progress
        self.curve_trials = 1

    def run(self, lengths: list[int], curve: list[int], depths: list[float], concurrency: int,
            curve_trials: int) -> list[NeedleCell]:
        """Ask the judged cells (``lengths``), then the curve's (``curve``); shortest first in each."""
        cells = [NeedleCell(context_tokens=n, depth=d) for n in lengths for d in depths]
        cells += [NeedleCell(context_tokens=n, depth=d, judged=False) for n in curve for d in depths]
        self.curve_trials = curve_trials
        flying = {id(c): 0 for c in cells}
        total, done = sum(self.rule.trials if c.judged else curve_trials for c in cells), 0
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            pending: dict[Future[NeedleTrial], NeedleCell] = {}
            while True:
                while len(pending) < concurrency and not self.watch.expired():
                    cell = next((c for c in cells if self._wants(c, flying[id(c)])), None)
                    if cell is None:
                        break
                    trial = len(cell.trials) + flying[id(cell)]
                    flying[id(cell)] += 1
                    pending[pool.submit(self._ask_trial, cell.context_tokens, cell.depth, trial)] = cell
                if not pending:
                    break
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    cell = pending.pop(future)
                    flying[id(cell)] -= 1
                    result = future.result()
                    if result.error is not None and self.watch.expired():
                        continue  # cut by the deadline: no evidence either way, the cell stays undecided
                    cell.trials.append(result)
                    done += 1
                    outcome = "recalled" if result.recalled else (result.error or "missed")
                    notify(self.progress, done, total, f"{cell.context_tokens} tokens ({result.prompt_tokens} real) "
                                                       f"@ depth {result.depth:.3g}, trial {result.trial + 1}: "
                                                       f"{outcome}")
        stopped = "not decided: gate deadline reached" if self.watch.expired() else None
        for cell in cells:
            cell.settle(self.rule, stopped)
        return cells

    def _wants(self, cell: NeedleCell, flying: int) -> bool:
        """Another trial could still change the cell's verdict (an error ends the cell). The rule reads the
        trials in order, so answers that came back ahead of an earlier trial count as still out: with no
        more out than the fewest that could decide, no trial is ever asked past the decision."""
        if not cell.judged:
            return not any(t.error is not None for t in cell.trials) and len(cell.trials) + flying < self.curve_trials
        if any(t.error is not None for t in cell.trials) or len(cell.trials) + flying >= self.rule.trials:
            return False
        prefix = _in_order(cell.trials)
        recalled, ahead = sum(prefix), len(cell.trials) - len(prefix)
        return flying + ahead < self.rule.still_needed(recalled, len(prefix) - recalled)

    def _ask_trial(self, target: int, depth: float, trial: int) -> NeedleTrial:
        """One trial: its own needle (the first at the cell's depth, the rest jittered), sized to target."""
        sizing, ratio = self.sizing, self.sizing.ratio.get()
        jitter = DEPTH_JITTER if trial else 0.0

        def build(chars_per_token: float) -> Haystack:
            return build_haystack(target, depth, seed=self.seed, chars_per_token=chars_per_token, trial=trial,
                                  jitter=jitter)

        hay = build(ratio)
        result = NeedleTrial(trial=trial, depth=round(hay.depth, 4), code=hay.value, phrasing=hay.phrasing)
        if self.watch.expired():
            result.error = "not run: gate deadline reached"
            return result
        started = time.monotonic()
        for _ in range(sizing.max_resizes + 1):
            reply, attempts = self.ask(hay.content, self.max_tokens)
            result.attempts += attempts
            result.status = reply.status
            if reply.kind is not ReplyKind.OK:
                result.error = reply.error or f"{reply.status} {' '.join(reply.body.split())[:300]}"
                result.answer = clip(reply.body, 1000)
                break
            if reply.prompt_tokens is None:
                result.error = "the answer has no usage.prompt_tokens, so the cell's real size is unknown"
                break
            result.sizes.append(reply.prompt_tokens)
            _read_answer(result, hay, reply)
            learnt = ratio * target / reply.prompt_tokens  # the ratio that would have hit the target
            sizing.ratio.learn(learnt)
            result.sized = sizing.fits(reply.prompt_tokens, target)
            if result.sized or self.watch.expired():
                break
            ratio = learnt
            hay = build(ratio)
            result.code, result.phrasing = hay.value, hay.phrasing
        result.seconds = round(time.monotonic() - started, 3)
        return result


def _read_answer(cell: NeedleTrial, hay: Haystack, reply: ChatReply) -> None:
    cell.prompt_tokens = reply.prompt_tokens
    # The answer is the content; a reasoning model that wrote the value only while thinking still saw it.
    cell.answer = reply.content.strip()[:ANSWER_CHARS] or f"[reasoning] {reply.reasoning.strip()[:ANSWER_CHARS]}"
    cell.recalled = hay.value.upper() in f"{reply.content}\n{reply.reasoning}".upper()


def recall_curve(cells: list[NeedleCell]) -> list[dict[str, Any]]:
    """Per target length: real sizes seen, the cells that passed the rule, and the share of trials that
    recalled (``fraction``) with its exact interval."""
    curve = []
    for target in sorted({c.context_tokens for c in cells}):
        row = [c for c in cells if c.context_tokens == target]
        sizes = [c.prompt_tokens for c in row if c.prompt_tokens is not None]
        asked = sum(c.asked_trials for c in row)
        recalled = sum(c.recalled_trials for c in row)
        low, high = exact_interval(recalled, asked)
        curve.append(
            {
                "context_tokens": target,
                "prompt_tokens": int(statistics.median(sizes)) if sizes else None,
                "cells": len(row),
                "cells_recalled": sum(c.recalled for c in row),
                "recalled": recalled,
                "trials": asked,
                "errors": sum(c.outcome == "error" for c in row),
                "inconclusive": sum(c.outcome == "inconclusive" for c in row),
                "fraction": round(recalled / asked, 4) if asked else 0.0,
                "interval_95": [round(low, 4), round(high, 4)],
            }
        )
    return curve


def _what(c: NeedleCell) -> str:
    return (f"cell {c.context_tokens} tokens ({c.prompt_tokens} real) at depth {c.depth:g}, {c.stats()}; "
            f"asked: {c.phrasing}")


def _judge(cells: list[NeedleCell], lengths: list[int], depths: list[float], required_tokens: int,
           tolerance: float, watch: Stopwatch, extra: dict[str, Any], rule: RecallRule) -> GateResult:
    curve = recall_curve(cells)
    required = [c for c in cells if c.required]
    order = sorted(required, key=lambda c: (c.context_tokens, c.depth))
    failing = [c for c in order if c.outcome in ("missed", "error")]
    undecided = [c for c in order if c.outcome == "inconclusive"]
    reach = required_tokens * (1 - tolerance)
    long_cells = {d: [c for c in cells if c.judged and c.depth == d and (c.prompt_tokens or 0) >= reach]
                  for d in depths}
    unproven = [d for d in depths if not any(c.recalled for c in long_cells[d])]
    open_depths = [d for d in unproven if any(c.outcome == "inconclusive" for c in long_cells[d])]
    beyond = [p for p in curve if p["context_tokens"] > required_tokens]
    asked = sum(c.asked_trials for c in required)
    recalled = sum(c.recalled_trials for c in required)
    evidence: dict[str, Any] = {
        "required_tokens": required_tokens,
        "context_lengths": lengths,
        "depths": depths,
        "cells": [cell.model_dump() for cell in cells],
        "curve": curve,
        "first_failing": failing[0].model_dump() if failing else None,
        "required_trials": asked,
        "required_recalled": recalled,
        "required_interval_95": [round(x, 4) for x in exact_interval(recalled, asked)],
        **extra,
    }
    curve_text = ", ".join(f"{p['context_tokens']}: {p['fraction']:.0%}" for p in beyond) or "none"
    if required_tokens > 0 and (failing or unproven or undecided):
        evidence["failures"] = [
            {"what": _what(c), "status": c.status, "expected": c.code,
             "body": c.answer if c.error is None else f"{c.error}\n{c.answer}".strip()}
            for c in failing
        ]
        evidence["unproven_depths"] = unproven
        evidence["undecided_cells"] = [_what(c) for c in undecided]
    judged_by = f"rule {rule.describe()}"
    if failing and required_tokens > 0:
        first = failing[0]
        why = f"error {first.error}" if first.error else f"{first.stats()}, e.g. answer {first.answer[:80]!r}"
        summary = (
            f"{len(failing)} of {len(required)} cells within {required_tokens} tokens missed the needle; "
            f"first: {first.context_tokens} tokens ({first.prompt_tokens} real) at depth {first.depth:g}, "
            f"expected {first.code}, {why} ({judged_by})"
        )
        return _verdict(GateStatus.FAILED, summary, evidence, watch, rule)
    if required_tokens > 0 and (undecided or open_depths):
        names = [f"{c.context_tokens} @ {c.depth:g} ({c.stats()})" for c in undecided]
        names += [f"depth {d:g} at {required_tokens} tokens" for d in open_depths]
        summary = (f"{len(names)} required cells undecided when the deadline came ({', '.join(names[:4])}"
                   f"{', ...' if len(names) > 4 else ''}): needle_deadline_s too short for {judged_by}")
        return _verdict(GateStatus.INCONCLUSIVE, summary, evidence, watch, rule)
    if required_tokens > 0 and unproven:
        tried = sorted({f"{c.context_tokens}->{c.prompt_tokens}" for c in long_cells[unproven[0]]})
        summary = (f"no cell of at least {required_tokens} tokens (within {tolerance:.0%}) recalled at depth "
                   f"{', '.join(f'{d:g}' for d in unproven)}, so the requirement is unproven"
                   f" (grid {lengths}; cells that long at depth {unproven[0]:g}: {', '.join(tried) or 'none'}; "
                   f"{judged_by})")
        return _verdict(GateStatus.FAILED, summary, evidence, watch, rule)
    lead = (
        f"all {len(required)} cells within {required_tokens} tokens recalled ({recalled}/{asked} trials), and a "
        f"cell of at least {required_tokens} at every depth, by {judged_by}"
        if required_tokens > 0
        else "no requirement"
    )
    return _verdict(GateStatus.PASSED, f"{lead}; curve beyond: {curve_text}", evidence, watch, rule)


OUTCOMES = {GateStatus.PASSED: Outcome.PASSED, GateStatus.FAILED: Outcome.FAILED,
            GateStatus.INCONCLUSIVE: Outcome.INCONCLUSIVE}


def _verdict(status: GateStatus, summary: str, evidence: dict[str, Any], watch: Stopwatch,
             rule: RecallRule) -> GateResult:
    """The result, with the requirement's decision as evidence: recalled trials of the required cells' trials
    with their exact interval, and the rule's risks for that many required cells."""
    asked, recalled = evidence["required_trials"], evidence["required_recalled"]
    interval = exact_interval(recalled, asked) if asked else None
    decision = Decision(OUTCOMES[status], summary, recalled, asked, interval, risks=evidence["rule"])
    return make_result(GATE, status, watch, summary, {**evidence, "decision": decision.evidence()})
