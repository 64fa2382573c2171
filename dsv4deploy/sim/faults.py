"""Parse ``DSV4_SIM_FAULTS``: comma-separated ``name`` or ``name=value`` switches."""

from __future__ import annotations

from dataclasses import dataclass

# name -> value kind ("flag" takes no value)
KNOWN_FAULTS: dict[str, str] = {
    "warmup_s": "float",
    "first_errors": "int",
    "crash_on_start": "flag",
    "crash_after_s": "float",
    "never_ready": "flag",
    "ignore_override": "flag",
    "pd_transfer_truncate": "flag",
    "tool_call_corruption": "float",
    "tool_call_mistakes": "float",
    "slow_release": "float",
    "kv_pool_fallback": "flag",
    "slow_decode": "float",
    "degrade_after": "int",
    "metrics_error": "flag",
    "wrong_answers": "float",
    "needle_recall": "float",
    "needle_recall_from": "int",
}


class FaultError(ValueError):
    """A fault specification that cannot be honoured (unknown name, bad value)."""


@dataclass(frozen=True)
class Faults:
    """The faults switched on for one simulated process; all off by default."""

    warmup_s: float = 0.0
    first_errors: int = 0
    crash_on_start: bool = False
    crash_after_s: float = 0.0
    never_ready: bool = False
    ignore_override: bool = False
    pd_transfer_truncate: bool = False
    tool_call_corruption: float = 0.0
    tool_call_mistakes: float = 0.0  # a well-formed tool call with a wrong value (a model mistake), any server
    slow_release: float = 0.0
    kv_pool_fallback: bool = False
    slow_decode: float = 1.0  # every decode step takes this many times as long (a release without CUDA graphs)
    degrade_after: int = 0  # 0: never; N: wrong answers from the (N+1)-th generation on
    metrics_error: bool = False  # /metrics answers HTTP 500 while serving is unchanged (metrics that cannot be read)
    wrong_answers: float = 0.0  # this share of arithmetic word problems is answered miscalculated
    # A question about a fact in the prompt is answered from it with this probability (fixed per prompt, as at
    # temperature 0; independent across prompts), for prompts of at least needle_recall_from tokens: a cell
    # of the needle grid that recalls p of its trials.
    needle_recall: float = 1.0
    needle_recall_from: int = 0


def parse_faults(spec: str | None) -> Faults:
    """Turn ``"warmup_s=3,ignore_override"`` into :class:`Faults`; raise FaultError if invalid."""
    values: dict[str, object] = {}
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        kind = KNOWN_FAULTS.get(name)
        if kind is None:
            known = ", ".join(sorted(KNOWN_FAULTS))
            raise FaultError(f"unknown fault {name!r} in DSV4_SIM_FAULTS (known: {known})")
        if kind == "flag":
            if sep and raw.strip().lower() not in ("1", "true", "yes", "on"):
                raise FaultError(f"fault {name!r} takes no value (got {raw!r})")
            values[name] = True
            continue
        if not sep:
            raise FaultError(f"fault {name!r} needs a value: {name}=<{kind}>")
        try:
            value = int(raw) if kind == "int" else float(raw)
        except ValueError:
            raise FaultError(f"fault {name!r} needs a {kind} value, got {raw!r}") from None
        rate = name in ("tool_call_corruption", "tool_call_mistakes", "wrong_answers", "needle_recall")
        if value < 0 or (rate and value > 1) or (name == "slow_decode" and value < 1):
            raise FaultError(f"fault {name!r} value out of range: {raw!r}")
        values[name] = value
    return Faults(**values)  # type: ignore[arg-type]
