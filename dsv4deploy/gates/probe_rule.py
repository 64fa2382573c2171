"""The bake's tool-call probe rule: how many corrupted sessions fail an interval, at a stated risk for the bake.

Each bake interval runs ``sessions`` one-turn tool-calling sessions (one tool call each). A release that
corrupts at the acceptable rate (the soak's ``soak_acceptable_rate``, 0.5 %) still corrupts one of 16
sessions 7.7 % of the time, and a bake of 10 intervals that failed an interval on one corrupted session
refused such a release a quarter of the time. The rule here picks the smallest counts that fail an
interval (corrupted sessions, model mistakes) such that the whole bake, under its own failure rule
(``failure_limit``, and a failed interval near the end), refuses a release at the acceptable rates with
probability at most ``alpha``: ``alpha / 2`` for each kind, and the exact joint figure is stated. Every
probability is an exact binomial (multinomial) sum, not a simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import comb

#: The bake's false-alarm risk from its tool-call probe at the acceptable rates.
PROBE_ALPHA = 0.05
#: The acceptable rates: the soak's (dsv4deploy.gates.soak.SoakDesign's defaults).
ACCEPTABLE_RATE = 0.005
ACCEPTABLE_MISTAKE_RATE = 0.02


def bake_fail_probability(interval_fails: float, intervals: int, failure_limit: int) -> float:
    """P(the bake fails) when each interval fails independently with ``interval_fails``, under the bake's
    rule: failed once more intervals failed than ``failure_limit``, or at a failed interval with no more
    intervals left than the failure limit."""
    alive = {0: 1.0}  # failed intervals so far -> probability, the bake still going
    failed = 0.0
    for index in range(1, intervals + 1):
        left = intervals - index
        step: dict[int, float] = {}
        for count, p in alive.items():
            step[count] = step.get(count, 0.0) + p * (1.0 - interval_fails)
            if count + 1 > failure_limit or left <= failure_limit:
                failed += p * interval_fails
            else:
                step[count + 1] = step.get(count + 1, 0.0) + p * interval_fails
        alive = step
    return failed


def _at_least(k: int, n: int, rate: float) -> float:
    """P(Binomial(n, rate) >= k)."""
    return sum(comb(n, j) * rate**j * (1.0 - rate) ** (n - j) for j in range(k, n + 1))


@dataclass(frozen=True)
class ProbeRule:
    """The counts that fail one interval's probe of ``sessions`` sessions, for a bake of ``intervals``."""

    sessions: int
    intervals: int
    failure_limit: int
    alpha: float = PROBE_ALPHA
    acceptable_rate: float = ACCEPTABLE_RATE
    acceptable_mistake_rate: float = ACCEPTABLE_MISTAKE_RATE

    def _smallest(self, rate: float) -> int:
        for k in range(1, self.sessions + 1):
            if bake_fail_probability(_at_least(k, self.sessions, rate), self.intervals,
                                     self.failure_limit) <= self.alpha / 2:
                return k
        return self.sessions + 1  # never: too few sessions to hold the risk (said by the rule's text)

    @cached_property
    def fail_at(self) -> tuple[int, int]:
        """(corrupted sessions, mistaken sessions): either count reached fails the interval."""
        return self._smallest(self.acceptable_rate), self._smallest(self.acceptable_mistake_rate)

    def interval_fails(self, corrupted: int, mistaken: int) -> bool:
        """Whether an interval with these counts fails."""
        corrupt_at, mistake_at = self.fail_at
        return corrupted >= corrupt_at or mistaken >= mistake_at

    def interval_fail_probability(self, rate: float, mistake_rate: float = 0.0) -> float:
        """P(an interval fails) when each session is corrupted with ``rate`` and mistaken with ``mistake_rate``
        (never both: a session ends at its first wrong reply), exact over the multinomial."""
        n = self.sessions
        clean = 1.0 - rate - mistake_rate
        passed = 0.0
        for c in range(n + 1):
            for m in range(n - c + 1):
                if not self.interval_fails(c, m):
                    passed += comb(n, c) * comb(n - c, m) * rate**c * mistake_rate**m * clean ** (n - c - m)
        return 1.0 - passed

    def bake_fail_probability(self, rate: float, mistake_rate: float = 0.0) -> float:
        """P(the probe fails the bake) at these per-session rates (the other analyses passing)."""
        return bake_fail_probability(self.interval_fail_probability(rate, mistake_rate), self.intervals,
                                     self.failure_limit)

    def describe(self) -> str:
        """The rule in words, with its exact false-alarm risk."""
        corrupt_at, mistake_at = self.fail_at
        risk = self.bake_fail_probability(self.acceptable_rate, self.acceptable_mistake_rate)
        return (f"an interval fails at {corrupt_at} corrupted or {mistake_at} mistaken of {self.sessions} sessions "
                f"(a release at {self.acceptable_rate:.1%} corruption and {self.acceptable_mistake_rate:.0%} "
                f"mistakes fails this {self.intervals}-interval bake with probability {risk:.4f}, "
                f"stated at most {self.alpha:g})")

    def evidence(self) -> dict[str, object]:
        """The rule and its risk, for the bake's evidence."""
        corrupt_at, mistake_at = self.fail_at
        return {"fail_at_corrupted": corrupt_at, "fail_at_mistaken": mistake_at, "sessions": self.sessions,
                "intervals": self.intervals, "alpha": self.alpha, "acceptable_rate": self.acceptable_rate,
                "acceptable_mistake_rate": self.acceptable_mistake_rate,
                "false_alarm": round(self.bake_fail_probability(self.acceptable_rate,
                                                                self.acceptable_mistake_rate), 4)}


