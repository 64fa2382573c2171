"""How long the isolation experiment will take, from the sample sizes it chose, for its plan line.

Each side runs the same suite: the soak's fixed ``soak_sessions`` (``dsv4_isolate_soak_sessions``), the
needle grid's cells (lengths x depths, and trials per cell where the needle asks each several times),
the parity prompts. The rates are assumptions, said so in the line: a four-turn tool-call session takes
about 5 s and ``soak_concurrency`` run at once (the embedded host does about 3 sessions a second at 16
at once; a real model is slower), a needle cell about 4 s with ``needle_concurrency`` at once, a parity
suite about 60 s, and each switch (to the combined server, and the restore) about 2 min. The line
says "about": the rates are not measured on the hosts before the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: Assumed seconds of one soak session (four tool-call turns) and of one needle cell, each with its
#: gate's concurrency; seconds of one parity suite; seconds of one switch between the sides (stop, start).
SESSION_S = 5.0
CELL_S = 4.0
PARITY_S = 60.0
SWITCH_S = 120.0


def suite_seconds(name: str, settings: Any) -> float:
    """About how long one side's `name` suite takes with the gate `settings` (a GateSettings)."""
    if name == "soak":
        return math.ceil(settings.soak_sessions / settings.soak_concurrency) * SESSION_S
    if name == "needle":
        return math.ceil(needle_cells(settings) / settings.needle_concurrency) * CELL_S
    if name == "parity":
        return PARITY_S
    return 5.0  # smoke: a request or two


def needle_cells(settings: Any) -> int:
    """The needle's prompts per side: lengths x depths x trials per cell (1 where there is no such setting)."""
    trials = int(getattr(settings, "needle_trials", 1) or 1)
    return len(settings.needle_lengths) * len(settings.needle_depths) * trials


def estimate(suite: Sequence[str], settings: Any, rounds: int = 1) -> dict[str, Any]:
    """``{seconds, line}``: the experiment's estimated time at most, both sides and their switches, and the
    plan line's phrase naming the sample sizes it rests on. ``rounds``: the soak's alternating rounds (its
    budget ``soak_sessions`` a side split into blocks, two switches a round; docs/evidence.md)."""
    rounds = rounds if "soak" in suite and rounds > 1 else 1
    per_side = {name: suite_seconds(name, settings) for name in suite}
    seconds = 2 * sum(per_side.values()) + 2 * rounds * SWITCH_S
    sizes = []
    if "soak" in suite and rounds > 1:
        sizes.append(f"at most {settings.soak_sessions} soak sessions a side in {rounds} rounds of "
                     f"{settings.soak_sessions // rounds} (a block on PD, then one on the combined server, a look "
                     f"after each, stopping when decided), {settings.soak_concurrency} at once (assumed "
                     f"{SESSION_S:g} s a session)")
    elif "soak" in suite:
        sizes.append(f"{settings.soak_sessions} soak sessions a side, {settings.soak_concurrency} at once "
                     f"(assumed {SESSION_S:g} s a session)")
    if "needle" in suite:
        trials = int(getattr(settings, "needle_trials", 1) or 1)
        cells = needle_cells(settings) // trials
        sizes.append(f"at most {needle_cells(settings)} needle prompts a side ({cells} cells x {trials} trials), "
                     f"{settings.needle_concurrency} at once (assumed {CELL_S:g} s a prompt)")
    if "parity" in suite:
        sizes.append(f"parity about {PARITY_S:g} s a side")
    switches = "the switch and the restore" if rounds == 1 else f"{2 * rounds} switches, the restore among them"
    line = (f"estimated time about {_minutes(seconds)}{' at most' if rounds > 1 else ''}: " + "; ".join(sizes)
            + f"; {_minutes(2 * rounds * SWITCH_S)} for {switches}")
    return {"seconds": round(seconds), "line": line}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
