"""The wait for stopped servers' GPU memory (module_utils.gpus.wait_released), against an nvidia-smi
stand-in that logs each call: the GPUs our stopped processes held count, and are asked about only when a
GPU is still at the threshold."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import gpus


def _smi(tmp_path: Path, used: dict[int, int], apps: str) -> tuple[list[str], Path]:
    """nvidia-smi for GPUs `used` (index -> MiB); `apps` is its compute-apps CSV; it logs each query."""
    calls = tmp_path / "calls"
    rows = "\\n".join(f"{i}, GPU-{i}, {mib}, 81920" for i, mib in used.items())
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$1" >> {calls}\ncase "$1" in\n'
                   f'  --query-gpu=*) printf "{rows}\\n";;\n  --query-compute-apps=*) printf "{apps}";;\nesac\n')
    smi.chmod(0o755)
    return [str(smi)], calls


def test_all_free_needs_no_compute_apps_query(tmp_path: Path) -> None:
    cmd, calls = _smi(tmp_path, {0: 4, 1: 4}, "GPU-1, 4242, 900\\n")
    done = gpus.wait_released(cmd, [0], [4242], 1024, timeout_s=1, poll_s=0.05)
    assert done["gpus"][0]["used"] == 4
    assert [c.split("=")[0] for c in calls.read_text().split()] == ["--query-gpu"]


def test_a_gpu_our_stopped_process_held_counts(tmp_path: Path) -> None:
    # GPU 1 is not in the layout, but our stopped pid 4242 still holds it: the wait times out on it.
    cmd, calls = _smi(tmp_path, {0: 4, 1: 30000}, "GPU-1, 4242, 30000\\n")
    with pytest.raises(gpus.GpuError, match="GPU 1 uses 30000 MiB"):
        gpus.wait_released(cmd, [0], [4242], 1024, timeout_s=0.2, poll_s=0.05)
    assert "--query-compute-apps" in calls.read_text()


def test_a_busy_gpu_of_someone_else_outside_the_layout_does_not_hold_the_wait(tmp_path: Path) -> None:
    cmd, _ = _smi(tmp_path, {0: 4, 1: 30000}, "GPU-1, 999, 30000\\n")
    assert gpus.wait_released(cmd, [0], [4242], 1024, timeout_s=1, poll_s=0.05)["gpus"][0]["used"] == 4


def test_table_and_apps_asks_both_at_once(tmp_path: Path) -> None:
    cmd, calls = _smi(tmp_path, {0: 4, 1: 30000}, "GPU-1, 999, 30000\\n")
    table, apps = gpus.table_and_apps(cmd)
    assert table == {0: {"uuid": "GPU-0", "used": 4, "total": 81920},
                     1: {"uuid": "GPU-1", "used": 30000, "total": 81920}}
    assert apps == [{"gpu_uuid": "GPU-1", "pid": 999, "used": 30000}]
    assert sorted(c.split("=")[0] for c in calls.read_text().split()) == ["--query-compute-apps", "--query-gpu"]


def test_table_and_apps_of_an_old_driver_without_uuids(tmp_path: Path) -> None:
    # An nvidia-smi that refuses the uuid fields: the queries without them are asked instead.
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$1" in\n  *uuid*) exit 6;;\n  --query-gpu=*) echo "0, 12, 81920";;\n'
                   '  --query-compute-apps=*) echo "777, 12";;\nesac\n')
    smi.chmod(0o755)
    table, apps = gpus.table_and_apps([str(smi)])
    assert table == {0: {"uuid": "", "used": 12, "total": 81920}}
    assert apps == [{"gpu_uuid": "", "pid": 777, "used": 12}]


def test_a_missing_query_command_is_named(tmp_path: Path) -> None:
    with pytest.raises(gpus.GpuError, match=r"GPU query command not found: .*absent-smi"):
        gpus.table_and_apps([str(tmp_path / "absent-smi")])
