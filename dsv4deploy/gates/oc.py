"""Operating characteristics of the gates' decision rules, measured by running the rules themselves.

``python -m dsv4deploy.gates.oc`` regenerates ``docs/evidence.md``: for each rule, the chance it passes
and the sessions it takes against the true rate, from many simulated Bernoulli runs through the very
class the gate decides with (:class:`dsv4deploy.gates.evidence.BernoulliSPRT`), so the risks the docs state
are the risks the code has. The rule the soak had before (a fixed 50 sessions, at most 2 % corrupted) is
shown beside it, computed exactly (binomial).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from dsv4deploy.gates import perf_oc, probe_rule
from dsv4deploy.gates.evidence import Outcome
from dsv4deploy.gates.recall_rule import BAD_RECALL, CLEAN_RECALL, RecallRule
from dsv4deploy.gates.runner import GateSettings
from dsv4deploy.gates.soak import SoakDesign

RATES = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.10, 0.15, 0.18)
RUNS = 10_000
SEED = 38
DOC = Path(__file__).resolve().parents[2] / "docs" / "evidence.md"
#: Measured on the embedded host's servers by bench/perf_false_alarms.py (the whole gate, every figure);
#: machine-dependent, so written here, not computed.
PERF_MEASURED = [
    "Measured on this repository's 2-core CI machine while it ran other test suites (load average 9-12),",
    "with `bench/perf_false_alarms.py`: the embedded host's PD servers (time scale 1) behind sglang-router,",
    "25 runs, each a clean recording, a clean release judged against it and a release with",
    "`slow_decode=1.5` judged against it; a gate took 3.1 s (median). At `perf_tolerance` 0.25 and a 5 ms",
    "noise floor: 1 false alarm in 25 (4 %, 95 % interval 0.1-20.4 %; output tokens/s 1.25x worse,",
    "p=0.016) and 25 of 25 slow releases refused. The same runs judged at the defaults (0.3, TTFT 1.0,",
    "2 ms; the test's p-values and the medians do not depend on them): 0 false alarms in 25 (95 %",
    "interval 0-13.7 %),",
    "25 of 25 refused (95 % interval 86-100 %), every one by the inter-token figures (client 1.37-1.58x,",
    "decode 1.43-1.6x in the median, p <= 0.006); on a clean release they moved at most 1.08x, while the",
    "TTFT medians moved up to 1.97x with the machine's load, never both significant and beyond the band.",
    "Run again at the defaults (20 runs, the same machine and load): 0 false alarms in 20 (95 % interval",
    "0-16.8 %), `slow_decode=1.5` refused 20 of 20 (95 % interval 83-100 %), a gate 2.8 s (median).",
]

#: The integration tier's coarse design (tests/integration/simhost.py SMALL_SOAK): fast, not for production.
CI_DESIGN = SoakDesign(acceptable_rate=0.01, max_rate=0.3, acceptable_mistake_rate=0.01, max_mistake_rate=0.3,
                       alpha=0.1, beta=0.1)


@dataclass(frozen=True)
class Point:
    """The rule's behaviour at one true rate."""

    rate: float
    passed: float
    failed: float
    inconclusive: float
    mean_trials: float
    p95_trials: float


def simulate(design: SoakDesign, budget: int, rate: float, runs: int = RUNS, seed: int = SEED) -> Point:
    """Run the soak's corruption test ``runs`` times on Bernoulli(``rate``) sessions (no model mistakes)."""
    rng = random.Random(f"{seed}:{rate}")
    counts = {o: 0 for o in Outcome}
    trials: list[int] = []
    for _ in range(runs):
        test = design.tests(budget)[0]
        outcome = None
        while outcome is None:
            outcome = test.observe(rng.random() < rate)
        counts[outcome] += 1
        trials.append(test.trials)
    trials.sort()
    return Point(rate, counts[Outcome.PASSED] / runs, counts[Outcome.FAILED] / runs,
                 counts[Outcome.INCONCLUSIVE] / runs, statistics.fmean(trials), trials[int(0.95 * (runs - 1))])


