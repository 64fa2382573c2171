"""The perf gate's operating characteristics, for docs/evidence.md (``python -m dsv4deploy.gates.oc``).

Runs the gate's own rule for one figure (:func:`dsv4deploy.gates.perf_compare.judge_figure`) over
simulated rounds: each round's figure is the true value times a log-normal noise whose spread is the
round-to-round coefficient of variation, the release's true value ``factor`` times the baseline's. A
gate judges about nine figures (four from the client, two or three per server), so its false-alarm
rate is up to about nine times a figure's when the figures move independently (they do not: they move
together, with the machine's load); the measured rates below are the whole gate's.
"""

from __future__ import annotations

import math
import random

from dsv4deploy.gates.perf_compare import judge_figure

FACTORS = (1.0, 1.1, 1.25, 1.5, 2.0)
SPREADS = (0.05, 0.10, 0.20)


def p_fail(factor: float, spread: float, *, rounds: int, alpha: float, band: float, runs: int,
           seed: int) -> float:
    """The share of `runs` simulated releases whose figure (a latency, 10 ms) the rule calls regressed."""
    rng = random.Random(seed)
    sigma = math.sqrt(math.log(1 + spread * spread))  # log-normal with this coefficient of variation

    def one(value: float) -> list[float]:
        return [value * rng.lognormvariate(-sigma * sigma / 2, sigma) for _ in range(rounds)]

    failed = sum(judge_figure("client", "itl_p50_s", one(0.010 * factor), one(0.010), alpha=alpha, band=band,
                              noise_floor_s=0.0).regressed for _ in range(runs))
    return failed / runs


def lines(*, rounds: int, alpha: float, band: float, runs: int, seed: int) -> list[str]:
    """The section's table: P(a figure is called regressed) against the true slowdown and the spread."""
    out = ["| true slowdown | " + " | ".join(f"round-to-round spread {s:.0%}" for s in SPREADS) + " |",
           "|---|" + "---|" * len(SPREADS)]
    for factor in FACTORS:
        cells = [f"{p_fail(factor, s, rounds=rounds, alpha=alpha, band=band, runs=runs, seed=seed):.4f}"
                 for s in SPREADS]
        out.append(f"| {factor:g}x | " + " | ".join(cells) + " |")
    return out
