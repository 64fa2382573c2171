"""Whether a model override changed what the server computes: the answers before and after, compared.

A flag in the start log proves it was passed and ``/server_info`` proves it was parsed; neither proves the
model computes with it (the seeds' "logged but not applied": sglang 0.5.23 under transformers 5 reports
``rope_theta`` and keeps the base from ``rope_parameters``). What does is the answers: the last good release
recorded the fixed prompt set's greedy tokens and top-5 logprobs (the parity gate's record,
dsv4deploy.gates.parity). When this release differs from it only in overrides, the same prompts are asked
again and compared:

- answers changed beyond the hardware's tolerance: the changed overrides are shown applied;
- answers bit-identical (every token and logprob equal): the changed overrides are shown not applied, for the
  keys whose effect reaches every prompt (:data:`EVERY_PROMPT`: the RoPE base rotates every position after
  the first); for other keys identical answers prove nothing (a context extension acts only beyond the
  native length), so they stay not shown;
- anything between (differences within the tolerance, a near tie): not shown either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from dsv4deploy.gates.parity import compare_prompt, fixed_prompts

#: Override keys whose effect reaches every prompt's logprobs, so identical answers show them not applied.
EVERY_PROMPT = ("rope_theta", "rope_parameters", "rope_scaling", "partial_rotary_factor", "rms_norm_eps",
                "hidden_act", "num_hidden_layers", "tie_word_embeddings", "final_logit_softcapping")
APPLIED, NOT_APPLIED, NOT_SHOWN = "applied", "not applied", "not shown"


def overrides_of(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides in a parity record's ``settings`` (per role, as JSON), merged across roles."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key.endswith(".overrides") and isinstance(value, str):
            out.update(json.loads(value))
    return out


def changed(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Override keys whose value differs: {key: (last good release's, this release's)} (None: not set)."""
    return {k: (theirs.get(k), ours.get(k)) for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)}


def judge(settings: Mapping[str, Any], topology: str, baseline: Mapping[str, Any] | None, tolerance: float,
          ask: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per override key of this release (and each key it dropped): ``{shown, why}``.

    ``settings`` and ``topology`` are this release's as the parity gate records them; ``baseline`` the last
    good release's parity record; ``ask(prompts)`` asks this release the prompts and returns its record."""
    ours = overrides_of(settings)
    if not baseline or not baseline.get("outputs"):
        return {k: {"shown": NOT_SHOWN, "why": "no last good release's answers to compare with"} for k in ours}
    theirs = overrides_of(baseline.get("settings") or {})
    diff = changed(ours, theirs)
    others = [k for k in sorted(set(settings) | set(baseline.get("settings") or {}))
              if not k.endswith(".overrides") and settings.get(k) != (baseline.get("settings") or {}).get(k)]
    if baseline.get("topology") != topology:
        others.insert(0, "topology")
    unchanged = {k: {"shown": NOT_SHOWN, "why": "unchanged since the last good release: nothing to compare"}
                 for k in ours if k not in diff}
    if not diff:
        return unchanged
    if others:
        why = f"the last good release differs in more than overrides ({', '.join(others[:3])})"
        return {**unchanged, **{k: {"shown": NOT_SHOWN, "why": why} for k in diff}}
    asked = [p for p in fixed_prompts() if "tokens" in (baseline["outputs"].get(p["id"]) or {})]
    record = ask(asked)
    rows = [{"prompt": p["id"], **compare_prompt(record[p["id"]], baseline["outputs"][p["id"]], tolerance)}
            for p in asked if "tokens" in record.get(p["id"], {})]
    if len(rows) < len(asked) or not rows:
        why = f"{len(asked) - len(rows)} of {len(asked)} prompts could not be asked again"
        return {**unchanged, **{k: {"shown": NOT_SHOWN, "why": why} for k in diff}}
    moved = [r for r in rows if not r["within_tolerance"]]
    same = all(r["first_divergent"] is None and r["max_delta"] == 0 for r in rows)
    what = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in diff.items())
    out = dict(unchanged)
    for key in diff:
        if moved:
            first = moved[0]
            out[key] = {"shown": APPLIED, "why": (
                f"{len(moved)} of {len(rows)} prompts answer otherwise than the last good release did before {what} "
                f"(first: {first['prompt']}, max logprob delta {first['max_delta']:.3g})")}
        elif same and key in EVERY_PROMPT:
            out[key] = {"shown": NOT_APPLIED, "why": (
                f"all {len(rows)} prompts answer bit-identically (every token and top-5 logprob) to the last good "
                f"release before {what}, which changes every prompt's logprobs when applied")}
        else:
            out[key] = {"shown": NOT_SHOWN, "why": (
                f"the {len(rows)} prompts answer as before {what}, within tolerance {tolerance:g}: "
                + ("bit-identical, but this setting need not act on them" if same else "noise cannot be told apart"))}
    return out