def fixed_rule_pass(rate: float, sessions: int = 50, limit: float = 0.02) -> float:
    """P(pass) of the soak's former rule: ``sessions`` sessions, passed with at most ``limit`` corrupted."""
    from scipy.stats import binom  # lazy: see dsv4deploy.gates.evidence

    return float(binom.cdf(int(limit * sessions), sessions, rate))


def _table(design: SoakDesign, budget: int, runs: int, with_before: bool) -> list[str]:
    head = "| true corrupted-session rate | P(pass) | P(fail) | P(inconclusive) | mean sessions | 95th pct sessions |"
    lines = [head + (" P(pass), former rule |" if with_before else ""),
             "|---|---|---|---|---|---|" + ("---|" if with_before else "")]
    for rate in RATES:
        p = simulate(design, budget, rate, runs)
        row = (f"| {rate:.1%} | {p.passed:.4f} | {p.failed:.4f} | {p.inconclusive:.4f} | {p.mean_trials:.1f} "
               f"| {p.p95_trials:.0f} |")
        lines.append(row + (f" {fixed_rule_pass(rate):.3f} |" if with_before else ""))
    return lines


RECALLS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
#: Measured by bench/needle_price.py and once on the systemd tier; machine-dependent, so written here.
NEEDLE_PRICE = [
    "The price, measured (`bench/needle_price.py`: the default grid, one combined simulated server,",
    "`index_topk: 1024`, the gate's own function, on the 2-core CI machine, two runs each, medians): one trial a",
    "cell, as before the trials, 19 requests and 5.9 s to the verdict; 9 of 12 on every cell, as the gate asked",
    "them before, 142-147 requests and 34.5 s; this rule with the curve's cells at one trial, 55 requests and",
    "11.1 s (1.9 times one trial a cell, 3.1 times faster than 9 of 12). The simulated server prefills one",
    "prompt at a time, as a GPU is compute-bound on long prompts, so the price is the prompt tokens asked, and",
    "asking more cells at once does not lower it; the judged cells' share (4 trials at 1000-5500 tokens) is",
    "the least any rule at these risks can ask of a clean cell. In a gated deploy the needle runs beside the",
    "soak, so the deploy's time moves less: `python -m bench`'s timed deploy (8-cell grid, 20 s load, one run",
    "each) 52.7 s under 9 of 12 and 51.7 s under this rule, the manual baseline 49.6 s; on the systemd tier",
    "(tests/systemd single host, 2 cells) the needle gate 4.4 s and 19 requests under 9 of 12, 2.8-3.6 s",
    "and 9 requests under this rule, the deploy 14-21 s either way.",
]
#: The integration tier's needle rule (tests/integration/simhost.py SMALL_NEEDLE): fast, not for production.
CI_RULE = RecallRule(trials=3, min_recalled=3)


@dataclass(frozen=True)
class CellPoint:
    """The needle rule's behaviour for a cell of one true recall."""

    recall: float
    passed: float  # simulated
    exact: float  # the exact binomial sum the gate states
    mean_trials: float


def simulate_cell(rule: RecallRule, recall: float, runs: int = RUNS, seed: int = SEED) -> CellPoint:
    """Ask a cell of true ``recall`` ``runs`` times through the rule's own curtailed decision (the gate's
    ``RecallRule.state``), counting passes and the trials it took."""
    rng = random.Random(f"{seed}:needle:{recall}")
    passed, trials = 0, 0
    for _ in range(runs):
        recalled = missed = 0
        while (outcome := rule.state(recalled, missed)) is None:
            hit = rng.random() < recall
            recalled, missed = recalled + hit, missed + (not hit)
        passed += outcome is Outcome.PASSED
        trials += recalled + missed
    return CellPoint(recall, passed / runs, rule.pass_probability(recall), trials / runs)


