"""Exposure scores of the rendered units (systemd-analyze security --offline=true) and their report rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dsv4deploy.report import hardening

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed (apt-get install systemd)")


def golden_units(name: str) -> dict[str, str]:
    files = {f"units/{p.name}": p.read_text() for p in (GOLDEN / name / "units").glob("*.service")}
    return hardening.unit_files(files)


@needs_analyze
def test_rendered_units_score_as_hardened() -> None:
    scores = hardening.score_units({**golden_units("pd-systemd"), **golden_units("combined-systemd")})
    assert set(scores) == {"sglang-dsv4-prefill.service", "sglang-dsv4-decode.service",
                           "sglang-dsv4-router.service", "sglang-dsv4.service"}
    for unit, score in scores.items():
        assert score["rating"] == "OK", (unit, score)
    # The hardening targets: the router needs no device and is locked down further than the GPU servers (which keep
    # their devices, JIT and pinned memory).
    assert scores["sglang-dsv4-router.service"]["exposure"] <= 1.5
    assert all(s["exposure"] <= 2.0 for s in scores.values()), scores


@needs_analyze
def test_an_unhardened_unit_scores_as_exposed() -> None:
    plain = "[Unit]\nDescription=plain\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
    score = hardening.score_units({"plain.service": plain})["plain.service"]
    assert score["exposure"] > 9 and score["rating"] == "UNSAFE"


def test_gpu_servers_keep_their_devices() -> None:
    # CUDA opens /dev/nvidia*, RDMA /dev/infiniband/*: hardening must not take devices from the servers.
    for unit, text in golden_units("pd-systemd").items():
        if "router" in unit:
            continue
        settings = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line and not line.startswith("#")}
        assert not settings & {"PrivateDevices", "DevicePolicy", "DeviceAllow"}, unit


def test_score_plan_and_markdown_cover_every_host_with_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardening.shutil, "which", lambda _: None)
    plan = {"hosts": {"gpu1": {"files": {"units/a.service": "x", "bin/serve-a.sh": "y"}},
                      "ctl": {"files": {"supervisor/a.conf": "z"}}}}
    scores = hardening.score_plan(plan)
    assert scores == {"gpu1": {"a.service": {"error": "systemd-analyze not found on the controller"}}}
    rows = hardening.markdown(scores)
    assert rows[0] == "## Unit hardening"
    assert "| gpu1 | a.service | - | not scored: systemd-analyze not found on the controller |" in rows
