"""Stop order of a switchover: router first (it drains), decode before prefill, whatever the names; the
roles come from the release's record of its services (services.json), else from the names."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.module_utils.layout import chosen, kind_of, release_services


def test_release_services_are_in_drain_order(tmp_path: Path) -> None:
    bin_dir = tmp_path / "current" / "bin"
    bin_dir.mkdir(parents=True)
    names = ["sglang-dsv4-prefill", "sglang-dsv4-prefill-2", "sglang-dsv4-decode-2", "sglang-dsv4-router",
             "sglang-dsv4-decode"]
    for name in names:
        (bin_dir / f"serve-{name}.sh").write_text("#!/bin/sh\n")
    assert release_services(str(tmp_path)) == [
        "sglang-dsv4-router", "sglang-dsv4-decode", "sglang-dsv4-decode-2", "sglang-dsv4-prefill",
        "sglang-dsv4-prefill-2"]


def test_the_combined_server_stops_with_the_prefills() -> None:
    assert [kind_of(n) for n in ("sglang-dsv4", "sglang-dsv4-router", "sglang-dsv4-decode-3")] == [
        "prefill", "router", "decode"]


def test_the_release_record_not_the_name_says_a_service_role(tmp_path: Path) -> None:
    # services.json (dsv4deploy.plan.release_record) knows each role: names that say nothing of it still
    # stop in drain order, and `only` picks by the recorded role.
    current = tmp_path / "current"
    (current / "bin").mkdir(parents=True)
    records = [{"name": "kv-prefill", "role": "prefill", "drain_rank": 2}, {"name": "edge", "role": "router",
               "drain_rank": 0}, {"name": "kv-decode", "role": "decode", "drain_rank": 1}]
    for record in records:
        (current / "bin" / f"serve-{record['name']}.sh").write_text("#!/bin/sh\n")
    (current / "services.json").write_text(json.dumps({"format": 1, "host": "h", "services": records}))
    root = str(tmp_path)
    assert release_services(root) == ["edge", "kv-decode", "kv-prefill"]
    assert [chosen(root, None, only) for only in ("router", "decode", "prefill", "workers")] == [
        ["edge"], ["kv-decode"], ["kv-prefill"], ["kv-decode", "kv-prefill"]]
    assert chosen(root, ["kv-prefill", "edge"], "router") == ["edge"], "given names take their recorded roles"


def test_an_unreadable_record_falls_back_to_the_names(tmp_path: Path) -> None:
    current = tmp_path / "current"
    (current / "bin").mkdir(parents=True)
    for name in ("sglang-dsv4-router", "sglang-dsv4"):
        (current / "bin" / f"serve-{name}.sh").write_text("#!/bin/sh\n")
    (current / "services.json").write_text("{not json")
    assert chosen(str(tmp_path), None, "router") == ["sglang-dsv4-router"]
    assert release_services(str(tmp_path)) == ["sglang-dsv4-router", "sglang-dsv4"]