def former_bake_fail_probability(rule: ProbeRule, rate: float) -> float:
    """P(the bake fails) under the former rule, an interval failed on one corrupted session."""
    return bake_fail_probability(_at_least(1, rule.sessions, rate), rule.intervals, rule.failure_limit)


def oc_table(rule: ProbeRule, rates: tuple[float, ...] = (0.0, 0.005, 0.02, 0.05, 0.10)) -> list[str]:
    """A markdown table: P(the bake fails) at each per-session corruption rate, under this rule and under
    the former one (an interval failed on one corrupted session), no model mistakes."""
    lines = ["| corrupted one-turn sessions (one tool call each) | P(bake fails), this rule | "
             "P(an interval fails) | P(bake fails), former rule (one corrupted session) |", "|---|---|---|---|"]
    for rate in rates:
        lines.append(f"| {rate:.1%} | {rule.bake_fail_probability(rate):.4f} "
                     f"| {rule.interval_fail_probability(rate):.4f} "
                     f"| {former_bake_fail_probability(rule, rate):.4f} |")
    return lines


def section() -> list[str]:
    """docs/evidence.md's section on the bake's tool-call probe (exact sums, no simulation)."""
    rule = ProbeRule(sessions=16, intervals=10, failure_limit=1)
    corrupt_at, mistake_at = rule.fail_at
    counts = ", ".join(f"{n}: {ProbeRule(16, n, 1).fail_at[0]} and {ProbeRule(16, n, 1).fail_at[1]}"
                       for n in (1, 3, 10, 30, 60))
    return [
        "## Bake: the tool-call probe",
        "",
        "Each bake interval runs `dsv4_bake_probe_sessions` (16) one-turn tool-calling sessions. An interval",
        "fails on the smallest counts of corrupted (or mistaken) sessions at which the whole bake, under its",
        "own failure rule (`dsv4_bake_failure_limit`, a failed interval near the end), refuses a release at",
        f"the soak's acceptable rates ({ACCEPTABLE_RATE:.1%} corrupted, {ACCEPTABLE_MISTAKE_RATE:.0%} mistaken) with "
        f"probability at most {PROBE_ALPHA / 2:g} each",
        f"({PROBE_ALPHA:g} together; `dsv4deploy/gates/probe_rule.py`, exact binomial sums). For a bake of 10",
        "intervals (`dsv4_bake_s` 600 at the default `dsv4_bake_interval_s` 60), failure limit 1:",
        f"{corrupt_at} corrupted or {mistake_at} mistaken of 16,",
        f"a joint false alarm of {rule.bake_fail_probability(ACCEPTABLE_RATE, ACCEPTABLE_MISTAKE_RATE):.4f}. "
        f"The counts by the number of intervals (failure limit 1): {counts}.",
        "The former rule failed an interval on one corrupted session: a clean release at 0.5 % was refused",
        "a quarter of the time. The price is power at low rates: 16 sessions an interval cannot tell 2 %",
        "from 0.5 %; the soak before promotion is the test sized for that.",
        "",
        "P(the bake fails by its probe), 10 intervals of 16 sessions, failure limit 1, no model mistakes:",
        "",
        *oc_table(rule),
        "",
    ]
