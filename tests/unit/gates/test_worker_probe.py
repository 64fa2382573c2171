"""dsv4_worker_check (run by the dsv4_worker_probe action) on a worker's own host, against stub servers."""

from __future__ import annotations

import json
import time

from ansible_collections.dsv4.deploy.plugins.modules import dsv4_worker_check as probe

from .stubs import after, always

PARAMS = {"request_timeout_s": 2.0, "poll_interval_s": 0.01}


def test_polls_health_through_warmup_with_the_gates_evidence(stub):
    server = stub({"GET /health": after(3, (503, "warming up"), (200, ""))})
    started = time.monotonic()
    ev = probe.poll_health({"name": "decode", "url": server.url}, None, started + 10, started, PARAMS)
    assert ev["ready"] and ev["attempts"] == 4 and ev["last_status"] == 200
    assert ev["check"] == "decode /health" and ev["url"] == f"{server.url}/health"
    assert ev["seconds_to_ready"] is not None and "last_error" not in ev


def test_gives_up_at_the_deadline_keeping_the_last_answer(stub):
    server = stub({"GET /health": always((503, "still loading weights"))})
    started = time.monotonic()
    ev = probe.poll_health({"name": "prefill", "url": server.url}, None, started + 0.2, started, PARAMS)
    assert not ev["ready"] and ev["attempts"] >= 2
    assert ev["last_status"] == 503 and ev["last_body"] == "still loading weights"


def test_a_refused_connection_is_evidence_not_an_exception(dead_url):
    started = time.monotonic()
    ev = probe.poll_health({"name": "decode", "url": dead_url}, None, started + 0.1, started, PARAMS)
    assert not ev["ready"] and ev["last_status"] is None and "refused" in ev["last_error"].lower()


def test_server_info_falls_back_to_the_old_path_and_sends_the_key(stub):
    info = {"json_model_override_args": '{"index_topk": 1024}'}
    server = stub({"GET /get_server_info": always((200, info))})
    answers = probe.server_info({"name": "decode", "url": server.url}, "sk-test", 2.0)
    assert [a["path"] for a in answers] == ["/server_info", "/get_server_info"]
    assert answers[0]["status"] == 404 and json.loads(answers[1]["body"]) == info
    assert server.auth_headers == ["Bearer sk-test", "Bearer sk-test"]


def test_an_address_this_host_does_not_have_is_said_at_once():
    assert probe.not_here("http://127.0.0.1:30001") == ""
    # 192.0.2.0/24 is TEST-NET-1: never an address of this machine. Binding tells, without any traffic.
    assert "192.0.2.7 is not an address of this host" in probe.not_here("http://192.0.2.7:30001")


def test_the_wait_hands_the_controller_the_key_file_or_says_why_not(tmp_path):
    key = tmp_path / "api_key"
    key.write_text("sk-test-123\n")
    assert probe.controller_key(str(key)) == {"api_key": "sk-test-123"}
    assert probe.controller_key(None) == {}
    missing = probe.controller_key(str(tmp_path / "nope"))
    assert missing == {"api_key_problem": f"cannot read the API key file {tmp_path / 'nope'} on this host: "
                                          "No such file or directory"}
