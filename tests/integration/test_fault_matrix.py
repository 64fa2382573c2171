"""Fault matrix: simulated server faults, alone and in the pairs the seeds met, on PD and combined.

Every case must end in its expected verdict and exit code, with one line naming the gate and its evidence,
the release that served before still serving and verified when the deploy was refused, and every earlier
release still on disk. The table of results is written to docs/fault-matrix.md.

CI runs the `ci` grid (the pairs and the combined cases the other integration tests do not cover);
DSV4_FAULT_MATRIX=full runs every case (the committed table is from a full run).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.integration.simhost import REPO, SMALL_NEEDLE_RULE, SimHost

pytestmark = pytest.mark.integration
GRID = ["-e", "needle_required_tokens=5500", "-e", '{"needle_lengths": [2000, 5500], "needle_depths": [0.5]}',
        "-e", "readiness_deadline_s=30", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120",
        "-e", "soak_enabled=false", *SMALL_NEEDLE_RULE,
        # Keep every release, so "every earlier release is still on disk" holds over the whole matrix.
        "-e", "dsv4_release_keep=100"]
SOAK = ["-e", "soak_enabled=true"]
DOC = REPO / "docs" / "fault-matrix.md"


def faults(**by_role: str) -> list[str]:
    return ["-e", json.dumps({"sim_faults_by_role": by_role})]


# (case, grid it belongs to, topology, extra args, expected verdict, expected failed gate)
CASES = [
    ("warmup_s alone", "full", "pd", ["-e", "sim_faults=warmup_s=3"], "promoted", None),
    ("first_errors alone", "full", "pd", ["-e", "sim_faults=first_errors=3"], "promoted", None),
    ("first_errors + warmup_s", "ci", "pd", ["-e", "sim_faults=first_errors=3,warmup_s=2"], "promoted", None),
    ("crash_on_start (prefill)", "full", "pd", faults(prefill="crash_on_start"), "rolled_back", "readiness"),
    ("never_ready", "full", "pd", ["-e", "sim_faults=never_ready", "-e", "readiness_deadline_s=6"],
     "rolled_back", "readiness"),
    # Dies 7 s in, after supervisord's startsecs, while still loading: the readiness wait watches the
    # programs, so this fails in seconds, not at the 120 s deadline (the row's seconds show it).
    ("crash_after_s (decode, mid-load)", "full", "pd",
     [*faults(decode="warmup_s=60,crash_after_s=7"), "-e", "readiness_deadline_s=120"], "rolled_back", "readiness"),
    ("ignore_override (all)", "full", "pd", ["-e", "sim_faults=ignore_override"], "rolled_back", "needle"),
    ("ignore_override (decode only)", "ci", "pd", faults(decode="ignore_override"), "rolled_back", "smoke"),
    ("pd_transfer_truncate", "full", "pd", ["-e", "sim_faults=pd_transfer_truncate"], "rolled_back", "needle"),
    ("tool_call_corruption alone", "full", "pd", ["-e", "sim_faults=tool_call_corruption=0.15", *SOAK],
     "promoted", None),
    ("slow_release within the deadline", "full", "pd", ["-e", "sim_faults=slow_release=4"], "promoted", None),
    ("slow_release beyond the release deadline", "ci", "pd",
     ["-e", "sim_faults=slow_release=8", "-e", "dsv4_service_gpu_free_timeout_s=5"], "promoted", None),
    ("(next deploy after slow_release=8, deadline 5 s)", "ci", "pd",
     ["-e", "dsv4_service_gpu_free_timeout_s=5"], "rolled_back", "switchover"),
    # Correct but three times slower: only the perf gate, against the last good release's figures, sees it.
    ("slow_decode=3 (decode)", "full", "pd", [*faults(decode="slow_decode=3"), "-e", json.dumps(
        {"dsv4_gates_names": ["readiness", ["config", "smoke"], ["needle", "soak"], "perf"]})], "rolled_back", "perf"),
    # Wrong answers only after 200 requests: every gate passes (the bake is what would catch it).
    ("degrade_after=200 (decode)", "full", "pd", faults(decode="degrade_after=200"), "promoted", None),
    ("pd_transfer_truncate (combined)", "ci", "combined", ["-e", "sim_faults=pd_transfer_truncate"], "promoted", None),
    ("crash_on_start (combined)", "ci", "combined", faults(combined="crash_on_start"), "rolled_back", "readiness"),
    ("never_ready (combined)", "full", "combined", ["-e", "sim_faults=never_ready", "-e", "readiness_deadline_s=6"],
     "rolled_back", "readiness"),
    ("ignore_override (combined)", "full", "combined", ["-e", "sim_faults=ignore_override"], "rolled_back", "needle"),
    ("first_errors + warmup_s (combined)", "full", "combined", ["-e", "sim_faults=first_errors=3,warmup_s=2"],
     "promoted", None),
]
GRID_NAME = os.environ.get("DSV4_FAULT_MATRIX", "ci")
SELECTED = [c for c in CASES if GRID_NAME == "full" or c[1] == "ci"]
ROWS: list[dict] = []


def verified(host: SimHost) -> list[str]:
    return json.loads((host.install_root / "state.json").read_text()).get("good", [])


def evidence_line(stdout: str, report: dict) -> str:
    """One line naming the gate and its evidence: the run's last words (ROLLED BACK / FAILED ...), whole.

    Ansible wraps a long message over several output lines; the report keeps the failure on one.
    """
    marks = [m for m in ("ROLLBACK FAILED", "ROLLED BACK", "FAILED at") if m in stdout]
    if report.get("failed_gate"):
        head = marks[0] if marks else report["verdict"]
        gate, failure = report["failed_gate"], " ".join(report.get("failure", "").split())
        return f"{head}: {failure if failure.startswith(f'gate {gate}') else f'gate {gate}: {failure}'}"[:400]
    return f"{report['verdict']}: " + ", ".join(f"{g['name']} {g['status']}" for g in report.get("gates", []))


@pytest.fixture(scope="module")
def matrix_host(sim_host: SimHost):
    proc = sim_host.playbook("deploy.yml", *GRID)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return sim_host


@pytest.mark.parametrize(("case", "grid", "topology", "args", "verdict", "gate"), SELECTED,
                         ids=[c[0] for c in SELECTED])
def test_fault_case(matrix_host: SimHost, case: str, grid: str, topology: str, args: list[str], verdict: str,
                    gate: str | None) -> None:
    host = matrix_host
    before_active, before_releases = host.active_release(), set(os.listdir(host.install_root / "releases"))
    t0 = time.monotonic()
    proc = host.playbook("deploy.yml", "-e", f"topology={topology}", *GRID, *args)
    report = host.report()
    row = {"case": case, "topology": topology, "expected": f"{verdict} {gate or ''}".strip(), "rc": proc.returncode,
           "verdict": report["verdict"], "gate": report.get("failed_gate") or "-",
           "line": evidence_line(proc.stdout, report), "seconds": round(time.monotonic() - t0)}
    ok_rc = (proc.returncode == 0) == (verdict == "promoted")
    kept = before_releases <= set(os.listdir(host.install_root / "releases"))
    serving = host.active_release() == (before_active if verdict != "promoted" else report["release"])
    good = host.active_release() in verified(host)
    row["ok"] = ok_rc and kept and serving and good and report["verdict"] == verdict and (
        gate is None or report.get("failed_gate") == gate)
    row["after"] = f"{'serving' if serving else 'NOT serving'}, {'verified' if good else 'NOT verified'}, " \
                   f"{'releases kept' if kept else 'RELEASES LOST'}"
    ROWS.append(row)
    write_table()  # after every case, so a cut-short run still leaves its rows
    assert (report["verdict"], report.get("failed_gate") or None) == (verdict, gate), row["line"]
    assert ok_rc, f"exit code {proc.returncode} for {verdict}"
    assert serving and good and kept, row["after"]


def write_table() -> None:
    if not ROWS:
        return
    lines = ["# Fault matrix", "",
             f"Written by `tests/integration/test_fault_matrix.py` (grid `{GRID_NAME}`; "
             "`DSV4_FAULT_MATRIX=full` runs every case). Each row is one real `deploy.yml` against the simulated "
             "host; *after* checks that the release that should serve does, that it is verified, and that "
             "every earlier release is still on disk.", "",
             f"{sum(r['ok'] for r in ROWS)} of {len(ROWS)} cases ended as expected.", "",
             "| case | topology | expected | verdict | exit | gate | after | s | one line |",
             "|---|---|---|---|---:|---|---|---:|---|"]
    for r in ROWS:
        line = r["line"].replace("|", "\\|")
        lines.append(f"| {r['case']} | {r['topology']} | {r['expected']} | {r['verdict']}{'' if r['ok'] else ' ✗'} "
                     f"| {r['rc']} | {r['gate']} | {r['after']} | {r['seconds']} | {line} |")
    Path(DOC).write_text("\n".join(lines) + "\n")
