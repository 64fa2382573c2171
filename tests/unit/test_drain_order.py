"""Stop order of a switchover: router first (it drains), decode before prefill, whatever the names."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.module_utils.layout import kind_of, release_services


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
