"""Judge a release's performance figures against the last good release's.

A figure regresses when it is worse than the baseline by more than the tolerance (a share: 0.5 lets
a latency grow to 1.5 times the baseline and a throughput fall to 1/1.5 of it) and, for a latency,
by more than a noise floor in seconds (a 1 ms TTFT doubling to 2 ms is noise, not a regression).
Figures of different hosts or topology are never compared: the key says what the figures were
measured on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Figures the client measures; the servers' figures are judged the same way, per server.
HIGHER_IS_BETTER_SUFFIX = "_per_s"


@dataclass(frozen=True)
class Regression:
    """One figure worse than its baseline beyond the tolerance."""

    where: str  # "client" or a server's name
    figure: str
    baseline: float
    current: float
    factor: float  # how many times worse (>= 1)

    def line(self) -> str:
        """``client itl_p50_s 0.0300 vs 0.0100 (3.0x worse)``."""
        return (f"{self.where} {self.figure} {self.current:.4g} vs {self.baseline:.4g} "
                f"({self.factor:.1f}x worse)")


def worse_factor(figure: str, baseline: float, current: float) -> float:
    """How many times worse `current` is than `baseline` (1.0 or less: not worse)."""
    if figure.endswith(HIGHER_IS_BETTER_SUFFIX):
        return baseline / current if current > 0 else float("inf")
    return current / baseline if baseline > 0 else (float("inf") if current > 0 else 1.0)


def compare(current: Mapping[str, Any], baseline: Mapping[str, Any], tolerance: float,
            noise_floor_s: float, tail_tolerance: float | None = None) -> list[Regression]:
    """Every figure of `current` that regressed against `baseline` (both ``{client: {...}, servers:
    {name: {...}}}``); figures missing from either side, or None, are not judged.

    A p99 figure is judged with `tail_tolerance` (default: `tolerance`): over a short load it is one
    or two requests, and one scheduling hiccup on a busy machine moves it.
    """
    out: list[Regression] = []
    groups = [("client", current.get("client") or {}, baseline.get("client") or {})]
    groups += [(name, figs, (baseline.get("servers") or {}).get(name) or {})
               for name, figs in sorted((current.get("servers") or {}).items())]
    for where, now, before in groups:
        for figure, value in sorted(now.items()):
            old = before.get(figure)
            if value is None or old is None:
                continue
            factor = worse_factor(figure, float(old), float(value))
            latency = not figure.endswith(HIGHER_IS_BETTER_SUFFIX)
            allowed = tail_tolerance if tail_tolerance is not None and "_p99" in figure else tolerance
            if factor > 1 + allowed and not (latency and float(value) - float(old) <= noise_floor_s):
                out.append(Regression(where, figure, float(old), float(value), factor))
    return out


def unjudged(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """What `compare` skipped (issue #37 item 12): each figure, or server, measured on one side only or
    None there, as ``decode ttft_p50_s (no figure now)``; a renamed figure shows as one of each."""
    def side(figs: Mapping[str, Any]) -> set[str]:
        return {f for f, v in figs.items() if v is not None}

    out: list[str] = []
    groups = [("client", current.get("client") or {}, baseline.get("client") or {})]
    now_servers, old_servers = current.get("servers") or {}, baseline.get("servers") or {}
    groups += [(name, now_servers[name] or {}, old_servers[name] or {})
               for name in sorted(set(now_servers) & set(old_servers))]
    out += [f"{name} (no server figures now)" for name in sorted(set(old_servers) - set(now_servers))]
    out += [f"{name} (no server figures before)" for name in sorted(set(now_servers) - set(old_servers))]
    for where, now, before in groups:
        out += [f"{where} {f} (no figure now)" for f in sorted(side(before) - side(now))]
        out += [f"{where} {f} (no figure before)" for f in sorted(side(now) - side(before))]
    return out


def baseline_problem(current_key: str, baseline: Mapping[str, Any] | None) -> str:
    """Why `baseline` cannot judge figures measured on `current_key` ('' when it can)."""
    if not baseline or not baseline.get("client"):
        return "no earlier figures: the first release with a performance record"
    if baseline.get("key") != current_key:
        return (f"the last good release ({baseline.get('release') or '?'}) was measured on other hosts, topology "
                f"or load ({baseline.get('key')!r}, now {current_key!r})")
    return ""
