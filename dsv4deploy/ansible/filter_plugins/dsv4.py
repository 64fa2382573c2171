"""Filters that gather per-host results for controller-side gates and reports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def dsv4_collect(hosts: Iterable[str], hostvars: Mapping[str, Any], var: str, key: str) -> dict[str, Any]:
    """Merge `hostvars[h][var][key]` (a mapping) over `hosts`, skipping hosts where it is absent."""
    merged: dict[str, Any] = {}
    for host in hosts:
        value = hostvars[host].get(var) if hasattr(hostvars[host], "get") else None
        if isinstance(value, Mapping) and isinstance(value.get(key), Mapping):
            merged.update(value[key])
    return merged


def dsv4_per_host(hosts: Iterable[str], hostvars: Mapping[str, Any], var: str, key: str) -> dict[str, Any]:
    """`{host: hostvars[host][var][key]}` over `hosts`, skipping hosts where it is absent."""
    out: dict[str, Any] = {}
    for host in hosts:
        value = hostvars[host].get(var) if hasattr(hostvars[host], "get") else None
        if isinstance(value, Mapping) and key in value:
            out[host] = value[key]
    return out


def dsv4_all_true(hosts: Iterable[str], hostvars: Mapping[str, Any], var: str) -> bool:
    """True when `var` is true on every host in `hosts`."""
    return all(bool(hostvars[h].get(var)) for h in hosts)


class FilterModule:
    """dsv4deploy filters."""

    def filters(self) -> dict[str, Any]:
        return {"dsv4_collect": dsv4_collect, "dsv4_per_host": dsv4_per_host, "dsv4_all_true": dsv4_all_true}
