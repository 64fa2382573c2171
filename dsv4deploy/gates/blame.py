"""Which hosts a gate that did not pass names: what a failed run's cause points the reader at.

A gate's evidence names what failed by worker name, URL or host (``failures``, ``died``, ``unreachable``).
A gate asked through the router (smoke, needle, soak) names the router only: every worker behind it
answered that request, so every host of the gate's targets is named, the router's first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# Where a gate's evidence lists what went wrong, each entry a mapping.
_NAMED = ("died", "unreachable", "failures")


def _mentions(text: str, word: str) -> bool:
    """Whether `word` (a worker's name or URL) stands in `text` on its own, not inside a longer name."""
    return bool(word) and re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", text) is not None


def hosts_named(gate: Mapping[str, Any], targets: Mapping[str, Any]) -> list[str]:
    """The hosts gate result `gate` (a ``GateResult`` as a mapping) names in its evidence, in the targets'
    order (`targets`: the gate targets, ``dsv4deploy.plan.models.GateTargets`` as a mapping): each worker's host
    where an entry names the worker (by name or URL) or the host itself, the endpoint's host where one names
    the router or the endpoint. A gate that names none went through the router to all of them: the endpoint's
    host, then every worker's host."""
    evidence = gate.get("evidence") or {}
    entries = [entry for key in _NAMED for entry in evidence.get(key) or [] if isinstance(entry, Mapping)]
    workers = list(targets.get("workers") or [])
    endpoint_host = str(targets.get("endpoint_host") or "")
    every = list(dict.fromkeys([endpoint_host, *(str(w.get("host", "")) for w in workers)]))
    router = [str(u) for u in (targets.get("endpoint"), targets.get("router_url")) if u] + ["router"]
    named: list[str] = []
    for entry in entries:
        text = json.dumps(entry, default=str)
        if entry.get("host"):
            named.append(str(entry["host"]))
        if any(_mentions(text, word) for word in router):
            named.append(endpoint_host)
        named += [str(w["host"]) for w in workers
                  if _mentions(text, str(w.get("name", ""))) or _mentions(text, str(w.get("url", "")))]
    found = set(named)
    return [host for host in every if host in found] or [host for host in every if host]
