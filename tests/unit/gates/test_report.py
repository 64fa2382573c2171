"""Deploy reports: report.json fields, a readable report.md, the heatmap, and reports/latest."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import pytest

from dsv4deploy.gates import GateResult, GateStatus, run_needle, run_smoke
from dsv4deploy.report import build_report, predraw_heatmap, render_markdown, update_latest, write_report

from .stubs import always, model

BREAKER_BODY = "No available prefill workers (all circuits open or unhealthy)"


def gate(name: str, status: str, summary: str = "fine", **evidence) -> GateResult:
    return GateResult(name=name, status=GateStatus(status), seconds=1.25, summary=summary, evidence=evidence)


def needle_gate(stub) -> GateResult:
    server = stub({"POST /v1/chat/completions": model(full_recall_tokens=1500, window_tokens=300)})
    return run_needle(
        server.url, "dsv4", context_lengths=[1000, 2000], depths=[0, 1], required_tokens=1000, deadline_s=30
    )


def rolled_back(stub) -> dict:
    server = stub({"POST /v1/chat/completions": always((503, BREAKER_BODY))})
    smoke = run_smoke(server.url, "dsv4", deadline_s=0.3, breaker_cooldown_s=60)
    return build_report(
        release="20261001T100000Z-abcdef0123",
        previous_release="20260930T090000Z-0123456789",
        topology="pd",
        verdict="rolled_back",
        endpoint="http://127.0.0.1:8000",
        gates=[gate("readiness", "passed"), gate("config", "passed"), smoke, needle_gate(stub)],
        generated_at=datetime(2026, 10, 1, 10, 5, tzinfo=UTC),
    )


def test_report_json_has_the_contract_fields(stub, tmp_path):
    data = rolled_back(stub)
    paths = write_report(tmp_path / data["release"], data)
    saved = json.loads(paths["json"].read_text())
    assert saved["release"] == "20261001T100000Z-abcdef0123"
    assert saved["previous_release"] == "20260930T090000Z-0123456789"
    assert (saved["topology"], saved["verdict"], saved["failed_gate"]) == ("pd", "rolled_back", "smoke")
    assert saved["endpoint"] == "http://127.0.0.1:8000"
    assert [(g["name"], g["status"]) for g in saved["gates"]] == [
        ("readiness", "passed"),
        ("config", "passed"),
        ("smoke", "failed"),
        ("needle", "passed"),
    ]
    assert all({"seconds", "evidence"} <= set(g) for g in saved["gates"])
    cells = {(c["context_tokens"], c["depth"]): c["recalled"] for c in saved["needle"]["cells"]}
    assert cells == {(1000, 0.0): True, (1000, 1.0): True, (2000, 0.0): False, (2000, 1.0): True}


def test_report_md_reads_like_a_report(stub, tmp_path):
    data = rolled_back(stub)
    md = write_report(tmp_path, data)["md"].read_text()
    first = md.splitlines()[2]
    assert first.startswith("**ROLLED BACK** from `20261001T100000Z-abcdef0123` to `20260930T090000Z-0123456789`")
    assert "gate `smoke` failed: no good answer" in first
    assert "| smoke | ❌ failed |" in md and "| readiness | ✅ passed | 1.2 | fine |" in md
    # each cell: its k/n and the exact 95 % interval (a 2000-token cell at depth 0 loses every trial: 4 misses)
    assert "| 1000 |" in md and "| ✓ 4/4 (40%-100%) | ✓ 4/4 (40%-100%) | 2/2 |" in md
    assert "| 2000 |" in md and "| ✗ 0/1 (0%-98%) | ✓ 1/1 (3%-100%) | 1/2 |" in md  # the curve: one trial a cell
    assert ("A cell recalls on 4 recalled with no miss, 9 with 1, 12 with 2, 14 with 3, or 15 of 19 independent "
            "trials, read in order") in md
    assert "## Failures (raw answers)" in md and "### smoke (failed)" in md
    assert f"```\n{BREAKER_BODY}\n```" in md


def test_heatmap_is_skipped_and_said_so_without_matplotlib(stub, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib...` fail
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.colors", None)
    data = rolled_back(stub)
    paths = write_report(tmp_path, data)
    assert "heatmap" not in paths and not (tmp_path / "needle-heatmap.png").exists()
    assert "Heatmap skipped: matplotlib is not installed" in paths["md"].read_text()


def test_heatmap_is_drawn_with_matplotlib(stub, tmp_path):
    pytest.importorskip("matplotlib")
    paths = write_report(tmp_path, rolled_back(stub))
    assert paths["heatmap"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![needle recall heatmap](needle-heatmap.png)" in paths["md"].read_text()


def test_a_heatmap_drawn_ahead_is_taken_only_for_the_same_cells(stub, tmp_path):
    pytest.importorskip("matplotlib")
    data = rolled_back(stub)
    ahead = tmp_path / "ahead"
    ahead.mkdir()
    # As the gates hand them on: the report gets them back through the play's variables, as JSON.
    drawn = predraw_heatmap(ahead, [GateResult.model_validate(g) for g in data["gates"]], data["release"])
    assert drawn is not None and drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    same = write_report(tmp_path / "same", json.loads(json.dumps(data)), drawn=ahead)
    assert same["heatmap"].read_bytes() == drawn.read_bytes()
    assert "![needle recall heatmap](needle-heatmap.png)" in same["md"].read_text()
    # A cell that came out otherwise (another run's drawing in the folder) is drawn anew, not copied.
    data["needle"]["cells"][0]["recalled"] = not data["needle"]["cells"][0]["recalled"]
    other = write_report(tmp_path / "other", data, drawn=ahead)
    assert other["heatmap"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert other["heatmap"].read_bytes() != drawn.read_bytes()


def test_nothing_is_drawn_ahead_without_a_needle_or_matplotlib(stub, tmp_path, monkeypatch):
    assert predraw_heatmap(tmp_path, [gate("smoke", "passed")]) is None
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.colors", None)
    assert predraw_heatmap(tmp_path, [needle_gate(stub)]) is None
    assert list(tmp_path.iterdir()) == []


def test_promoted_report_without_needle(tmp_path):
    data = build_report(
        release="r2",
        previous_release="r1",
        topology="combined",
        verdict="promoted",
        endpoint="http://h:30000",
        gates=[gate("readiness", "passed"), gate("smoke", "passed")],
    )
    md = write_report(tmp_path, data)["md"].read_text()
    assert data["failed_gate"] is None and data["needle"] is None
    assert "**PROMOTED** `r2`: 2 of 2 gates passed." in md
    assert "Needle" not in md and "Failures" not in md


def test_table_cells_are_escaped_and_fences_lengthened(tmp_path):
    body = "```\nnested | fence\n```"
    failing = gate("config", "failed", "a | b\nc", failures=[{"what": "x", "status": 500, "body": body}])
    data = build_report(
        release="r", previous_release=None, topology="pd", verdict="failed", endpoint=None, gates=[failing]
    )
    md = write_report(tmp_path, data)["md"].read_text()
    assert "| config | ❌ failed | 1.2 | a \\| b c |" in md
    assert f"````\n{body}\n````" in md


def test_update_latest_points_at_the_release_and_moves(tmp_path):
    (tmp_path / "r1").mkdir()
    (tmp_path / "r2").mkdir()
    link = update_latest(tmp_path, "r1")
    assert link == tmp_path / "latest" and link.readlink().as_posix() == "r1"
    update_latest(tmp_path, "r2")
    assert (tmp_path / "latest").readlink().as_posix() == "r2" and (tmp_path / "latest").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "r1", "r2"]


def test_update_latest_refuses_bad_targets(tmp_path):
    with pytest.raises(ValueError, match="no report directory"):
        update_latest(tmp_path, "missing")
    (tmp_path / "r1").mkdir()
    (tmp_path / "latest").mkdir()
    with pytest.raises(ValueError, match="not a symlink"):
        update_latest(tmp_path, "r1")


def test_unknown_verdict_raises():
    with pytest.raises(ValueError, match="verdict must be one of"):
        build_report(release="r", previous_release=None, topology="pd", verdict="green", endpoint=None, gates=[])


def _perf_figures(itl: float) -> dict:
    return {"key": "k", "load": {"requests": 16, "concurrency": 4, "prompt_tokens": 128, "output_tokens": 32},
            "client": {"ttft_p50_s": 0.02, "itl_p50_s": itl, "output_tokens_per_s": 300.0},
            "servers": {"sglang-dsv4-decode": {"itl_p50_s": itl}}}


def test_report_shows_the_perf_figures_beside_the_last_good_releases(tmp_path):
    regression = {"where": "client", "figure": "itl_p50_s", "baseline": 0.01, "current": 0.03, "factor": 3.0}
    perf = gate("perf", "failed", "slower", figures=_perf_figures(0.03), judged=True, tolerance=1.0,
                regressions=[regression], baseline={**_perf_figures(0.01), "release": "r1"})
    data = build_report(release="r2", previous_release="r1", topology="pd", verdict="rolled_back",
                        endpoint="http://h:8000", gates=[gate("readiness", "passed"), perf])
    md = write_report(tmp_path, data)["md"].read_text()
    assert "## Performance" in md
    assert "Judged against release r1 (the last good one on these hosts), tolerance 100%: 1 figure(s) regressed." in md
    assert "| client | inter-token p50 | 30.0 ms | 10.0 ms | 3.00x ✗ |" in md
    assert "| sglang-dsv4-decode | inter-token p50 | 30.0 ms | 10.0 ms | 3.00x |" in md


def test_report_says_a_first_release_was_recorded_not_judged(tmp_path):
    perf = gate("perf", "passed", "recorded", figures=_perf_figures(0.01), judged=False,
                not_judged_because="no earlier figures: the first release with a performance record", regressions=[])
    data = build_report(release="r1", previous_release=None, topology="pd", verdict="promoted",
                        endpoint="http://h:8000", gates=[perf])
    md = write_report(tmp_path, data)["md"].read_text()
    assert "Recorded, not judged: no earlier figures: the first release with a performance record." in md
    assert "| client | output tokens/s | 300.0 | - | - |" in md


def test_report_plots_latency_and_throughput_against_the_previous_release(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    perf = gate("perf", "passed", "within", figures=_perf_figures(0.012), judged=True, tolerance=1.0,
                regressions=[], baseline={**_perf_figures(0.01), "release": "r1"})
    data = build_report(release="r2", previous_release="r1", topology="pd", verdict="promoted",
                        endpoint="http://h:8000", gates=[perf])
    paths = write_report(tmp_path, data)
    png = paths["perf_plot"].read_bytes()
    assert paths["perf_plot"].name == "perf-vs-previous.png" and png.startswith(b"\x89PNG") and len(png) > 5000
    assert "![latency and throughput against the previous release](perf-vs-previous.png)" in paths["md"].read_text()


def test_a_first_release_has_no_comparison_plot(tmp_path):
    perf = gate("perf", "passed", "recorded", figures=_perf_figures(0.01), judged=False, regressions=[])
    data = build_report(release="r1", previous_release=None, topology="pd", verdict="promoted",
                        endpoint="http://h:8000", gates=[perf])
    assert "perf_plot" not in write_report(tmp_path, data)


def test_an_inconclusive_bake_is_said_on_the_first_line():
    bake = GateResult(name="bake", status=GateStatus.INCONCLUSIVE, seconds=3.0, summary="inconclusive: ...",
                      evidence={"verdict": "inconclusive"})
    data = build_report(release="r2", previous_release="r1", topology="pd", verdict="promoted",
                        endpoint="http://h:8000", gates=[gate("readiness", "passed"), bake])
    md = render_markdown(data)
    assert "**PROMOTED** `r2`: 1 of 2 gates passed. INCONCLUSIVE: bake (the release stays, not judged)." in md
    assert "| bake | ❔ inconclusive | 3.0 | inconclusive: ... |" in md


def test_a_soak_that_could_not_decide_is_the_gate_that_refused_a_rolled_back_release():
    soak = GateResult(name="soak", status=GateStatus.INCONCLUSIVE, seconds=9.0,
                      summary="inconclusive: 0 of 30 sessions corrupted; at least 35 more clean sessions would decide",
                      evidence={"more_sessions_to_decide": 35})
    refused = build_report(release="r2", previous_release="r1", topology="pd", verdict="rolled_back",
                           endpoint="http://h:8000", gates=[gate("readiness", "passed"), soak])
    assert refused["failed_gate"] == "soak"
    # let through by dsv4_gates_inconclusive: pass, it refused nothing
    passed = build_report(release="r2", previous_release="r1", topology="pd", verdict="promoted",
                          endpoint="http://h:8000", gates=[gate("readiness", "passed"), soak])
    assert passed["failed_gate"] is None


def test_a_weakened_run_is_marked_on_the_first_line_naming_each_setting():
    data = build_report(release="r2", previous_release="r1", topology="pd", verdict="promoted",
                        endpoint="http://h:8000", gates=[gate("readiness", "passed")])
    data["weakened"] = ["soak_enabled is false", "needle is left out of dsv4_gates_names"]
    first = render_markdown(data).splitlines()[2]
    assert first.startswith("**WEAKENED** (soak_enabled is false; needle is left out of dsv4_gates_names). "
                            "**PROMOTED** `r2`")


def test_the_heatmap_carries_the_verdict_the_release_and_a_line_at_the_required_length():
    pytest.importorskip("matplotlib")
    from dsv4deploy.report.heatmap import heatmap_figure, heatmap_title

    cells = [{"context_tokens": n, "depth": d, "recalled": n <= 4000} for n in (1000, 4000, 8000) for d in (0.1, 0.9)]
    for verdict in ("passed", "failed"):
        fig = heatmap_figure([(heatmap_title(4000, verdict, "r7"), cells)], 4000)
        (ax,) = fig.axes
        assert ax.get_title().startswith(f"Needle {verdict.upper()} - release r7")
        assert "required: every cell up to 4000 tokens" in ax.get_title()
        # The requirement's line: vertical, dashed, between the 4000 column (index 1) and the 8000 one.
        (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert list(line.get_xdata()) == [1.5, 1.5] and line.get_label() == "required: 4000 tokens"
    # No requirement, no line.
    fig = heatmap_figure([(heatmap_title(), cells)])
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == "--"]


def test_report_md_says_what_serves_where_and_labels_the_rechecks_after_a_rollback():
    readiness = gate("readiness", "passed", "loaded in 54.0 s", load_s=54.0, deadline_s=300.0)
    data = build_report(release="r2", previous_release="r1", topology="pd", verdict="rolled_back",
                        endpoint="http://gpu1:30000", gates=[readiness, gate("needle", "failed", "missed"),
                                                             gate("readiness", "passed", "r1 ready"),
                                                             gate("smoke", "passed", "OK")],
                        metadata={"gate_phases": ["deploy", "deploy", "rollback", "rollback"]})
    data["fleet"] = [{"field": "prefill[0]", "role": "prefill", "host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4,
                      "sglang_version": "0.5.23", "gpu_memory_gib": 96.0, "weights_gib": 33.06, "kv_pool_gib": 43.7,
                      "mem_fraction_static": 0.8}]
    md = render_markdown(data)
    assert "Load time (readiness, start to every server ready): **54.0 s** of a 300 s deadline (passed)." in md
    assert ("| prefill[0] (prefill) | gpu1 | 0, 1, 2, 3 | 4 | 0.5.23 | 96.0 GPU: weights 33.1, KV cache 43.7 "
            "(mem_fraction_static 0.8) |") in md
    gates, rechecks = md.split("## Gates")[1].split("## Re-checks after the rollback")
    assert "| needle |" in gates and "r1 ready" not in gates
    assert "r1 ready" in rechecks and "| smoke |" in rechecks and "| needle |" not in rechecks
