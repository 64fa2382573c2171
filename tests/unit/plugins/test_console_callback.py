"""The stdout callback's ending: a run's outcome as its last lines, the failure's gate, logs and fix after it."""

from __future__ import annotations

from ansible_collections.dsv4.deploy.plugins.callback.console import ending, first_line


def test_a_failed_run_ends_with_its_line_then_the_gate_the_host_log_and_fix() -> None:
    outcome = {"dsv4_rollout_verdict": "rolled_back", "dsv4_rollout_serving": "r1",
               "dsv4_rollout_line": "ROLLED BACK: gate needle failed: 3 cells missed; r1 serves again",
               "dsv4_rollout_failure": {"stage": "needle", "task": "Stop here when a gate failed", "host": "gpu1",
                                        "logs": {"gpu1": ["loading", "", "Traceback: CUDA error"]},
                                        "fix": "set index_topk to 1024"}}
    lines = ending(outcome)
    assert lines[1] == outcome["dsv4_rollout_line"]
    assert lines[2:] == ["  failed at: needle (task: Stop here when a gate failed)", "  host: gpu1",
                         "  log on gpu1 (last 2 lines):", "    loading", "    Traceback: CUDA error",
                         "  serving now: r1", "  fix: set index_topk to 1024"]


def test_the_failed_tasks_whole_message_follows_when_the_line_holds_only_part_of_it() -> None:
    long = "the deployment spec is invalid:\n" + "\n".join(f"- problem {i}: fix: do {i}" for i in range(40))
    outcome = {"dsv4_rollout_verdict": "failed", "dsv4_rollout_line": "FAILED at plan: " + long[:250] + " ... ",
               "dsv4_rollout_failure": {"stage": "plan"}}
    lines = ending(outcome, {"task": "Validate", "host": "local", "msg": long})
    assert "  Validate on local:" in lines and "    - problem 20: fix: do 20" in lines
    # Whole in the line already: said once.
    short = {"dsv4_rollout_verdict": "failed", "dsv4_rollout_line": "FAILED at plan, nothing was changed: bad x",
             "dsv4_rollout_failure": {"stage": "plan"}}
    assert ending(short, {"task": "Validate", "host": "local", "msg": "bad\nx"}) == [
        "", "FAILED at plan, nothing was changed: bad x", "  failed at: plan"]


def test_a_promoted_run_ends_with_its_line_and_nothing_else() -> None:
    assert ending({"dsv4_rollout_verdict": "promoted", "dsv4_rollout_line": "PROMOTED: release r2 serves"}) == [
        "", "PROMOTED: release r2 serves"]
    assert ending({}) == []
    assert first_line("a\nb") == "a" and first_line(None) == "failed"
