"""The isolation's soak as a group-sequential design: sides alternate in blocks, a look after each pair.

The fixed design runs 600 sessions on PD, then 600 on the combined server, and judges once. This one
runs ``block`` sessions on PD, then ``block`` on the combined server (A-B), and after each such round
judges the pooled counts with :func:`dsv4deploy.isolate.compare.decide_rates` at that look's share of
the significance; it stops at the first look whose verdict is not ``inconclusive``, or when
``rounds`` rounds (the budget, ``rounds * block`` sessions a side) are spent, whose verdict stands.

**Error spending.** Every test of the verdict (Fisher's between-side test, each side's bound against the
acceptable rate, the rate ratio's interval) is run at look ``j`` at level ``alpha_j = s(j/R) - s((j-1)/R)``,
where ``s`` is the Hwang-Shih-DeCani spending function ``alpha (1 - exp(-g t)) / (1 - exp(-g))``
(``g`` = :data:`GAMMA`, O'Brien-Fleming-like: little spent early, most kept for the last look). The
levels sum to ``alpha``, so by Bonferroni over the looks no test rejects a true hypothesis at any look
with probability above ``alpha``: the same guarantee the fixed design gives, without assuming anything
about the correlation between looks (it is conservative).

**Blocks and drift.** Each round gives both sides the same number of sessions, PD first. Pooling the
blocks is valid for the between-side test because the allocation is equal in every block: a drift of the
rate over time (a warming cache, a neighbour's load) adds the same expected count to both sides, so it
cannot make one side look worse (no Simpson reversal is possible with equal allocation per stratum);
``tests/unit/isolate/test_sequential.py`` measures Fisher's size under a strong drift. The report shows
each block's counts (:func:`block_rows`) so that a drift is seen.

**The number of blocks** comes from the cost of a switch (a restart: stop one side, wait for the GPUs,
start the other) against the cost of sessions (:func:`choose_rounds`): more rounds stop sooner but pay a
switch each; at least two blocks a side (A-B-A-B) when the budget allows.

Operating characteristics, exact by dynamic programming over the count pairs at each look
(:func:`operating_characteristics`), are in docs/evidence.md (``bench/isolation_oc.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dsv4deploy.isolate.compare import ACCEPTABLE, SIGNIFICANCE, decide_rates
from dsv4deploy.spec import Problem, SpecError

#: Hwang-Shih-DeCani spending parameter: -4 spends like O'Brien-Fleming (little at the first looks).
GAMMA = -4.0
#: Probability mass below which a count is dropped from the exact computation (the dropped tails sum
#: below 1e-9 at the design's sizes).
_TINY = 1e-13


def spending(t: float, alpha: float = SIGNIFICANCE, gamma: float = GAMMA) -> float:
    """The Hwang-Shih-DeCani alpha spent by information fraction ``t`` (0 at 0, ``alpha`` at 1)."""
    if t <= 0:
        return 0.0
    if t >= 1:
        return alpha
    return alpha * (1 - math.exp(-gamma * t)) / (1 - math.exp(-gamma))


@dataclass(frozen=True)
class Design:
    """``rounds`` rounds of ``block`` sessions a side (PD then combined), a look after each round."""

    block: int = 350
    rounds: int = 2
    alpha: float = SIGNIFICANCE
    gamma: float = GAMMA

    @property
    def budget(self) -> int:
        """The most sessions a side runs."""
        return self.block * self.rounds

    def levels(self) -> list[float]:
        """Each look's significance (they sum to ``alpha``)."""
        r = self.rounds
        return [spending(j / r, self.alpha, self.gamma) - spending((j - 1) / r, self.alpha, self.gamma)
                for j in range(1, r + 1)]

    def switches(self, rounds_run: int) -> int:
        """Restarts for ``rounds_run`` rounds: to combined and back to PD between rounds, and the restore."""
        return 2 * rounds_run


