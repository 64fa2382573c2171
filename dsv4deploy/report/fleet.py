"""The report's "At a glance" section: what serves where - hosts, GPUs, sglang version, memory per GPU - and
the load time readiness measured, the first things an operator looks for."""

from __future__ import annotations

import re
from typing import Any

_FIELD = re.compile(r"^(\w+)\[(\d+)\]$")


def fleet_rows(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per server of `plan`: its field (prefill[0]), role, host, GPUs, sglang version and memory per GPU
    (from the plan's memory check, where it made one)."""
    spec = plan.get("spec") or {}
    versions = {w["host"]: w.get("sglang_version") for w in plan.get("workers") or []}
    rows = []
    for mem in plan.get("memory") or []:
        found = _FIELD.match(str(mem.get("field", "")))
        entry = (spec.get(found.group(1)) or [])[int(found.group(2))] if found else {}
        entry = entry if isinstance(entry, dict) else {}
        rows.append({"field": mem.get("field"), "role": mem.get("role"), "host": mem.get("host"),
                     "gpus": list(entry.get("gpus") or []), "tp_size": mem.get("tp_size"),
                     "sglang_version": versions.get(mem.get("host")),
                     "gpu_memory_gib": mem.get("gpu_memory_gib"), "weights_gib": mem.get("weights_gib"),
                     "kv_pool_gib": mem.get("kv_pool_gib"), "mem_fraction_static": mem.get("mem_fraction_static")})
    return rows


def _gib(value: Any) -> str:
    return f"{float(value):.1f}" if isinstance(value, int | float) else "-"


def markdown(data: dict[str, Any]) -> list[str]:
    """The section's lines ([] when the report has neither servers nor a readiness gate)."""
    rows = data.get("fleet") or []
    readiness = next((g for g in data.get("gates") or [] if g["name"] == "readiness"), None)
    lines: list[str] = []
    if readiness is not None:
        ev = readiness.get("evidence") or {}
        load = ev.get("load_s", readiness.get("seconds"))
        deadline = f" of a {ev['deadline_s']:g} s deadline" if isinstance(ev.get("deadline_s"), int | float) else ""
        lines.append(f"Load time (readiness, start to every server ready): **{float(load):.1f} s**{deadline}"
                     f" ({readiness['status']}).")
    if rows:
        lines += [*([""] if lines else []), "| server | host | GPUs | TP | sglang | memory per GPU (GiB) |",
                  "|---|---|---|---:|---|---|"]
        for r in rows:
            memory = (f"{_gib(r['gpu_memory_gib'])} GPU: weights {_gib(r['weights_gib'])}, KV cache "
                      f"{_gib(r['kv_pool_gib'])} (mem_fraction_static {r['mem_fraction_static']})")
            gpus = ", ".join(map(str, r["gpus"])) or "-"
            lines.append(f"| {r['field']} ({r['role']}) | {r['host']} | {gpus} | {r['tp_size'] or '-'} | "
                         f"{r['sglang_version'] or '-'} | {memory} |")
    return ["## At a glance", "", *lines] if lines else []