def _needle_table(rule: RecallRule, runs: int, cells: int) -> list[str]:
    lines = [f"| true recall of a cell | P(cell passes), exact | simulated | mean trials | P(all {cells} required "
             "cells pass), every one at this recall |", "|---|---|---|---|---|"]
    for recall in RECALLS:
        p = simulate_cell(rule, recall, runs)
        lines.append(f"| {recall:.0%} | {p.exact:.4f} | {p.passed:.4f} | {p.mean_trials:.1f} "
                     f"| {p.exact ** cells:.4f} |")
    return lines


def _needle_section(runs: int) -> list[str]:
    rule, ci, former = RecallRule(), CI_RULE, RecallRule(12, 9)
    clean, bad = rule.pass_probability(CLEAN_RECALL), rule.pass_probability(BAD_RECALL)
    was_clean, was_bad = former.pass_probability(CLEAN_RECALL), former.pass_probability(BAD_RECALL)
    return [
        "## Needle: independent trials per cell, read in order",
        "",
        f"Defaults: each cell is asked up to `needle_trials` {rule.trials} independent trials (each its own needle,",
        "phrasing, filler order and a depth jittered by up to 0.05), read in trial order. It passes as soon as it has",
        f"{rule.schedule()} trials (`needle_pass_early` {list(rule.early)}: the recalled trials",
        f"that pass it with 0, 1, 2, ... misses; `needle_min_recalled` {rule.min_recalled} past them) and fails at "
        f"miss {rule.max_missed + 1}. The design points: a cell",
        f"that recalls {CLEAN_RECALL:.0%} passes with probability {clean:.4f} (risk {1 - clean:.4f} of refusing it), "
        f"one that recalls {BAD_RECALL:.0%} with {bad:.4f},",
        f"both no worse than the former {former.schedule()} ({was_clean:.4f} and {was_bad:.4f}), and a clean cell "
        f"costs {rule.expected_trials(1.0):.0f} requests where it",
        f"cost {former.expected_trials(1.0):.0f} ({rule.expected_trials(CLEAN_RECALL):.1f} where it cost "
        f"{former.expected_trials(CLEAN_RECALL):.1f} at {CLEAN_RECALL:.0%}). Four is the fewest any rule can take: a "
        f"rule that passes a cell on three recalls passes a coin flip",
        "with 0.125. The schedule is the cheapest for a clean cell, then at 90 %, among every rule that passes on a",
        "count of recalls that rises with the misses and fails on a count of misses (up to 17 recalls, 6 misses;",
        "searched exhaustively, each candidate's risks computed exactly), that keeps both of the former risks.",
        f"Away from the design points it differs: a 30 % cell passes with {rule.pass_probability(0.3):.4f} (was "
        f"{former.pass_probability(0.3):.4f}), a 70 % one with {rule.pass_probability(0.7):.4f} (was "
        f"{former.pass_probability(0.7):.4f}), an 80 % one with {rule.pass_probability(0.8):.4f} (was "
        f"{former.pass_probability(0.8):.4f}).",
        "",
        "Why these risks: the requirement needs every required cell to pass (12 cells at `index_topk: 1024`, 5500",
        "tokens, with the default grid), so a per-cell risk multiplies. One trial per cell, as before the trials,",
        f"passed 12 cells that each recall 90 % together 28 % of the time; the rule passes them {clean**12:.0%} of the "
        "time, and",
        f"cells at 95 % {rule.pass_probability(0.95)**12:.0%}, while a single 50 % cell is still caught "
        f"{1 - bad:.0%} of the time.",
        "",
        "The rule reads the trials in their order (a trial that answers early waits for the ones before it), and",
        "never has more trials out than the fewest that could decide the cell, so nothing is asked past the",
        "decision. Cells past the requirement (longer than the first length that reaches it) are the recall",
        "curve: asked `needle_curve_trials` (1) trials each after every judged cell, never judged. The",
        "requirement's evidence (`rule` in the needle's result) states these risks for the number of",
        "cells that were really required. A required cell the deadline left undecided makes the gate",
        "`inconclusive`, never passed. The table runs the rule's own decision (`RecallRule.state`) over",
        "simulated Bernoulli trials; the exact column is what the gate states (`RecallRule.pass_probability`:",
        "`sprt_oc.counts_oc`, dynamic programming over the rule's own decision at each count of recalls).",
        "",
        *_needle_table(rule, runs, 12),
        "",
        *NEEDLE_PRICE,
        "",
        "## Needle in the integration tier (not for production)",
        "",
        f"`tests/integration/simhost.py` `SMALL_NEEDLE`: {ci.min_recalled} of {ci.trials} trials, two cells: a clean "
        f"simulated release passes after {ci.min_recalled} requests a cell,",
        "and a lost cell fails on its first miss. It shows the gate runs (the run is marked WEAKENED); its power",
        "is the default's.",
        "",
        *_needle_table(ci, runs, 2),
        "",
    ]


