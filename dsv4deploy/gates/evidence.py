"""Decisions that carry their evidence, and the sequential rule the rate gates decide by.

A gate's verdict is a :class:`Decision`: ``passed``, ``failed``, ``inconclusive`` (ran, but the evidence
did not decide within its budget or deadline) or ``error`` (could not measure: metrics unreadable, no
traffic). Argo Rollouts keeps "could not measure" (its ``consecutiveErrorLimit``) apart from
"inconclusive" (``inconclusiveLimit``); so do we. Every decision carries what it rests on: the observed
rate with its exact interval, a p-value where a fixed-sample test was run (a sequential test states the
bound it crossed instead, and its rate is labelled biased), the rule's design risks, and, when it is
inconclusive, how many more trials would decide.

The rate gates (soak, the bake's tool-call probe) decide with Wald's sequential probability ratio test
for a Bernoulli rate (:class:`BernoulliSPRT`): after each trial it compares the log likelihood ratio of
"the rate is ``p1``" (bad) against "the rate is ``p0``" (clean) with two bounds set by the risks. Why
Wald's SPRT and not a group-sequential design (Pocock, O'Brien-Fleming):

- Trials (sessions) finish one at a time, and each one is cheap to look at: a test that looks after
  every trial stops soonest. A group-sequential design looks a few planned times and needs an
  alpha-spending function to stay honest; it is built for costly interim analyses, which we do not have.
- Among all tests with the same risks, the SPRT needs the fewest trials on average at ``p0`` and at
  ``p1`` (the Wald-Wolfowitz optimality), which is what a clean release (pass fast) and the seeds' PD
  fault (fail fast) both want.
- Its bounds need no tables: ``A = ln((1-beta)/alpha)``, ``B = ln(beta/(1-alpha))``. Wald's bounds are
  conservative (the real risks are at most about the stated ones); the truncation at a budget is
  handled by calling the rest ``inconclusive``, not by forcing a side, and the operating
  characteristics in ``docs/evidence.md`` are measured by running this very class over simulated
  Bernoulli runs (``python -m dsv4deploy.gates.oc``), so the risks it states are the risks it has.

References: A. Wald, "Sequential Tests of Statistical Hypotheses", Ann. Math. Statist. 16 (1945)
117-186; A. Wald and J. Wolfowitz, "Optimum character of the sequential probability ratio test", Ann.
Math. Statist. 19 (1948) 326-339; C. Jennison and B. W. Turnbull, "Group Sequential Methods with
Applications to Clinical Trials" (2000), ch. 1-2 for the comparison.

The fixed-sample statistics (exact binomial intervals and tests, Fisher's exact test, McNemar's test,
Mann-Whitney U) are scipy's. ``scipy.stats`` takes about 2 s to import on the controller (measured with
``python -X importtime`` on the 2-core CI machine, against 0.6 s for all of ``dsv4deploy.gates``), so it
is imported inside the functions that use it, never at module import: the CLI's quick paths (plan,
status, watch) never pay for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: The confidence of every interval a decision shows.
CONFIDENCE = 0.95
#: How a rate observed when a sequential test stopped is to be read.
RATE_NOTE = ("observed when the sequential test stopped: biased (a stop at the rejection bound overstates the "
             "rate, one at the acceptance bound understates it), and its interval is the fixed-sample one")


class Outcome(StrEnum):
    """What a decision says."""

    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"  # measured, but the evidence did not decide within the budget
    ERROR = "error"  # could not measure (metrics unreadable, nothing to count)


@dataclass(frozen=True)
class Decision:
    """A verdict and the evidence it rests on.

    ``events`` of ``trials`` is the counted rate (corrupted sessions of finished ones, failed probes of
    sent ones); ``interval`` is its exact (Clopper-Pearson) interval at :data:`CONFIDENCE`; ``p_value``
    the test behind the verdict, when one was run; ``risks`` the rule's design risks (``alpha``: refusing
    a clean release, ``beta``: promoting a bad one); ``more_trials`` how many more trials would decide an
    inconclusive verdict (the fewest, all of them clean, that would pass it), ``None`` otherwise.
    """

    outcome: Outcome
    reason: str
    events: int = 0
    trials: int = 0
    interval: tuple[float, float] | None = None
    p_value: float | None = None
    risks: dict[str, float] = field(default_factory=dict)
    more_trials: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        """The observed rate, ``None`` before any trial."""
        return self.events / self.trials if self.trials else None

    def evidence(self) -> dict[str, Any]:
        """The JSON-able evidence, for a gate result and the report."""
        out: dict[str, Any] = {"outcome": str(self.outcome), "reason": self.reason, "events": self.events,
                               "trials": self.trials}
        if self.rate is not None:
            out["rate"] = round(self.rate, 4)
        if self.interval is not None:
            out[f"interval_{round(CONFIDENCE * 100)}"] = [round(self.interval[0], 4), round(self.interval[1], 4)]
        if self.p_value is not None:
            out["p_value"] = float(f"{self.p_value:.3g}")
        if self.risks:
            out["risks"] = dict(self.risks)
        if self.more_trials is not None:
            out["more_trials_to_decide"] = self.more_trials
        return {**out, **self.detail}

    def stats(self) -> str:
        """One human phrase: ``3 of 40 (7.5%, 95% interval 1.6%-20.4%), p=0.004``."""
        if not self.trials:
            return "no trials"
        text = f"{self.events} of {self.trials} ({self.rate:.1%}"
        if self.interval is not None:
            text += f", {round(CONFIDENCE * 100)}% interval {self.interval[0]:.1%}-{self.interval[1]:.1%}"
        text += ")"
        if self.p_value is not None:
            text += f", p={self.p_value:.2g}"
        return text


def exact_interval(events: int, trials: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of ``events/trials`` (scipy ``binomtest``); ``(0, 1)`` at 0 trials."""
    if trials == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # lazy: see the module's docstring

    ci = binomtest(events, trials).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def rate_above_p_value(events: int, trials: int, rate: float) -> float:
    """The exact one-sided p-value of "the true rate is at most ``rate``" given ``events`` of ``trials``."""
    if trials == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(events, trials, rate, alternative="greater").pvalue)


