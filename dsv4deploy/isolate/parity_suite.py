"""The parity suite of the isolation playbook: PD's and the combined server's records compared.

Each side runs the ``parity`` gate, which records the fixed prompt set's greedy tokens and top-5 logprobs
(:mod:`dsv4deploy.gates.parity`). Here the two records are compared: a prompt out of tolerance on the
PD side, with the same settings on the combined server, puts the difference in the PD path (the KV
transfer); the verdict becomes ``pd_specific`` unless both sides failed their other suites alike
(``shared_path`` stands). A record missing on either side leaves the parity part undecided, said as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsv4deploy.gates.parity import compare, markdown_table

SUITE = "parity"


def _record(side: Mapping[str, Any]) -> Mapping[str, Any] | None:
    gate = next((g for g in side.get("gates") or [] if g.get("name") == SUITE), None)
    return ((gate or {}).get("evidence") or {}).get("record")


def comparison(sides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """PD against combined on the fixed set (None when the suite did not include parity)."""
    pd, combined = _record(sides["pd"]), _record(sides["combined"])
    if pd is None and combined is None:
        return None
    if pd is None or combined is None:
        missing = "PD" if pd is None else "combined"
        return {"outcome": "error", "reason": f"parity: no record from the {missing} side"}
    tolerance = float(pd.get("tolerance", combined.get("tolerance", 0.05)))
    decision, rows, per_length = compare(pd["outputs"], combined["outputs"], tolerance)
    return {**decision.evidence(), "prompts": rows, "by_length": per_length, "tolerance": tolerance}


def with_parity(verdict: tuple[str, str], parity: Mapping[str, Any] | None) -> tuple[str, str]:
    """The experiment's verdict once the parity comparison is counted."""
    name, why = verdict
    if parity is None:
        return verdict
    if parity["outcome"] == "failed" and name != "shared_path":
        return "pd_specific", (f"PD and the combined server with the same settings compute differently: "
                               f"{parity['reason']}; the difference is in the PD path (KV transfer)"
                               + ("" if name == "clean" else f". The other suites: {why}"))
    if parity["outcome"] == "error":
        # A side that could not measure decides nothing, whatever the other suites say.
        return "inconclusive", f"{parity['reason']}: the parity suite could not compare the sides. Other suites: {why}"
    return verdict


def markdown(parity: Mapping[str, Any] | None) -> list[str]:
    """The report's section: the verdict line and the table per prompt length."""
    if parity is None:
        return []
    lines = ["## Parity: PD against combined (greedy, top-5 logprobs)", "", f"{parity['outcome']}: {parity['reason']}",
             ""]
    if parity.get("by_length"):
        lines += [markdown_table(parity["by_length"]), ""]
        diverged = [r for r in parity["prompts"] if r["first_divergent"] is not None]
        lines += [f"- {r['prompt']}: first divergent token {r['first_divergent']}, max delta {r['max_delta']:.3g} "
                  "over the shared prefix" for r in diverged[:8]]
        lines.append("")
    return lines
