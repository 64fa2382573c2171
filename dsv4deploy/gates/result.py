"""The one shape every gate returns, and small helpers to build it."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: ``progress(done, total, note)``: called by long gates so a caller can show where they are;
#: ``total`` is 0 when it is not known in advance (smoke counts tries).
Progress = Callable[[int, int, str], None]

#: Longest body kept per failed try: enough for any sglang/router error, bounded for the report.
BODY_LIMIT = 4000


class GateStatus(StrEnum):
    """Outcome of a gate."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    # Ran, but the evidence did not decide (the soak's budget or deadline spent, the bake: no traffic);
    # neither passed nor failed. The deploy refuses it unless dsv4_gates_inconclusive is pass.
    INCONCLUSIVE = "inconclusive"
    # Could not measure (the bake: metrics unreadable), kept apart from inconclusive as Argo Rollouts does;
    # never a pass.
    ERROR = "error"


class GateResult(BaseModel):
    """What a gate found: a verdict, one human line, and JSON-able evidence.

    ``evidence["failures"]``, when present, is a list of ``{"what", "status", "body"}`` mappings:
    the raw answers of everything that went wrong, which the report prints verbatim.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    status: GateStatus
    seconds: float = Field(ge=0)
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when the gate passed (a skipped gate did not pass)."""
        return self.status is GateStatus.PASSED


class Stopwatch:
    """Monotonic elapsed time and a deadline, shared by a gate's helpers."""

    def __init__(self, deadline_s: float | None = None) -> None:
        self._start = time.monotonic()
        self.deadline_s = deadline_s

    def elapsed(self) -> float:
        """Seconds since the stopwatch started."""
        return time.monotonic() - self._start

    def remaining(self) -> float:
        """Seconds left before the deadline (infinite without one, never negative)."""
        if self.deadline_s is None:
            return float("inf")
        return max(0.0, self.deadline_s - self.elapsed())

    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self.remaining() <= 0.0


def make_result(name: str, status: GateStatus, watch: Stopwatch, summary: str, evidence: dict[str, Any]) -> GateResult:
    """Build a :class:`GateResult` whose ``seconds`` is the stopwatch's elapsed time."""
    return GateResult(name=name, status=status, seconds=round(watch.elapsed(), 3), summary=summary, evidence=evidence)


def skipped(name: str, reason: str) -> GateResult:
    """A gate that did not run, with the reason as its summary."""
    return GateResult(name=name, status=GateStatus.SKIPPED, seconds=0.0, summary=reason, evidence={})


def clip(text: str, limit: int = BODY_LIMIT) -> str:
    """Shorten ``text`` to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def notify(progress: Progress | None, done: int, total: int, note: str) -> None:
    """Call the progress callback if there is one."""
    if progress is not None:
        progress(done, total, note)