def fisher_greater(a_events: int, a_trials: int, b_events: int, b_trials: int) -> float:
    """Fisher's exact one-sided p-value that side A's rate exceeds side B's (scipy ``fisher_exact``)."""
    from scipy.stats import fisher_exact

    table = [[a_events, a_trials - a_events], [b_events, b_trials - b_events]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def mcnemar_p_value(only_a: int, only_b: int) -> float:
    """McNemar's exact two-sided p-value for paired trials: ``only_a`` pairs failed on side A alone,
    ``only_b`` on side B alone (the concordant pairs carry no information). Exact form: a binomial test of
    ``only_a`` of the discordant pairs at 1/2 (scipy ``binomtest``)."""
    discordant = only_a + only_b
    if discordant == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(only_a, discordant, 0.5).pvalue)


def mann_whitney_greater(candidate: list[float], baseline: list[float]) -> float:
    """Mann-Whitney U one-sided p-value that the candidate's values are stochastically larger (scipy)."""
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(candidate, baseline, alternative="greater").pvalue)


class BernoulliSPRT:
    """Wald's sequential probability ratio test of a Bernoulli event rate, truncated at a budget.

    H0 (clean): the rate is at most ``p0``; H1 (bad): the rate is at least ``p1`` (``p0 < p1``). ``alpha``
    is the risk of failing a clean release (deciding H1 at ``p0``), ``beta`` the risk of passing a bad one
    (deciding H0 at ``p1``). After each trial the log likelihood ratio ``llr`` moves by ``ln(p1/p0)`` for an
    event and ``ln((1-p1)/(1-p0))`` (negative) for a clean trial; the test fails at ``llr >= ln((1-beta)/
    alpha)`` and passes at ``llr <= ln(beta/(1-alpha))``. With ``budget`` trials spent and neither bound
    reached it is inconclusive, and :meth:`more_to_pass` / :meth:`more_to_fail` say how far each bound is.
    See the module's docstring for the choice and its references.
    """

    def __init__(self, p0: float, p1: float, alpha: float, beta: float, budget: int) -> None:
        if not 0.0 < p0 < p1 < 1.0:
            raise ValueError(f"need 0 < p0 < p1 < 1 (acceptable rate {p0:g}, rate to refuse {p1:g})")
        if not (0.0 < alpha < 0.5 and 0.0 < beta < 0.5):
            raise ValueError(f"need risks 0 < alpha, beta < 0.5 (got {alpha:g}, {beta:g})")
        if budget < 1:
            raise ValueError(f"need a budget of at least 1 trial (got {budget})")
        self.p0, self.p1, self.alpha, self.beta, self.budget = p0, p1, alpha, beta, budget
        self.step_event = math.log(p1 / p0)
        self.step_clean = math.log((1.0 - p1) / (1.0 - p0))
        self.upper = math.log((1.0 - beta) / alpha)
        self.lower = math.log(beta / (1.0 - alpha))
        self.events = 0
        self.trials = 0
        self.llr = 0.0

    def observe(self, event: bool) -> Outcome | None:
        """Count one trial; the outcome once it decides (or spends its budget), ``None`` while it goes on.
        A caller stops at the first decision; trials counted after it move the statistic on (the soak
        runs two tests at once and stops only when both pass or either fails, so a pass of one is
        revisited by the sessions the other still needs: stricter, never looser)."""
        self.trials += 1
        self.events += bool(event)
        self.llr += self.step_event if event else self.step_clean
        return self.state()

    def state(self) -> Outcome | None:
        """PASSED or FAILED once a bound is crossed, INCONCLUSIVE at the budget, else ``None``."""
        if self.llr >= self.upper:
            return Outcome.FAILED
        if self.llr <= self.lower:
            return Outcome.PASSED
        if self.trials >= self.budget:
            return Outcome.INCONCLUSIVE
        return None

    def more_to_pass(self) -> int:
        """The fewest further trials, all clean, that would reach the pass bound (0 once passed)."""
        return max(0, math.ceil((self.lower - self.llr) / self.step_clean - 1e-9))

    def more_to_fail(self) -> int:
        """The fewest further events that would reach the fail bound (0 once failed)."""
        return max(0, math.ceil((self.upper - self.llr) / self.step_event - 1e-9))

    def risks(self) -> dict[str, float]:
        """The design: the two rates told apart and the two risks."""
        return {"acceptable_rate": self.p0, "refused_rate": self.p1, "alpha": self.alpha, "beta": self.beta,
                "budget": self.budget}

    def decision(self, what: str = "trials", *, cut_short: str | None = None) -> Decision:
        """The verdict so far, with its evidence. ``cut_short`` names why the trials stopped before a bound
        or the budget (the gate's deadline); the verdict is then inconclusive."""
        outcome = self.state()
        interval = exact_interval(self.events, self.trials) if self.trials else None
        more: int | None = None
        head = f"{self.events} of {self.trials} {what}"
        if outcome is Outcome.FAILED:
            reason = (f"{head}: the rate is above the acceptable {self.p0:.1%} "
                      f"(sequential test: refuses {self.p1:.1%} with risk {self.beta:g}, "
                      f"a clean release with risk {self.alpha:g})")
        elif outcome is Outcome.PASSED:
            reason = (f"{head}: the rate is below the refused {self.p1:.1%} "
                      f"(sequential test: passes {self.p0:.1%} with risk {self.alpha:g}, "
                      f"a bad release with risk {self.beta:g})")
        else:
            outcome = Outcome.INCONCLUSIVE
            more = self.more_to_pass()
            why = cut_short or (f"the budget of {self.budget} {what} was spent" if self.trials >= self.budget
                                else "the trials stopped")
            reason = (f"{head}: undecided when {why}; {more} more clean {what} would pass it, "
                      f"{self.more_to_fail()} more with the fault would fail it")
        # No fixed-sample p-value: after a stop chosen by the data it is not valid. The test's own statement is
        # its bound crossed at its design risks; the rate (and its interval) are labelled, not corrected.
        return Decision(outcome, reason, self.events, self.trials, interval, None, self.risks(), more,
                        {"llr": round(self.llr, 3), "bounds": [round(self.lower, 3), round(self.upper, 3)],
                         "statement": self.statement(outcome), "rate_note": RATE_NOTE})

    def statement(self, outcome: Outcome) -> str:
        """What the sequential test itself says, in place of a p-value."""
        if outcome is Outcome.FAILED:
            return (f"log likelihood ratio {self.llr:.3f} reached the rejection bound {self.upper:.3f}: "
                    f"a rate of {self.p0:.1%} is refused, with risk at most {self.alpha:g} of refusing it wrongly")
        if outcome is Outcome.PASSED:
            return (f"log likelihood ratio {self.llr:.3f} reached the acceptance bound {self.lower:.3f}: "
                    f"a rate of {self.p1:.1%} is refused, with risk at most {self.beta:g} of passing it wrongly")
        return (f"log likelihood ratio {self.llr:.3f} between its bounds {self.lower:.3f} and {self.upper:.3f}: "
                "neither rate refused")

