"""Exact operating characteristics of the sequential tests, computed from their own decision functions.

A truncated :class:`~dsv4deploy.gates.evidence.BernoulliSPRT` fed independent trials is a Markov chain
over (trials, events): its chance to pass, fail or end inconclusive at a true rate is a finite sum, not a
simulation. :func:`sprt_oc` sums it by dynamic programming, asking the test's own :meth:`state` at every
(trials, events) so the figures are those of the code that decides. :func:`joint_oc` does the same for
two tests fed the same sessions (the soak: corruption and model mistakes, each session at most one of the
two), stopped when both passed or either failed, as the soak's referee stops them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dsv4deploy.gates.evidence import BernoulliSPRT, Outcome

#: Paths less likely than this are dropped from the sums (their total is far below the printed digits).
PRUNE = 1e-15


@dataclass(frozen=True)
class OC:
    """A rule's chance of each outcome at one true rate, and the trials it takes on average."""

    passed: float
    failed: float
    inconclusive: float
    mean_trials: float

    def refused(self) -> float:
        """The chance a release is not passed (failed or inconclusive: both refuse it by default)."""
        return self.failed + self.inconclusive


def _state_at(test: BernoulliSPRT, trials: int, events: int) -> Outcome | None:
    """The test's own verdict after ``events`` of ``trials`` (its statistic depends only on the counts)."""
    test.trials, test.events = trials, events
    test.llr = events * test.step_event + (trials - events) * test.step_clean
    return test.state()


def sprt_oc(test: BernoulliSPRT, rate: float) -> OC:
    """P(pass), P(fail), P(inconclusive) and the mean trials of ``test`` (a fresh one: it is used as a
    calculator) when every trial is an event with probability ``rate``, independently."""
    probe = BernoulliSPRT(test.p0, test.p1, test.alpha, test.beta, test.budget)
    return counts_oc(lambda trials, events: _state_at(probe, trials, events), rate, test.budget)


def counts_oc(state: Callable[[int, int], Outcome | None], rate: float, budget: int) -> OC:
    """The same sums for any rule whose verdict depends only on (trials, events): ``state`` is the rule's own
    decision there, None while undecided; a rule still undecided after ``budget`` trials is inconclusive."""
    ends = {Outcome.PASSED: 0.0, Outcome.FAILED: 0.0, Outcome.INCONCLUSIVE: 0.0}
    mean = 0.0
    live = {0: 1.0}  # events -> probability, at `trials` trials, undecided
    for trials in range(1, budget + 1):
        step: dict[int, float] = {}
        for events, p in live.items():
            for hit, q in ((1, rate), (0, 1.0 - rate)):
                if p * q > PRUNE:
                    step[events + hit] = step.get(events + hit, 0.0) + p * q
        live = {}
        for events, p in step.items():
            outcome = state(trials, events)
            if outcome is None:
                live[events] = p
            else:
                ends[outcome] += p
                mean += p * trials
    left = sum(live.values())
    ends[Outcome.INCONCLUSIVE] += left
    return OC(ends[Outcome.PASSED], ends[Outcome.FAILED], ends[Outcome.INCONCLUSIVE], mean + left * budget)


def joint_oc(first: BernoulliSPRT, second: BernoulliSPRT, first_rate: float, second_rate: float) -> OC:
    """Two tests fed the same trials, each trial an event of the first kind with ``first_rate``, of the second
    with ``second_rate``, never both; stopped when either failed (failed) or both passed (passed), else
    inconclusive at the shorter budget. A test that passed goes on counting, as in the soak."""
    if first_rate + second_rate > 1.0:
        raise ValueError("the two kinds exclude each other: their rates add up to at most 1")
    a = BernoulliSPRT(first.p0, first.p1, first.alpha, first.beta, first.budget)
    b = BernoulliSPRT(second.p0, second.p1, second.alpha, second.beta, second.budget)
    budget = min(first.budget, second.budget)
    passed = failed = mean = 0.0
    live = {(0, 0): 1.0}
    moves = ((1, 0, first_rate), (0, 1, second_rate), (0, 0, 1.0 - first_rate - second_rate))
    for trials in range(1, budget + 1):
        step: dict[tuple[int, int], float] = {}
        for (x, y), p in live.items():
            for dx, dy, q in moves:
                if p * q > PRUNE:
                    step[(x + dx, y + dy)] = step.get((x + dx, y + dy), 0.0) + p * q
        live = {}
        for (x, y), p in step.items():
            states = {_state_at(a, trials, x), _state_at(b, trials, y)}
            if Outcome.FAILED in states:
                failed += p
                mean += p * trials
            elif states == {Outcome.PASSED}:
                passed += p
                mean += p * trials
            else:
                live[(x, y)] = p
    left = sum(live.values())
    return OC(passed, failed, left, mean + left * budget)