#: The soak's default budget (GateSettings.soak_sessions).
SOAK_BUDGET = GateSettings().soak_sessions


def _joint_lines(d: SoakDesign) -> list[str]:
    """The two tests' joint risks, exact (dsv4deploy.gates.sprt_oc), at the default budget and the former one."""
    now, before = d.joint_risks(SOAK_BUDGET), d.joint_risks(300)
    former = SoakDesign(alpha=2 * d.alpha).joint_risks(300)
    return [
        f"Either test failing refuses the release, and so does a budget spent undecided: each test runs at "
        f"`soak_alpha` / 2 ({d.alpha / 2:g}),",
        f"and the budget is {SOAK_BUDGET}. Exact joint figures (`SoakDesign.joint_risks`, dynamic programming over "
        f"both tests' own decisions),",
        f"a release at {d.acceptable_rate:.1%} corruption and {d.acceptable_mistake_rate:.0%} mistakes: refused "
        f"{now['refused_when_clean']:.4f} (failed {now['failed_when_clean']:.4f}, inconclusive "
        f"{now['inconclusive_when_clean']:.4f}); at 300 sessions {before['refused_when_clean']:.4f}; the former",
        f"design (each test at {d.alpha:g}, 300 sessions) {former['refused_when_clean']:.4f}. A release at "
        f"{d.max_rate:.0%} corruption is promoted {now['promoted_when_bad']:.4f}.",
    ]


def render(runs: int = RUNS) -> str:
    """The whole of docs/evidence.md."""
    d = SoakDesign()
    out = [
        "# Evidence: how sure each gate's verdict is",
        "",
        "Generated by `python -m dsv4deploy.gates.oc` (do not edit by hand): each table runs the gate's own",
        "decision function (`dsv4deploy.gates.evidence.BernoulliSPRT`) over simulated Bernoulli runs (`--runs`,",
        f"{RUNS} a row by default; seed {SEED}). Sessions are counted in the order they started; a session",
        "is corrupted with the row's probability, independently.",
        "",
        "## Soak: Wald's sequential test",
        "",
        f"Defaults: a clean release has at most `soak_acceptable_rate` {d.acceptable_rate:.1%} corrupted sessions,",
        f"a bad one at least `soak_max_corruption_rate` {d.max_rate:.0%}; the risk of refusing a clean one is",
        f"`soak_alpha` {d.alpha:g}, of promoting a bad one `soak_beta` {d.beta:g}; the budget is `soak_sessions` "
        f"{SOAK_BUDGET}.",
        "The test passes after 65 clean sessions in a row, fails on 2 corrupted sessions among the first",
        "few, and ends `inconclusive` at the budget (the deploy then refuses the release unless",
        "`dsv4_gates_inconclusive: pass`). Model mistakes are judged by a second test of the same kind",
        f"({d.acceptable_mistake_rate:.0%} against {d.max_mistake_rate:.0%}); the soak passes when both pass.",
        *_joint_lines(d),
        "A verdict states the test's own statement (its log likelihood ratio and the bound it crossed, at its",
        "risks), not a fixed-sample p-value, which a stop chosen by the data makes invalid; the rate observed at",
        "the stop is labelled biased (a failing stop overstates it, a passing one understates it), not corrected.",
        "The last column is the rule the soak had before this one (50 sessions, at most 2 % corrupted),",
        "computed exactly.",
        "",
        *_table(d, SOAK_BUDGET, runs, with_before=True),
        "",
        "## Soak in the integration tier (not for production)",
        "",
        "`tests/integration/simhost.py` `SMALL_SOAK`: 1 % against 30 %, `soak_alpha` 0.10 (0.05 a test), `soak_beta`",
        "0.10, budget 12 sessions:",
        "a clean release passes after 7 sessions. It shows the gate runs; its power is the default's.",
        "",
        *_table(CI_DESIGN, 12, runs, with_before=False),
        "",
        *_needle_section(runs),
        *perf_section(runs),
        *probe_rule.section(),
        *isolation_section(),
    ]
    return "\n".join(out)


