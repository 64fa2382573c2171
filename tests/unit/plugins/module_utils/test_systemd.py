"""A failed start says why: systemd's own journal lines (217/USER, 203/EXEC, Failed to ...) reach the
message and the report, with API keys masked. Journal entries are in `journalctl -o json` form as
systemd 252 (Debian 12) writes them for a unit whose User= does not exist."""

from __future__ import annotations

import json

from ansible_collections.dsv4.deploy.plugins.module_utils.systemd import Systemd, journal_lines, start_failure_reason
from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact
from dsv4deploy.report import build_report, render_markdown

UNIT = "sglang-dsv4-decode.service"


def entry(message: str, pid: str = "1", comm: str = "systemd") -> str:
    # As seen on Debian 12: the forked child logs under its own PID, named "(ecode.sh)", from src/core.
    return json.dumps({"MESSAGE": message, "_PID": pid, "SYSLOG_IDENTIFIER": comm, "_COMM": comm, "UNIT": UNIT,
                       "CODE_FILE": "src/core/execute.c" if pid != "1" else "src/core/unit.c"})


JOURNAL_217 = "\n".join([
    entry(f"{UNIT}: Failed to determine user credentials: No such process", pid="4242", comm="(ecode.sh)"),
    entry(f"{UNIT}: Failed at step USER spawning /opt/dsv4deploy/current/bin/serve-sglang-dsv4-decode.sh: "
          "No such process", pid="4242", comm="(ecode.sh)"),
    entry(f"{UNIT}: Main process exited, code=exited, status=217/USER"),
    entry(f"{UNIT}: Failed with result 'exit-code'."),
    entry("Failed to start sglang-dsv4-decode.service - SGLang decode server for deepseek-v4-flash (dsv4deploy)."),
])


def test_systemd_lines_become_the_reason_in_order_each_once():
    lines = journal_lines(JOURNAL_217 + "\n" + JOURNAL_217)
    assert lines[2] == f"systemd: {UNIT}: Main process exited, code=exited, status=217/USER"
    reason = start_failure_reason(lines)
    assert reason.split("; ") == [
        f"{UNIT}: Failed to determine user credentials: No such process",
        f"{UNIT}: Failed at step USER spawning /opt/dsv4deploy/current/bin/serve-sglang-dsv4-decode.sh: "
        "No such process",
        f"{UNIT}: Main process exited, code=exited, status=217/USER",
    ]  # "Failed to start <description>" says that, not why: left out


def test_the_servers_own_lines_and_byte_messages_are_kept():
    raw = json.dumps({"MESSAGE": list(b"bad \xff byte"), "_PID": "77", "SYSLOG_IDENTIFIER": "sglang-dsv4-decode"})
    assert journal_lines(raw + "\nnot json") == ["sglang-dsv4-decode: bad \ufffd byte"]
    assert start_failure_reason(["sglang-dsv4-decode: Traceback (most recent call last):"]) == ""


def test_api_keys_are_masked_in_log_lines():
    line = "server_args=ServerArgs(api_key='sk-secret-1', port=30002) exec ... --api-key sk-secret-2"
    masked = redact(line)
    assert "sk-secret" not in masked and "api_key='***'" in masked and "--api-key ***" in masked


def test_the_report_carries_the_log_of_the_failed_start():
    data = build_report(release="r2", previous_release="r1", topology="pd", verdict="rolled_back",
                        endpoint="http://10.0.0.11:30000", gates=[])
    data["failed_gate"], data["failure"] = "switchover", "sglang-dsv4-decode did not start (failed): ..."
    data["failure_logs"] = {"gpu1": journal_lines(JOURNAL_217)}
    md = render_markdown(data)
    assert "## Log since the start on gpu1" in md
    assert "status=217/USER" in md and "Failed at step USER spawning" in md


def test_a_unit_whose_server_died_is_not_called_stopped_while_systemd_ends_its_children() -> None:
    # The real sglang's launcher SIGKILLs itself when a child fails; systemd then passes through
    # deactivating (KillMode=mixed) with Result=signal before failed/auto-restart.
    base = {"invocation": "a", "restarts": 0}
    died = {"state": "deactivating", "sub": "final-sigterm", "pid": 0, "invocation": "a", "restarts": 0,
            "result": "signal", "exit": "killed by signal 9"}
    assert Systemd.gone(died, base) == ("exited (signal, killed by signal 9) and systemd is stopping what is "
                                        "left of it")
    # A stop that was asked for keeps Result=success: that unit was stopped.
    stopping = {**died, "sub": "stop-sigterm", "pid": 42, "result": "success", "exit": "no exit status"}
    assert Systemd.gone(stopping, base) == "was stopped (deactivating)"