def split_budget(sessions: int, rounds: int) -> Design:
    """The design that runs ``sessions`` a side in ``rounds``; raises SpecError naming the field and the fix
    when the budget cannot give every round a block on each side."""
    if rounds < 1 or sessions < rounds:
        raise SpecError([Problem(field="dsv4_isolate_soak_rounds",
                                 message=f"{rounds} rounds cannot split dsv4_isolate_soak_sessions {sessions} into "
                                         "a block a side a round",
                                 fix="use 1 round or more and at most dsv4_isolate_soak_sessions (2, the default, "
                                     "alternates the sides A-B-A-B)")])
    return Design(block=sessions // rounds, rounds=rounds)


def decide_look(kp: int, kc: int, n: int, look: int, design: Design, acceptable: float = ACCEPTABLE) -> str:
    """The verdict at look ``look`` (1-based) on pooled counts of ``n`` sessions a side."""
    level = design.levels()[look - 1]
    return decide_rates(kp, n, kc, n, acceptable, significance=level).verdict


def run_design(blocks: Sequence[tuple[int, int]], design: Design, acceptable: float = ACCEPTABLE
               ) -> tuple[str, int]:
    """(verdict, rounds used) from the per-round counts ``(pd corrupted, combined corrupted)`` of
    ``design.block`` sessions each: stops at the first decided look, as the experiment does."""
    kp = kc = 0
    verdict = "inconclusive"
    for look, (bp, bc) in enumerate(blocks[:design.rounds], start=1):
        kp, kc = kp + bp, kc + bc
        verdict = decide_look(kp, kc, look * design.block, look, design, acceptable)
        if verdict != "inconclusive":
            return verdict, look
    return verdict, min(len(blocks), design.rounds)


def block_rows(blocks: Sequence[tuple[int, int]], block: int) -> list[dict[str, float | int]]:
    """Each block's figures for the report: its counts and rates on each side."""
    return [{"block": i, "sessions": block, "pd": bp, "combined": bc, "pd_rate": bp / block,
             "combined_rate": bc / block} for i, (bp, bc) in enumerate(blocks, start=1)]


@dataclass(frozen=True)
class OperatingCharacteristics:
    """P(each verdict), the expected rounds and sessions a side, and P(stopping at each look)."""

    verdicts: dict[str, float]
    expected_rounds: float
    expected_sessions: float
    stop_at: list[float]


def _pmf(n: int, p: float) -> list[float]:
    from scipy.stats import binom

    return [float(w) for w in binom.pmf(range(n + 1), n, p)]


def operating_characteristics(design: Design, pd_rate: float, combined_rate: float,
                              acceptable: float = ACCEPTABLE) -> OperatingCharacteristics:
    """Exact OC: the distribution of the pooled counts carried look by look, the stopped mass judged."""
    from dsv4deploy.isolate import VERDICTS

    step_p, step_c = _pmf(design.block, pd_rate), _pmf(design.block, combined_rate)
    alive: dict[tuple[int, int], float] = {(0, 0): 1.0}
    out = dict.fromkeys(VERDICTS, 0.0)
    stop_at: list[float] = []
    for look in range(1, design.rounds + 1):
        grown: dict[tuple[int, int], float] = {}
        for (kp, kc), w in alive.items():
            for i, wp in enumerate(step_p):
                if w * wp < _TINY:
                    continue
                for j, wc in enumerate(step_c):
                    m = w * wp * wc
                    if m >= _TINY:
                        grown[kp + i, kc + j] = grown.get((kp + i, kc + j), 0.0) + m
        alive, stopped = {}, 0.0
        n = look * design.block
        for (kp, kc), w in grown.items():
            verdict = decide_look(kp, kc, n, look, design, acceptable)
            if verdict == "inconclusive" and look < design.rounds:
                alive[kp, kc] = w
            else:
                out[verdict] += w
                stopped += w
        stop_at.append(stopped)
    rounds = sum(look * p for look, p in enumerate(stop_at, start=1))
    return OperatingCharacteristics(out, rounds, rounds * design.block, stop_at)


def expected_seconds(oc: OperatingCharacteristics, design: Design, session_s: float, switch_s: float) -> float:
    """Expected time of the soak: two blocks of sessions and two switches a round."""
    return oc.expected_rounds * (2 * design.block * session_s + 2 * switch_s)


def choose_rounds(budget: int, session_s: float, switch_s: float, pd_rate: float = 0.18,
                  combined_rate: float = 0.02, candidates: Sequence[int] = (2, 3, 4, 5, 6, 8)) -> Design:
    """The design with the least expected time at the design point (``pd_rate`` against
    ``combined_rate``) among ``candidates`` rounds splitting ``budget`` sessions a side; two rounds
    at least (A-B-A-B), one only when the budget is too small to split."""
    options = [Design(block=budget // r, rounds=r) for r in candidates if budget // r >= 1]
    if not options:
        return Design(block=budget, rounds=1)

    def cost(d: Design) -> float:
        return expected_seconds(operating_characteristics(d, pd_rate, combined_rate), d, session_s, switch_s)

    return min(options, key=cost)


_WORST = ("error", "failed", "inconclusive", "skipped", "passed")


def pool_soak(gates: Sequence[dict], rounds: int) -> list[dict]:
    """One side's gate results with its soak blocks pooled into one soak result at the end.

    The pooled evidence has the summed counts, every block's figures (``blocks``), the look it is (one
    per block) and that look's level (``significance``) in a design of ``rounds`` rounds, which
    :func:`dsv4deploy.isolate.compare.compare_soak` judges at. One block or none: the gates unchanged.
    """
    soaks = [g for g in gates if g.get("name") == "soak"]
    if len(soaks) < 2 and rounds <= 1:
        return list(gates)
    if not soaks:
        return list(gates)
    evs = [g.get("evidence") or {} for g in soaks]
    look = len(soaks)
    levels = Design(block=1, rounds=max(rounds, look)).levels()
    evidence = {
        **evs[-1],
        "corrupted_sessions": sum(int(e.get("corrupted_sessions", 0)) for e in evs),
        "finished": sum(int(e.get("finished", 0)) for e in evs),
        "occupancy": [o for e in evs for o in (e.get("occupancy") or [])],
        "blocks": [{"block": i, "corrupted_sessions": int(e.get("corrupted_sessions", 0)),
                    "finished": int(e.get("finished", 0))} for i, e in enumerate(evs, start=1)],
        "look": look, "rounds": max(rounds, look), "significance": levels[look - 1],
    }
    if any(not e for e in evs):
        evidence = {}  # a block that measured nothing leaves the side unmeasured
    status = min((str(g.get("status")) for g in soaks), key=lambda s: _WORST.index(s) if s in _WORST else 0)
    pooled = {**soaks[-1], "status": status, "seconds": sum(float(g.get("seconds", 0)) for g in soaks),
              "summary": "; ".join(f"block {i}: {g.get('summary', '')}" for i, g in enumerate(soaks, start=1)),
              "evidence": evidence}
    return [g for g in gates if g.get("name") != "soak"] + [pooled]


def look(pd_gates: Sequence[dict], combined_gates: Sequence[dict], rounds: int,
         acceptable_default: float = ACCEPTABLE) -> dict[str, object]:
    """The interim look after a round: ``{decided, verdict, look, significance, pd, combined}`` on the
    pooled soak counts of each side; a side whose soak measured nothing decides (the experiment stops)."""
    pd_soak = [g for g in pool_soak(pd_gates, rounds) if g.get("name") == "soak"]
    combined_soak = [g for g in pool_soak(combined_gates, rounds) if g.get("name") == "soak"]
    if not pd_soak or not combined_soak or not pd_soak[0]["evidence"] or not combined_soak[0]["evidence"]:
        return {"decided": True, "verdict": "inconclusive", "look": 0, "significance": None, "pd": None,
                "combined": None}
    mine, theirs = pd_soak[0]["evidence"], combined_soak[0]["evidence"]
    kp, np_, kc, nc = mine["corrupted_sessions"], mine["finished"], theirs["corrupted_sessions"], theirs["finished"]
    acceptable = float((mine.get("design") or {}).get("acceptable_rate", acceptable_default))
    level = float(mine["significance"])
    verdict = decide_rates(kp, np_, kc, nc, acceptable, significance=level).verdict if np_ and nc else "inconclusive"
    done = verdict != "inconclusive" or int(mine["look"]) >= rounds or not np_ or not nc
    return {"decided": done, "verdict": verdict, "look": mine["look"], "significance": level,
            "pd": [kp, np_], "combined": [kc, nc]}
