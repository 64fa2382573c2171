"""The sglang metrics `dsv4deploy monitoring` queries are the real sglang's: each name is declared by the metrics
collector of the sglang release in the contract venv (so an alert never watches a series no server exports)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsv4deploy import cli
from tests.unit.monitoring.test_generate import LOCAL, REPO, used_sglang_metrics

pytestmark = pytest.mark.contract
COLLECTORS = sorted((REPO / ".contract-venv").glob(
    "lib/python*/site-packages/sglang/srt/observability/metrics_collector.py"))


@pytest.mark.skipif(not COLLECTORS, reason="no contract venv with sglang here: run ./scripts/setup.sh contract")
def test_every_sglang_metric_queried_is_declared_by_the_real_collector(tmp_path: Path) -> None:
    declared = set(re.findall(r'name="(sglang:[a-z0-9_]+)"', COLLECTORS[0].read_text()))
    assert cli.main(["monitoring", "-i", LOCAL, "--out", str(tmp_path)]) == 0
    used = used_sglang_metrics(tmp_path)
    assert used and used <= declared, sorted(used - declared)
