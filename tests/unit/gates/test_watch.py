"""Continuous verification's textfile: written by prometheus_client's writer, read back by its parser as
a Prometheus (node_exporter's textfile collector) would, with no temporary file left beside it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dsv4deploy.gates import watch
from dsv4deploy.gates.result import GateResult, GateStatus


def _gate(name: str, status: GateStatus, **evidence: object) -> GateResult:
    return GateResult(name=name, status=status, seconds=0.1, summary="", evidence=dict(evidence))


def _samples(path: Path) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(path.read_text()) for s in f.samples}


def test_the_textfile_is_valid_prometheus_text_with_every_promised_metric(tmp_path: Path) -> None:
    path = tmp_path / "textfile" / "dsv4deploy-prod.prom"
    watch.write_metrics(path, "prod", "20261201T000000Z-abc", _gate("needle", GateStatus.PASSED),
                        _gate("soak", GateStatus.FAILED, corruption_rate=0.25), 1.5, now=1700000000.0)
    samples = _samples(path)
    assert samples[("dsv4deploy_gate_passed", (("deployment", "prod"), ("gate", "canary_needle")))] == 1
    assert samples[("dsv4deploy_gate_passed", (("deployment", "prod"), ("gate", "tool_calls")))] == 0
    assert samples[("dsv4deploy_release_info", (("deployment", "prod"), ("release", "20261201T000000Z-abc")))] == 1
    assert samples[("dsv4deploy_last_verification_timestamp_seconds", (("deployment", "prod"),))] == 1700000000.0
    assert samples[("dsv4deploy_corruption_rate", (("deployment", "prod"),))] == 0.25
    assert [p.name for p in path.parent.iterdir()] == ["dsv4deploy-prod.prom"]  # written beside, then renamed


def test_a_new_run_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "dsv4deploy-prod.prom"
    watch.write_metrics(path, "prod", "a", _gate("n", GateStatus.PASSED), _gate("s", GateStatus.PASSED), 1)
    watch.write_metrics(path, "prod", "b", _gate("n", GateStatus.PASSED), _gate("s", GateStatus.PASSED), 1)
    releases = [labels for (name, labels) in _samples(path) if name == "dsv4deploy_release_info"]
    assert releases == [(("deployment", "prod"), ("release", "b"))]


def test_a_bad_config_is_refused_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "watch.json"
    config.write_text(json.dumps({"deployment": "prod", "endpoint": "http://127.0.0.1:1", "model": "m",
                                  "textfile_dir": str(tmp_path), "probe_sessions": 0}))
    assert watch.main(["--config", str(config), "--once"]) == 2
    assert "probe_sessions" in capsys.readouterr().err


def test_node_exporter_can_read_the_file_whatever_the_umask(tmp_path: Path) -> None:
    """Supervisord's umask 027 made it 0640, unreadable to node_exporter (another user)."""
    path = tmp_path / "dsv4deploy-prod.prom"
    old = os.umask(0o027)
    try:
        watch.write_metrics(path, "prod", "a", _gate("n", GateStatus.PASSED), _gate("s", GateStatus.PASSED), 1)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
