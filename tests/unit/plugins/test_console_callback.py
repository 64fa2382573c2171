"""The stdout callback's ending: a run's outcome as its last lines, the failure's gate, logs and fix after it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.callback.console import ending, first_line

REPO = Path(__file__).resolve().parents[3]


def test_a_failed_run_ends_with_its_line_then_the_gate_the_host_log_and_fix() -> None:
    outcome = {"dsv4_rollout_verdict": "rolled_back", "dsv4_rollout_serving": "r1",
               "dsv4_rollout_line": "ROLLED BACK: gate needle failed: 3 cells missed; r1 serves again",
               "dsv4_rollout_context": {"failure": {
                   "stage": "needle", "task": "Stop here when a gate failed", "host": "gpu1",
                   "logs": {"gpu1": ["loading", "", "Traceback: CUDA error"]}, "fix": "set index_topk to 1024"}}}
    lines = ending(outcome)
    assert lines[1] == outcome["dsv4_rollout_line"]
    assert lines[2:] == ["  failed at: needle (task: Stop here when a gate failed)", "  host: gpu1",
                         "  log on gpu1 (last 2 lines):", "    loading", "    Traceback: CUDA error",
                         "  serving now: r1", "  fix: set index_topk to 1024"]


def test_the_failed_tasks_whole_message_follows_when_the_line_holds_only_part_of_it() -> None:
    long = "the deployment spec is invalid:\n" + "\n".join(f"- problem {i}: fix: do {i}" for i in range(40))
    outcome = {"dsv4_rollout_verdict": "failed", "dsv4_rollout_line": "FAILED at plan: " + long[:250] + " ... ",
               "dsv4_rollout_context": {"failure": {"stage": "plan"}}}
    lines = ending(outcome, {"task": "Validate", "host": "local", "msg": long})
    assert "  Validate on local:" in lines and "    - problem 20: fix: do 20" in lines
    # Whole in the line already: said once.
    short = {"dsv4_rollout_verdict": "failed", "dsv4_rollout_line": "FAILED at plan, nothing was changed: bad x",
             "dsv4_rollout_context": {"failure": {"stage": "plan"}}}
    assert ending(short, {"task": "Validate", "host": "local", "msg": "bad\nx"}) == [
        "", "FAILED at plan, nothing was changed: bad x", "  failed at: plan"]


def test_a_promoted_run_ends_with_its_line_and_nothing_else() -> None:
    assert ending({"dsv4_rollout_verdict": "promoted", "dsv4_rollout_line": "PROMOTED: release r2 serves"}) == [
        "", "PROMOTED: release r2 serves"]
    assert ending({}) == []
    assert first_line("a\nb") == "a" and first_line(None) == "failed"


def run_playbook(tmp_path: Path, wait_s: int, *extra: str) -> str:
    """A small playbook on localhost through the console callback, one task sleeping `wait_s`; its output."""
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: Skipped\n      ansible.builtin.command: 'true'\n      when: false\n"
        "    - name: Quiet and ok\n      ansible.builtin.set_fact:\n        x: 1\n"
        "    - name: Wait a while\n      ansible.builtin.command: sleep {{ wait_s }}\n      changed_when: false\n"
        "    - name: Say something\n      ansible.builtin.debug:\n        msg: hello there\n")
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "dsv4.deploy.console", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_LOCALHOST_WARNING": "0"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-c", "local", "-i", "localhost,",
                           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"wait_s={wait_s}",
                           str(play), *extra], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_long_task_says_it_still_runs_and_quiet_tasks_are_left_out(tmp_path: Path) -> None:
    out = run_playbook(tmp_path, 12)
    assert "TASK [Wait a while]" in out and re.search(r"\.\.\. still running, 1\d s so far", out), out
    assert "Skipped" not in out and "Quiet and ok" not in out, out
    assert "TASK [Say something]" in out and "hello there" in out
    # At -v, everything Ansible's default callback prints.
    verbose = run_playbook(tmp_path, 0, "-v")
    assert "TASK [Skipped]" in verbose and "skipping: [localhost]" in verbose and "TASK [Quiet and ok]" in verbose
