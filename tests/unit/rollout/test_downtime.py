"""The continuous client's figures, and reading a server's in-flight requests from its own metrics."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from ansible_collections.dsv4.deploy.plugins.module_utils.drain import in_flight
from dsv4deploy.rollout.downtime import DowntimeClient, collect, spawn
from tests.ports import free_port


def test_an_endpoint_that_never_answers_is_all_failures_and_one_long_gap() -> None:
    with DowntimeClient(f"http://127.0.0.1:{free_port()}", "m", timeout_s=1, pause_s=0.01) as client:
        time.sleep(0.5)
    figures = client.figures
    assert figures.sent >= 3 and figures.failed == figures.sent
    assert figures.longest_gap_s >= 0.5 and figures.longest_gap_s == figures.seconds
    assert figures.failures[0].startswith("0: ConnectError") and len(figures.failures) <= DowntimeClient.KEEP_FAILURES
    assert "failed" in figures.line() and set(figures.as_dict()) == {"sent", "failed", "longest_gap_s", "seconds",
                                                                    "failures"}


def test_in_flight_sums_running_and_queued_over_schedulers() -> None:
    text = "\n".join([
        "# HELP sglang:num_running_reqs The number of running requests.",
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} 2.0',
        'sglang:num_running_reqs{model_name="m",tp_rank="1"} 1.0',
        'sglang:num_queue_reqs{model_name="m"} 3.0',
        'sglang:num_requests_total{model_name="m"} 40.0',
    ])
    assert in_flight(text) == 6
    assert in_flight('sglang:num_running_reqs{model_name="m"} 0.0') == 0
    assert in_flight("sgl_router_requests_total 4") is None


def test_the_spawned_client_stops_when_told_and_when_its_watched_process_is_gone() -> None:
    # What the dsv4_downtime action does on the controller: a process of its own, figures as JSON.
    endpoint = f"http://127.0.0.1:{free_port()}"
    client = spawn(endpoint, "m", api_key="k3y", watch_pid=os.getpid())
    assert b"k3y" not in Path(f"/proc/{client['pid']}/cmdline").read_bytes(), "the key is never on the command line"
    time.sleep(2)
    figures = collect(client)
    assert figures["sent"] >= 1 and figures["failed"] == figures["sent"] and figures["endpoint"] == endpoint
    assert not Path(client["dir"]).exists()
    # A controller killed mid-rollout: the client notices its watched process is gone and stops by itself.
    watched = subprocess.Popen(["sleep", "30"])
    orphan = spawn(endpoint, "m", watch_pid=watched.pid)
    try:
        watched.kill()
        watched.wait()
        deadline = time.monotonic() + 20
        while not Path(orphan["out"]).is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert Path(orphan["out"]).is_file(), "the client outlived the process it watches"
    finally:
        collect(orphan)
