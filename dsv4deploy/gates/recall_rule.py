"""The needle's per-cell rule: a cell recalls when enough of its independent trials do, judged in trial order.

Each trial of a cell is its own prompt (another needle, phrasing, filler order and a depth jittered around
the cell's, dsv4deploy.gates.haystack), so the trials are independent draws of the cell's true recall ``p``.
The rule is a truncated sequential test read in trial order: after ``m`` misses a cell passes once
``pass_early[m]`` trials recalled (``min_recalled`` once ``m`` is past the schedule) and fails at the
``trials - min_recalled + 1``-th miss. Without ``pass_early`` (the default for any other trials or
min_recalled than the defaults) it is the plain ``min_recalled`` of ``trials`` rule, curtailed.

The defaults (pass at 4 recalled with no miss, 9 with one, 12 with two, 14 with three, 15 of 19; fail at the
fifth miss) were chosen as the cheapest such schedule for a clean cell whose risks are no worse than the
former 9-of-12 rule's at both design points, a cell that recalls :data:`CLEAN_RECALL` (90 %) and one that
recalls :data:`BAD_RECALL` (50 %): they pass with probability 0.9757 (was 0.9744) and 0.0727 (was 0.0730),
and a clean cell costs 4 requests where it cost 9. The risks are exact sums over the rule's own decision
(:meth:`RecallRule.pass_probability`: dsv4deploy.gates.sprt_oc's dynamic programming over the counts);
docs/evidence.md has the table (``python -m dsv4deploy.gates.oc``). A cell the deadline stopped before a
bound is undecided (``inconclusive``), never a pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from dsv4deploy.gates.evidence import Outcome
from dsv4deploy.gates.sprt_oc import OC, counts_oc

#: A cell that recalls this often should pass (the first design point).
CLEAN_RECALL = 0.9
#: A cell that recalls this often should fail (the second design point): a coin flip is not recall.
BAD_RECALL = 0.5
DEFAULT_TRIALS = 19
DEFAULT_MIN_RECALLED = 15
#: Recalled trials that pass a cell with 0, 1, 2, 3 misses so far.
DEFAULT_PASS_EARLY = (4, 9, 12, 14)


@dataclass(frozen=True)
class RecallRule:
    """A cell passes once ``pass_early[m]`` trials recalled with ``m`` missed (``min_recalled`` past the
    schedule) and fails once more than ``trials - min_recalled`` missed."""

    trials: int = DEFAULT_TRIALS
    min_recalled: int = DEFAULT_MIN_RECALLED
    #: None: :data:`DEFAULT_PASS_EARLY` with the default trials and min_recalled, else none (a plain k of n).
    pass_early: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.pass_early is None:
            default = (self.trials, self.min_recalled) == (DEFAULT_TRIALS, DEFAULT_MIN_RECALLED)
            object.__setattr__(self, "pass_early", DEFAULT_PASS_EARLY if default else ())
        if self.trials < 1 or not 1 <= self.min_recalled <= self.trials:
            raise ValueError(f"need 1 <= needle_min_recalled <= needle_trials (got {self.min_recalled} of "
                             f"{self.trials})")
        steps = [*self.early, self.min_recalled]
        if len(self.early) > self.trials - self.min_recalled or steps[0] < 1 or \
                any(a > b for a, b in pairwise(steps)):
            raise ValueError(
                f"needle_pass_early {list(self.early)} must rise from 1 to at most needle_min_recalled "
                f"{self.min_recalled}, one entry per miss a cell may have (at most {self.trials - self.min_recalled}"
                f" with {self.min_recalled} of {self.trials}); fix: [] for the plain rule")

    @property
    def early(self) -> tuple[int, ...]:
        """The early-pass schedule (empty for a plain k of n)."""
        return self.pass_early or ()

    @property
    def max_missed(self) -> int:
        """Misses a cell may have and still pass."""
        return self.trials - self.min_recalled

    def needed(self, missed: int) -> int:
        """Recalled trials that pass a cell with ``missed`` misses."""
        return self.early[missed] if missed < len(self.early) else self.min_recalled

    def state(self, recalled: int, missed: int) -> Outcome | None:
        """PASSED once enough trials recalled for the misses so far, FAILED once too many missed, else None."""
        if missed <= self.max_missed and recalled >= self.needed(missed):
            return Outcome.PASSED
        if missed > self.max_missed:
            return Outcome.FAILED
        return None

    def still_needed(self, recalled: int, missed: int) -> int:
        """The fewest further trials that could decide the cell (0 once decided)."""
        if self.state(recalled, missed) is not None:
            return 0
        return min(self.needed(missed) - recalled, self.max_missed + 1 - missed)

    def replay(self, recalls: Iterable[bool]) -> tuple[Outcome | None, int, int]:
        """The decision on trials read in order: (outcome or None, trials it used, of them recalled)."""
        recalled = missed = 0
        for ok in recalls:
            if self.state(recalled, missed) is not None:
                break
            recalled, missed = recalled + ok, missed + (not ok)
        return self.state(recalled, missed), recalled + missed, recalled

    def _oc(self, recall: float) -> OC:
        """The exact sums over the rule's own decision (dsv4deploy.gates.sprt_oc): a recall is the event."""
        return counts_oc(lambda trials, recalled: self.state(recalled, trials - recalled), recall, self.trials)

    def pass_probability(self, recall: float) -> float:
        """P(a cell passes | it recalls with probability ``recall``): exact."""
        return self._oc(recall).passed

    def expected_trials(self, recall: float) -> float:
        """Mean trials a cell of true recall ``recall`` is asked: exact."""
        return self._oc(recall).mean_trials

    def risks(self, cells: int = 1) -> dict[str, Any]:
        """The design: per cell, and for ``cells`` required cells judged together (every one must pass)."""
        clean, bad = self.pass_probability(CLEAN_RECALL), self.pass_probability(BAD_RECALL)
        return {
            "trials": self.trials,
            "min_recalled": self.min_recalled,
            "pass_early": list(self.early),
            "clean_recall": CLEAN_RECALL,
            "bad_recall": BAD_RECALL,
            # a cell that recalls CLEAN_RECALL fails with risk alpha; one at BAD_RECALL passes with risk beta
            "cell_pass_at_clean": round(clean, 4),
            "cell_pass_at_bad": round(bad, 4),
            "alpha": round(1 - clean, 4),
            "beta": round(bad, 4),
            "required_cells": cells,
            # every required cell at CLEAN_RECALL: the requirement passes with this probability
            "requirement_pass_at_clean": round(clean**cells, 4) if cells else None,
        }

    def schedule(self) -> str:
        """``4 recalled with no miss, 9 with 1, 12 with 2, 14 with 3, or 15 of 19``, or ``9 of 12``."""
        early = ", ".join(f"{k} with {m}" if m else f"{k} recalled with no miss"
                          for m, k in enumerate(self.early))
        return f"{early}, or {self.min_recalled} of {self.trials}" if early else f"{self.min_recalled} of {self.trials}"

    def describe(self) -> str:
        """One phrase: the schedule and its design points (``... (a 90%-recall cell passes with 0.976, ...)``)."""
        return (f"{self.schedule()} trials (a {CLEAN_RECALL:.0%}-recall cell passes with "
                f"{self.pass_probability(CLEAN_RECALL):.3f}, a {BAD_RECALL:.0%} one with "
                f"{self.pass_probability(BAD_RECALL):.3f})")
