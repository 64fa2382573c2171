"""Operating characteristics of the isolation experiment: P(each verdict) for each seed scenario.

    .venv/bin/python bench/isolation_oc.py [--runs 2000] [--seed 49] [--write]   # --write: docs/evidence.md

Soak rows are exact: every (PD, combined) count pair with binomial probability above 1e-12 is judged by
the experiment's own procedure (``dsv4deploy.isolate.compare.decide_rates``) and the probabilities summed
(the dropped tails sum below 1e-9). Sessions are independent; a session is corrupted with the row's rate.

Needle rows are simulated (``--runs`` experiments a row): each cell's trials are asked as the gate asks
them (k of n, stopped at the cell's verdict), on both sides, and judged by ``compare_needle``. A trial
is one prompt: both sides see the same prompt, so a trial's outcome on the two sides is drawn from one
uniform (a prompt beyond the limit is lost on both). Recall per cell follows the simulated model
(``dsv4deploy.sim.recall``): the sliding window (128 tokens) always, else the indexer's reach for its
``index_topk``; a PD transfer that truncates keeps only the window.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsv4deploy.gates.recall_rule import RecallRule
from dsv4deploy.isolate import VERDICTS
from dsv4deploy.isolate.compare import ACCEPTABLE, decide_rates
from dsv4deploy.isolate.estimate import SESSION_S, SWITCH_S
from dsv4deploy.isolate.needle_compare import compare_needle
from dsv4deploy.isolate.sequential import Design, expected_seconds, operating_characteristics
from dsv4deploy.sim.recall import WINDOW_SIZE, selection_probability

#: Soak sessions a side: dsv4_isolate_soak_sessions' default.
SESSIONS = 600
DEFAULT_GRID = [1000, 2000, 4000, 5500, 8000, 12000]
SEED_000_GRID = [1000, 2000, 4000, 5500, 8000]
DEPTHS = [0.1, 0.5, 0.9]


def _pmf(n: int, p: float) -> list[tuple[int, float]]:
    from scipy.stats import binom

    pmf = binom.pmf(range(n + 1), n, p)
    return [(k, float(w)) for k, w in enumerate(pmf) if w > 1e-12]


def soak_oc(pd_rate: float, combined_rate: float, n_pd: int = SESSIONS, n_combined: int = SESSIONS,
            acceptable: float = ACCEPTABLE) -> dict[str, float]:
    """P(each verdict), exactly, when PD corrupts ``pd_rate`` of sessions and combined ``combined_rate``."""
    out = dict.fromkeys(VERDICTS, 0.0)
    if not n_pd or not n_combined:
        out[decide_rates(0, n_pd, 0, n_combined, acceptable).verdict] = 1.0
        return out
    for kp, wp in _pmf(n_pd, pd_rate):
        for kc, wc in _pmf(n_combined, combined_rate):
            out[decide_rates(kp, n_pd, kc, n_combined, acceptable).verdict] += wp * wc
    return out


#: The soak scenarios (PD rate, combined rate) of both designs' rows.
SOAK_POINTS = [
    ("PD-only corruption: PD 18 %, combined 0 %", 0.18, 0.0),
    ("amplified: PD 18 %, combined 2 % (the seeds)", 0.18, 0.02),
    ("amplified: PD 6 %, combined 2 %", 0.06, 0.02),
    ("shared: both 6 %", 0.06, 0.06),
    ("clean: both 0 %", 0.0, 0.0),
    ("clean: both 0.1 %", 0.001, 0.001),
]
#: Soak sessions a side at once, for the block-count table's session time (soak_concurrency's default).
CONCURRENCY = 32


def sequential_rows(design: Design) -> list[tuple[str, str, dict[str, float], float]]:
    """(scenario, P(each verdict), expected sessions a side) of the alternating design, exact."""
    rows = []
    for name, pd, combined in SOAK_POINTS:
        oc = operating_characteristics(design, pd, combined)
        rows.append((name, f"{design.rounds} x {design.block}", oc.verdicts, oc.expected_sessions))
    return rows


def rounds_table(budget: int = Design().budget, candidates: tuple[int, ...] = (1, 2, 4, 7)) -> str:
    """Expected soak time at the seeds' 18 % vs 2 % for each number of rounds splitting ``budget``."""
    session_s = SESSION_S / CONCURRENCY
    lines = ["| rounds (blocks a side) | block | P(pd_amplified) | expected sessions a side | expected time, "
             f"switch {SWITCH_S:g} s | expected time, switch 10 s |", "|---:|---:|---:|---:|---:|---:|"]
    for rounds in candidates:
        design = Design(block=budget // rounds, rounds=rounds)
        oc = operating_characteristics(design, 0.18, 0.02)
        slow, fast = (expected_seconds(oc, design, session_s, s) for s in (SWITCH_S, 10.0))
        lines.append(f"| {rounds} | {design.block} | {oc.verdicts['pd_amplified']:.4f} | {oc.expected_sessions:.0f} "
                     f"| {slow:.0f} s | {fast:.0f} s |")
    return "\n".join(lines)


Recall = Callable[[int, float], float]


def reach(index_topk: int) -> Recall:
    """A server's recall of a needle at depth ``d`` of ``n`` tokens: the window, else the indexer."""
    return lambda n, d: 1.0 if n * (1 - d) <= WINDOW_SIZE else selection_probability(n, index_topk)


def window_only(n: int, d: float) -> float:
    """A PD transfer that keeps only the window's index entries."""
    return 1.0 if n * (1 - d) <= WINDOW_SIZE else 0.0


def _side(rng_draws: list[list[float]], cells: list[tuple[int, float]], recall: Recall, rule: RecallRule,
          required: int, error: bool) -> dict[str, Any]:
    out = []
    for (n, d), draws in zip(cells, rng_draws, strict=True):
        trials, hit, miss = [], 0, 0
        for t, u in enumerate(draws):
            if rule.state(hit, miss) is not None:
                break
            ok = u < recall(n, d)
            hit, miss = hit + ok, miss + (not ok)
            trials.append({"trial": t, "code": f"{n}-{d}-{t}", "recalled": ok, "error": None})
        outcome = {"passed": "recalled", "failed": "missed"}[str(rule.state(hit, miss))]
        out.append({"context_tokens": n, "depth": d, "trials": trials, "outcome": outcome, "asked_trials": len(trials),
                    "required": n <= required})
    failed = any(c["required"] and c["outcome"] == "missed" for c in out)
    if error:
        return {"status": "error", "summary": "the server answered 500 before any cell", "evidence": {}}
    return {"status": "failed" if failed else "passed", "summary": "", "evidence": {"cells": out}}


def needle_oc(pd: Recall, combined: Recall, grid: list[int], required: int, runs: int, seed: int,
              pd_error: bool = False, shared: bool = False) -> dict[str, float]:
    """P(each verdict) over ``runs`` simulated experiments (both sides the same prompts; ``shared``: a prompt's
    outcome drawn once for both sides, else apart on each)."""
    rng = random.Random(seed)
    rule = RecallRule()
    cells = [(n, d) for n in grid for d in DEPTHS]
    counts: Counter[str] = Counter()
    for _ in range(runs):
        draws = [[rng.random() for _ in range(rule.trials)] for _ in cells]
        # The simulated servers draw a prompt's recall apart on each side (salted by their mode); a real model's
        # recall is mostly the prompt's: `shared` draws once for both, the other way bounds the first.
        theirs = draws if shared else [[rng.random() for _ in range(rule.trials)] for _ in cells]
        a = _side(draws, cells, pd, rule, required, pd_error)
        b = _side(theirs, cells, combined, rule, required, False)
        counts[compare_needle(a, b)[0]] += 1
    return {v: counts[v] / runs for v in VERDICTS}


def scenarios(runs: int, seed: int) -> list[tuple[str, str, dict[str, float]]]:
    """(suite, scenario, P(each verdict)) for every scenario of the table."""
    topk512, topk1024 = reach(512), reach(1024)

    def lossy(n: int, d: float) -> float:  # a PD-only 10 % loss on top of the shared limit
        return 0.9 * topk512(n, d)

    rows = [
        ("soak", "PD-only corruption: PD 18 %, combined 0 %", soak_oc(0.18, 0.0)),
        ("soak", "amplified: PD 18 %, combined 2 % (the seeds)", soak_oc(0.18, 0.02)),
        ("soak", "amplified: PD 6 %, combined 2 %", soak_oc(0.06, 0.02)),
        ("soak", "shared: both 6 %", soak_oc(0.06, 0.06)),
        ("soak", "clean: both 0 %", soak_oc(0.0, 0.0)),
        ("soak", "clean: both 0.1 %", soak_oc(0.001, 0.001)),
        ("soak", "cannot measure: PD finished 0 sessions", soak_oc(0.18, 0.02, n_pd=0)),
        ("soak", "amplified 18 % vs 2 % at the former 150 sessions", soak_oc(0.18, 0.02, 150, 150)),
        ("needle", "PD-only truncation (index_topk 1024, default grid, required 5500)",
         needle_oc(window_only, topk1024, DEFAULT_GRID, 5500, runs, seed)),
        ("needle", "shared recall limit (index_topk 512, seed 000 grid, required 5500)",
         needle_oc(topk512, topk512, SEED_000_GRID, 5500, runs, seed)),
        ("needle", "the same, a prompt's recall drawn once for both sides",
         needle_oc(topk512, topk512, SEED_000_GRID, 5500, runs, seed, shared=True)),
        ("needle", "index_topk 512, required 2000 (both pass; limit named)",
         needle_oc(topk512, topk512, SEED_000_GRID, 2000, runs, seed)),
        ("needle", "ignored override (1024 asked, 512 computed; default grid, required 5500)",
         needle_oc(topk512, topk512, DEFAULT_GRID, 5500, runs, seed)),
        ("needle", "PD 10 % recall loss on the shared limit (512, required 5500)",
         needle_oc(lossy, topk512, SEED_000_GRID, 5500, runs, seed)),
        ("needle", "clean (index_topk 1024, default grid, required 5500)",
         needle_oc(topk1024, topk1024, DEFAULT_GRID, 5500, runs, seed)),
        ("needle", "cannot measure: PD's needle gate errors",
         needle_oc(topk1024, topk1024, DEFAULT_GRID, 5500, 1, seed, pd_error=True)),
    ]
    return rows


def table(rows: list[tuple[str, str, dict[str, float]]]) -> str:
    """The markdown table of docs/evidence.md."""
    lines = ["| suite | scenario | " + " | ".join(VERDICTS) + " |", "|---|---|" + "---:|" * len(VERDICTS)]
    for suite, name, probs in rows:
        lines.append(f"| {suite} | {name} | " + " | ".join(f"{probs[v]:.4f}" for v in VERDICTS) + " |")
    return "\n".join(lines)


def sequential_table(design: Design) -> str:
    """The alternating design's rows beside the fixed design's expected cost (600 sessions a side)."""
    lines = ["| scenario | rounds x block | " + " | ".join(VERDICTS) + " | expected sessions a side |",
             "|---|---|" + "---:|" * (len(VERDICTS) + 1)]
    for name, shape, probs, sessions in sequential_rows(design):
        lines.append(f"| {name} | {shape} | " + " | ".join(f"{probs[v]:.4f}" for v in VERDICTS)
                     + f" | {sessions:.1f} |")
    return "\n".join(lines)


PROSE = """## Isolation: PD against one combined server (`playbooks/isolate.yml`)

The experiment runs the same suite on the serving PD release and on one combined server with the same
settings, then decides where a bug lives. Each verdict is stated only from tests that rejected at 0.05
(`dsv4deploy/isolate/compare.py`, `needle_compare.py`); ``a`` is the soak's `soak_acceptable_rate` (0.5 %).

- **A side that could not measure** (no soak session finished, no needle cell asked, a gate error or a
  deadline, the server never started) makes the verdict `inconclusive`, naming why, whatever the other
  suites say.
- **PD shown worse**: soak, Fisher's exact test one-sided; needle, McNemar's exact one-sided test on the
  prompts one side alone missed, per context length and only where the combined server recalls (each of its
  cells there passed the k-of-n rule), Holm-corrected over those lengths.
- **A side shown clean / failing**: soak, its exact one-sided 95 % bound below / above ``a`` (0 of 598
  shows 0.5 %); needle, its gate passed / failed by its own rule over the required cells.
- **Alike**: the PD/combined rate ratio's exact interval ends below 2x. Soak: the conditional interval
  (Clopper-Pearson on PD's share of the events, scaled by the sample sizes; exact for counts,
  conservative for binomial rates). Needle, over the required lengths where the combined server fails:
  each side's Clopper-Pearson interval, the ratio of their ends (misses near 100 % bound it tightly: 8 of
  8 against 8 of 8 gives 0.63-1.6). The seeds' amplification is 9x, and 3x (6 % against 2 %) is an
  amplification worth finding.

| verdict | stated when |
|---|---|
| `pd_specific` | PD shown worse, and the combined side shown clean |
| `pd_amplified` | PD shown worse, and the combined side shown failing |
| `shared_path` | both shown failing, the ratio shown within 2x, the combined side not shown worse |
| `clean` | both shown clean (needle: and PD nowhere shown worse) |
| `inconclusive` | anything else, saying what more evidence would decide |

Needle lengths where both sides miss alike (no significant difference either way) are reported as "the
model's limit at N tokens", apart from the verdict; misses beyond `needle_required_tokens` decide nothing.
A cell stops at its verdict, so a length pairs at most 4 prompts a cell that PD alone misses: one cell a
length cannot reach p < 0.05 (0.5^4 = 0.0625); two depths can.

**Size.** The soak rows below are the fixed design, 600 sessions a side judged once (the playbook's
before the alternating design further down, which it now runs and which stops sooner at the seeds'
rates); the plan line shows the budget, its rounds and the estimated time. At the former 150 a side,
the seeds' 18 % against 2 % read `pd_amplified` 58 % of the time (last soak row).

Measured on the embedded host (`bench/isolation_seeds.py`, the 2-core CI machine shared with other
suites; seconds are the isolate run's, both sides and the restore): seed 002's corruption at its rates
(tool_call_corruption 0.095 a call, two turns: PD 15.7-17.7 % of 600 sessions, the combined server
1.8-3.2 %) read `pd_amplified` 3 of 3 (142.7 s, 194.1 s, 181.7 s), at comparable occupancy (PD's
decode 27.2-27.9 running on average, the combined server 28.9-30.1); seed 000 (index_topk
512, required 5500) `shared_path` 3 of 3 (63-94 s), the limit at 4000-8000 tokens named; with the
requirement at 2000 `clean` 2 of 2 (115 s, 120 s), the limit at 4000 named; a PD-only truncation at
index_topk 1024 on the default grid `pd_specific` 3 of 3 (128-133 s), the limit at 12000 named. No
false alarm: a clean index_topk 1024 release on the default grid read `clean` 2 of 2 (95 s, 130 s; the
limit at 8000 and 12000 named), as did the requirement-2000 runs and the integration tier's clean release.

P(each verdict), `bench/isolation_oc.py --write` (do not edit by hand): soak rows exact (every count
pair with probability above 1e-12 judged by `decide_rates`, 600 sessions a side, independent sessions);
needle rows simulated, RUNS experiments a row (seed SEED), each cell asked as the gate asks it (the needle's
sequential rule, read in trial order and stopped at its verdict; curve cells judged too, the harder case)
on the same prompts on both sides, recall per cell as in the simulated model
(`dsv4deploy/sim/recall.py`: the 128-token window always, else `index_topk`'s reach; a truncating
transfer keeps only the window). A prompt's outcome is drawn apart on each side, as the simulator draws
it (the harder case for `shared_path`); one row draws it once for both, as a model whose recall is the
prompt's would. The seed 000 grid is 1000-8000 tokens, the default 1000-12000, three
depths each.
"""


SEQUENTIAL = """**The alternating group-sequential soak** (`dsv4deploy/isolate/sequential.py`), what
`playbooks/isolate.yml` runs: `dsv4_isolate_soak_sessions` 700 a side in `dsv4_isolate_soak_rounds` 2 (1
runs the fixed design above, at the budget). Sides alternate in rounds on the same hosts: a block of
sessions on PD, then the same number on the combined server (A-B), and after each round the pooled counts
are judged by the same `decide_rates` at that look's level. It stops at the first decided look, or at the
budget (rounds x block sessions a side, 700 by default), whose verdict stands. Each look's level is the
Hwang-Shih-DeCani spending (gamma -4, O'Brien-Fleming-like) of 0.05 over the looks (0.006 then 0.044 at two
looks), for every test of the verdict including the ratio interval; the levels sum to 0.05, so by Bonferroni
over the looks no test rejects a true hypothesis with probability above 0.05, whatever the correlation
between looks. Pooling the blocks is valid because every block gives both sides the same number of sessions:
a drift over time adds the same expected count to both sides and cannot make one look worse
(`tests/unit/isolate/test_sequential.py` measures Fisher's size under a drift from 0.5 % to 8 %); the
report's block rows (`block_rows`) show each block's counts so a drift is seen.

Exact P(each verdict) of the default design (2 rounds of 350 sessions a side), by dynamic programming over
the pooled count pairs look by look (mass below 1e-13 dropped), with the expected sessions a side; the fixed
design spends 600 a side always and reads the seeds' 18 % against 2 % `pd_amplified` 0.9557. The alternating
design reads it 0.9697 for 507 sessions a side on average (15 % fewer), and 6 % against 2 % 0.9522; its
price is 700 sessions a side (not 600) where the combined side must be shown clean (`pd_specific`, `clean`):
a clean side can only be shown at the last look's level (0 of 598 at 0.05, 0 of 623 at 0.044)."""

ROUNDS = """**The number of blocks.** A switch between the sides is a restart (stop one side, wait for the GPUs,
start the other; the estimate's `SWITCH_S` assumes 120 s on a real model); each round pays two. Expected
soak time at the seeds' 18 % against 2 % for the same 700-session budget split into more rounds, with a
session taking 5 s at 32 at once (`dsv4deploy/isolate/estimate.py`'s assumption). At 120 s a switch one
round (no alternation) is cheapest and two rounds (A-B-A-B) cost 10 % more: `choose_rounds` takes the
cheapest of at least two rounds, so the default is 2 x 350; at a 10 s switch four rounds would be
cheapest."""

def section(runs: int, seed: int) -> str:
    """The whole isolation section of docs/evidence.md, between the markers dsv4deploy.gates.oc keeps."""
    from dsv4deploy.gates.oc import ISOLATION_BEGIN, ISOLATION_END

    prose = PROSE.replace("RUNS", str(runs)).replace("SEED", str(seed))
    design = Design()
    return (f"{ISOLATION_BEGIN}\n{prose}\n{table(scenarios(runs, seed))}\n\n{SEQUENTIAL}\n\n"
            f"{sequential_table(design)}\n\n{ROUNDS}\n\n{rounds_table()}\n{ISOLATION_END}")


def write(runs: int, seed: int) -> Path:
    """Replace (or append) the isolation section of docs/evidence.md."""
    from dsv4deploy.gates.oc import DOC, ISOLATION_BEGIN, ISOLATION_END

    text = DOC.read_text(encoding="utf-8")
    new = section(runs, seed)
    if ISOLATION_BEGIN in text and ISOLATION_END in text:
        text = text[:text.index(ISOLATION_BEGIN)] + new + text[text.index(ISOLATION_END) + len(ISOLATION_END):]
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    DOC.write_text(text, encoding="utf-8")
    return DOC


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument("--write", action="store_true", help="replace the section of docs/evidence.md")
    opts = parser.parse_args()
    if opts.write:
        print(f"wrote {write(opts.runs, opts.seed)}")
    else:
        print(table(scenarios(opts.runs, opts.seed)))
        print(sequential_table(Design()))
        print(rounds_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
