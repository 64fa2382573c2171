"""What the console says during waits: a server's start-up phase read from its log, the readiness wait's line
with the seconds left, and a gate's lines (per item only at -v, a summary while it runs otherwise)."""

from __future__ import annotations

import threading
import time

from dsv4deploy.controller.progress import Heartbeat, startup_phase, wait_line
from dsv4deploy.gates.readiness import deadline_reason, whole_wait
from dsv4deploy.gates.result import GateResult, GateStatus

# What sglang 0.5.23 logs while it starts (the simulated host logs the same markers).
LOADING = """[2026-12-06 07:10:01 TP0] Init torch distributed begin.
[2026-12-06 07:10:03 TP0] Load weight begin. avail mem=93.10 GB
Loading safetensors checkpoint shards:  45% Completed | 29/64 [00:41<00:50,  1.6s/it]"""
CAPTURING = LOADING + """
[2026-12-06 07:11:40 TP0] Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, mem usage=70.1 GB
[2026-12-06 07:11:52 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.8 GB"""
LISTENING = CAPTURING + """
[2026-12-06 07:12:30 TP0] Capture cuda graph end. Time elapsed: 38.1 s.
INFO:     Uvicorn running on http://127.0.0.1:30001 (Press CTRL+C to quit)"""


def test_the_phase_is_the_last_start_up_marker_in_the_log() -> None:
    assert startup_phase(LOADING) == "loading weights 45%"
    assert startup_phase(CAPTURING) == "capturing CUDA graphs"
    assert startup_phase(LISTENING) == "listening, warming up"
    assert startup_phase(LISTENING + "\nThe server is fired up and ready to roll!") == "ready"
    assert startup_phase("") == "nothing logged yet"
    assert startup_phase("starting my own launcher\n") == "log: starting my own launcher"


def test_the_wait_line_names_each_worker_and_the_seconds_left() -> None:
    line = wait_line("gpu1", 40.2, 600, {"prefill-0": CAPTURING, "decode-0": LOADING}, {"decode-0": 38.0},
                     ["prefill-0", "decode-0"])
    assert line == "  [readiness] gpu1: 40 s, 560 s left of 600 s: prefill-0 capturing CUDA graphs; decode-0 healthy"


def test_a_gate_says_each_item_only_at_verbose() -> None:
    said: list[str] = []
    with Heartbeat("needle", said.append, verbose=False, every_s=60) as progress:
        progress(1, 216, "1000 tokens @ depth 0.1: recalled")
    assert said == []
    with Heartbeat("needle", said.append, verbose=True, every_s=60) as progress:
        progress(1, 216, "1000 tokens @ depth 0.1: recalled")
    assert said == ["  [needle] 1/216 1000 tokens @ depth 0.1: recalled"]


def test_a_long_gate_says_where_it_is_while_it_runs() -> None:
    said: list[str] = []
    done = threading.Event()
    with Heartbeat("soak", said.append, verbose=False, every_s=0.05) as progress:
        progress(3, 300, "session 7: clean")
        while len(said) < 2 and not done.wait(0.01):
            pass
    count = len(said)
    time.sleep(0.15)
    assert count >= 2 and len(said) == count, "a line while it runs, none after it ended"
    assert said[0].startswith("  [soak] 3 of 300 done, ") and "(last: session 7: clean)" in said[0]


def test_readiness_reports_the_load_time_and_the_whole_deadline_with_its_source() -> None:
    # The hosts' wait took 57 s, then the controller's checks 0.2 s of what the 300 s deadline had left (243 s).
    inner = GateResult(name="readiness", status=GateStatus.PASSED, seconds=0.2,
                       summary="ready in 0.2 s: 2 worker(s) /health 200", evidence={"deadline_s": 243.0})
    why = deadline_reason(300.0, {"readiness_deadline_s": 600})
    gate = whole_wait(inner, 57.0, 300.0, why)
    assert gate.seconds == 57.2
    assert gate.evidence["deadline_s"] == 300.0 and gate.evidence["controller_deadline_s"] == 243.0
    assert gate.evidence["load_s"] == 57.2 and gate.evidence["deadline_from"] == why
    assert gate.summary.startswith("loaded in 57.2 s, deadline 300 s from readiness_deadline_s as set")
    assert "ready in 0.2 s" not in gate.summary
    assert "model profile" in deadline_reason(None, {"readiness_deadline_s": 600})
    assert "default" in deadline_reason(None, {})
