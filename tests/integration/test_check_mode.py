"""`--check --diff` tells the truth on a fresh and on a serving host, and a failure is one line, once.

The tests of this module run in order on one simulated host: fresh first, then serving.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.integration.simhost import SMALL_NEEDLE, SMALL_SOAK, SimHost

pytestmark = pytest.mark.integration

FAST = ["-e", "readiness_deadline_s=20", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK,
        *SMALL_NEEDLE]


def snapshot(host: SimHost) -> dict[str, object]:
    """Everything a check run must leave alone: files under the install root, reports, running processes."""
    files = {}
    for root in (host.install_root, host.reports):
        for path in sorted(root.rglob("*")) if root.exists() else []:
            if path.is_symlink():
                files[str(path)] = ("link", os.readlink(path))
            # Servers keep logging while they run, and supervisord's own log records a program entering
            # RUNNING after its startsecs, which can land after the run before returned (pids cover it).
            elif path.is_file() and "logs" not in path.parts and path.name != "supervisord.log":
                files[str(path)] = ("file", path.stat().st_mtime_ns, path.read_bytes())
    return {"files": files, "pids": host.pids() if host.install_root.exists() else {}}


def one_line(output: str, start: str) -> list[str]:
    """Each place `output` says the line starting with `start`, whitespace joined (callbacks may wrap a
    long message over several terminal lines): up to the end of that message."""
    flat = " ".join(output.replace("\\n", " ").split())
    return [start + part.split("TASK [")[0].split(" fatal: ")[0].split("PLAY RECAP")[0]
            for part in flat.split(start)[1:]]


def test_check_on_a_fresh_host_changes_nothing_and_shows_the_files(sim_host: SimHost) -> None:
    before = snapshot(sim_host)
    proc = sim_host.playbook("deploy.yml", "--check", "--diff", "-e", "topology=pd", "-e", "index_topk=1024")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert snapshot(sim_host) == before
    assert not (sim_host.reports / "latest").exists()
    assert "+++ after: new/bin/serve-sglang-dsv4-router.sh" in proc.stdout, "the release's files are shown as diffs"
    lines = one_line(proc.stdout, "CHECK MODE")
    assert len(lines) == 1, lines
    assert "a real run would install release" in lines[0] and "now serving: nothing" in lines[0]
    assert "local" in lines[0]


def test_check_on_a_serving_host_changes_nothing(sim_host: SimHost) -> None:
    first = sim_host.playbook("deploy.yml", "-e", "topology=pd", "-e", "index_topk=1024", *FAST)
    assert first.returncode == 0, first.stdout[-5000:]
    serving = sim_host.active_release()
    before = snapshot(sim_host)

    proc = sim_host.playbook("deploy.yml", "--check", "--diff", "-e", "topology=pd", "-e", "index_topk=512", *FAST)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert snapshot(sim_host) == before, "files, reports/latest and the running servers are untouched"
    assert "512" in proc.stdout and "1024" in proc.stdout, "the diff shows index_topk changing"
    (line,) = one_line(proc.stdout, "CHECK MODE")
    assert f"now serving: {serving}" in line and "run its gates" in line

    same = sim_host.playbook("deploy.yml", "--check", "-e", "topology=pd", "-e", "index_topk=1024", *FAST)
    assert same.returncode == 0, same.stdout[-5000:]
    (line,) = one_line(same.stdout, "CHECK MODE")
    assert f"a real run would change nothing: release {serving} already serves" in line
    assert snapshot(sim_host) == before


def last_lines(output: str, n: int) -> list[str]:
    """The last `n` non-empty lines of a run's output."""
    return [line for line in output.splitlines() if line.strip()][-n:]


def run_ending(output: str, outcome: str) -> list[str]:
    """The run's closing block: from its outcome line (which must be among the last 40 lines) to the end, where
    the console puts the cause (failed at, hosts, their log lines, serving now, fix)."""
    tail = last_lines(output, 40)
    starts = [i for i, line in enumerate(tail) if line.startswith(outcome)]
    assert starts, tail
    return tail[starts[-1]:]


def test_a_failure_is_one_line_printed_once(sim_host: SimHost, monkeypatch: pytest.MonkeyPatch) -> None:
    # The console as an operator chooses it (ANSIBLE_STDOUT_CALLBACK); the clone's ansible.cfg keeps Ansible's default.
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "dsv4.deploy.console")
    refused = sim_host.playbook("deploy.yml", "-e", "index_topk=2048")
    assert refused.returncode == 2
    # A refused spec is the plan's failure, said once, as the run's last lines.
    lines = one_line(refused.stdout + refused.stderr, "FAILED at plan, nothing was changed:")
    assert len(lines) == 1, lines
    assert "preflight" not in lines[0] and "index_topk" in lines[0]
    ending = run_ending(refused.stdout, "FAILED at plan, nothing was changed:")
    assert ending[1].startswith("  failed at: plan") and ending[-1].startswith("  fix: "), ending
    assert "Origin:" not in refused.stdout and "censored" not in refused.stdout

    # A slow load (20 s warm-up): the readiness wait says, every 8 s, what each worker's log shows and
    # the seconds left; the gates print a line each (per item only at -v); the run ends with its cause.
    rolled = sim_host.playbook("deploy.yml", "-e", "topology=pd", "-e", "index_topk=512", *FAST,
                               "-e", "sim_faults=warmup_s=20", "-e", "readiness_deadline_s=60")
    assert rolled.returncode == 2
    lines = one_line(rolled.stdout + rolled.stderr, "ROLLED BACK: gate needle failed")
    assert len(lines) == 1, lines
    report = sim_host.report()
    assert report["verdict"] == "rolled_back"
    waits = re.findall(r"\[readiness\] local: (\d+) s, (\d+) s left of 60 s: (.*)", rolled.stdout)
    assert waits, rolled.stdout[-5000:]
    assert all(abs(int(spent) + int(left) - 60) <= 1 for spent, left, _ in waits), waits
    assert any("sglang-dsv4-decode listening, warming up" in said for _, _, said in waits), waits
    readiness = next(g for g in report["gates"] if g["name"] == "readiness")
    assert readiness["seconds"] >= 15 and readiness["evidence"]["deadline_s"] == 60, readiness
    assert readiness["summary"].startswith("loaded in ") and "readiness_deadline_s as set" in readiness["summary"]
    assert "[needle] 1/" not in rolled.stdout and "[soak] 1/" not in rolled.stdout, "per item lines only at -v"
    # Bound: the tasks that print (about 20) and a line per gate and per 10 s of waiting, not one per item.
    assert len(rolled.stdout.splitlines()) < 120, len(rolled.stdout.splitlines())
    ending = run_ending(rolled.stdout, "ROLLED BACK: gate needle failed")
    assert ending[1].startswith("  failed at: needle"), ending
    assert any(line.startswith("  serving now: ") for line in ending), ending
    assert "censored" not in rolled.stdout