#: The isolation experiment's section is written by bench/isolation_oc.py (its enumeration takes a minute);
#: this generator keeps it as it is, between these markers.
ISOLATION_BEGIN = "<!-- isolation: bench/isolation_oc.py --write -->"
ISOLATION_END = "<!-- end isolation -->"


def isolation_section() -> list[str]:
    """docs/evidence.md's isolation section as it stands (a placeholder naming its generator if missing)."""
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    if ISOLATION_BEGIN in text and ISOLATION_END in text:
        kept = text[text.index(ISOLATION_BEGIN):text.index(ISOLATION_END) + len(ISOLATION_END)]
        return [*kept.splitlines(), ""]
    return [ISOLATION_BEGIN, "Run `bench/isolation_oc.py --write` for the isolation experiment's table.", ISOLATION_END,
            ""]


def perf_section(runs: int = RUNS) -> list[str]:
    """The perf gate's section: its rule, its settings, the simulated table and the rates measured here."""
    g = GateSettings()
    return [
        "## Perf: a rank test and a tolerance band over rounds",
        "",
        f"The perf gate runs `perf_rounds` {g.perf_rounds} rounds of its fixed load and keeps every round's",
        "figures with the release. The next release's rounds are compared with the last good release's,",
        "figure by figure (TTFT p50 and p99, inter-token p50, output tokens/s from the client; the servers'",
        "histogram p50s), as Kayenta does: a one-sided Mann-Whitney U test (scipy) at `perf_alpha`",
        f"{g.perf_alpha:g} (98 % confidence, Kayenta's default) says whether the rounds are worse, and the",
        f"tolerance band `perf_tolerance` {g.perf_tolerance:g} says whether the shift matters: a figure",
        f"regresses only when its median is also worse by at least {g.perf_tolerance:.0%}",
        f"(`perf_ttft_tolerance` {g.perf_ttft_tolerance:g} for the TTFT figures: queueing, which a busy",
        "machine moves most; a clean integration deploy's TTFT p50 was 1.31x its baseline's, p=0.016) and,",
        "for a latency, by more than `perf_noise_floor_s`. A loaded machine shifts every figure a little",
        "and often significantly; the band keeps that from refusing a clean release. A slow round moves a",
        "rank test by one rank only.",
        "",
        "Rounds, not requests, are the samples: the requests of a round share their batches and the",
        f"machine's momentary load, so they are not independent. {g.perf_rounds} rounds a side can reach",
        f"p = 1/{math.comb(2 * g.perf_rounds, g.perf_rounds)}; a side with too few rounds for the test to",
        "reach alpha (a release recorded before the rounds has one point a figure) leaves the figure not",
        "judged, listed as such. When no figure could be judged (the first release, other hosts or load,",
        "an old record) the gate is `skipped`: recorded, not judged, never passed. Counts (requests) are",
        "recorded, not judged.",
        "",
        f"P(a figure is called regressed), the rule run over simulated rounds ({RUNS // 5} a cell by",
        "default; log-normal round-to-round noise of the given spread; `dsv4deploy.gates.perf_oc`):",
        "",
        *perf_oc.lines(rounds=g.perf_rounds, alpha=g.perf_alpha, band=g.perf_tolerance, runs=max(runs // 5, 1),
                       seed=SEED),
        "",
        *PERF_MEASURED,
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    """Write docs/evidence.md (or ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOC)
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    args.out.write_text(render(args.runs), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
