"""The needle's k-of-n rule: a cell recalls when at least ``min_recalled`` of ``trials`` independent trials do.

Each trial of a cell is its own prompt (another needle, phrasing, filler order and a depth jittered around
the cell's, dsv4deploy.gates.haystack), so the trials are independent draws of the cell's true recall ``p``
and the number recalled is binomial. The rule's risks are exact binomial sums (scipy ``binom``):

- P(a cell passes | p) = P(Binomial(trials, p) >= min_recalled);
- the design points: a cell that recalls :data:`CLEAN_RECALL` (90 %) and one that recalls :data:`BAD_RECALL`
  (50 %). The defaults (12 trials, 9 recalled) pass the first with probability 0.974 and the second with
  0.073; docs/evidence.md has the table (``python -m dsv4deploy.gates.oc``).

The gate stops asking a cell as soon as its verdict is certain (``min_recalled`` recalled, or more than
``trials - min_recalled`` missed): curtailment changes the number of requests, never the verdict, so the
risks are those of the full k-of-n rule. A cell the deadline stopped before either bound is undecided
(``inconclusive``), never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsv4deploy.gates.evidence import Outcome

#: A cell that recalls this often should pass (the first design point).
CLEAN_RECALL = 0.9
#: A cell that recalls this often should fail (the second design point): a coin flip is not recall.
BAD_RECALL = 0.5
DEFAULT_TRIALS = 12
DEFAULT_MIN_RECALLED = 9


@dataclass(frozen=True)
class RecallRule:
    """``min_recalled`` of ``trials`` independent trials must recall for a cell to pass."""

    trials: int = DEFAULT_TRIALS
    min_recalled: int = DEFAULT_MIN_RECALLED

    def __post_init__(self) -> None:
        if self.trials < 1 or not 1 <= self.min_recalled <= self.trials:
            raise ValueError(f"need 1 <= needle_min_recalled <= needle_trials (got {self.min_recalled} of "
                             f"{self.trials})")

    def state(self, recalled: int, missed: int) -> Outcome | None:
        """PASSED once ``min_recalled`` trials recalled, FAILED once too many missed to reach it, else None."""
        if recalled >= self.min_recalled:
            return Outcome.PASSED
        if missed > self.trials - self.min_recalled:
            return Outcome.FAILED
        return None

    def still_needed(self, recalled: int, missed: int) -> int:
        """The fewest further trials that could decide the cell (0 once decided)."""
        if self.state(recalled, missed) is not None:
            return 0
        return min(self.min_recalled - recalled, self.trials - self.min_recalled + 1 - missed)

    def pass_probability(self, recall: float) -> float:
        """P(a cell passes | it recalls with probability ``recall``): exact binomial."""
        from scipy.stats import binom  # lazy: see dsv4deploy.gates.evidence

        return float(binom.sf(self.min_recalled - 1, self.trials, recall))

    def risks(self, cells: int = 1) -> dict[str, Any]:
        """The design: per cell, and for ``cells`` required cells judged together (every one must pass)."""
        clean, bad = self.pass_probability(CLEAN_RECALL), self.pass_probability(BAD_RECALL)
        return {
            "trials": self.trials,
            "min_recalled": self.min_recalled,
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

    def describe(self) -> str:
        """One phrase: ``9 of 12 trials (a 90%-recall cell passes with 0.974, a 50% one with 0.073)``."""
        return (f"{self.min_recalled} of {self.trials} trials (a {CLEAN_RECALL:.0%}-recall cell passes with "
                f"{self.pass_probability(CLEAN_RECALL):.3f}, a {BAD_RECALL:.0%} one with "
                f"{self.pass_probability(BAD_RECALL):.3f})")
