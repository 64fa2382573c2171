"""Config gate: the override in the log, effective per server_info, equal on prefill and decode."""

from __future__ import annotations

import pytest

from dsv4deploy.gates import GateStatus, ServerConfigInput, check_config, parse_logged_overrides

from .stubs import after, always

LOG_0518 = (
    "[2026-10-01 10:00:00] server_args=ServerArgs(model_path='/models/dsv4', tp_size=4, "
    "json_model_override_args='{\"index_topk\": 1024}', disaggregation_mode='prefill')\n"
    "[2026-10-01 10:01:10] The server is fired up and ready to roll!\n"
)
LOG_0523 = (
    "[2026-10-01 10:00:00] server_args={'model_path': '/models/dsv4', 'tp_size': 4, "
    "'json_model_override_args': '{\"index_topk\": 1024}', 'disaggregation_mode': 'decode'}\n"
    "[2026-10-01 10:01:10] The server is fired up and ready to roll!\n"
)
EXPECTED = {"index_topk": 1024}


def info(override: str = '{"index_topk": 1024}', **more) -> tuple[int, dict]:
    return 200, {
        "json_model_override_args": override,
        "model_path": "/models/dsv4",
        "page_size": 64,
        "version": "0.5.23",
        **more,
    }


def server(stub, name, role, log, reply=None, path="/server_info") -> ServerConfigInput:
    srv = stub({f"GET {path}": always(reply or info())})
    return ServerConfigInput(name=name, role=role, url=srv.url, log_text=log)


def test_parses_both_log_formats():
    assert parse_logged_overrides(LOG_0518) == ['{"index_topk": 1024}']
    assert parse_logged_overrides(LOG_0523) == ['{"index_topk": 1024}']
    assert parse_logged_overrides("no args here") == []


def test_pd_pair_that_agrees_passes(stub):
    servers = [server(stub, "prefill", "prefill", LOG_0518), server(stub, "decode", "decode", LOG_0523)]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.PASSED, result.summary
    assert result.summary == (
        'override {"index_topk": 1024} logged and effective on 2 server(s), prefill and decode agree on '
        "json_model_override_args, model_path, page_size; could not confirm kv_cache_dtype (not reported by "
        "prefill, decode); context_length (not reported by prefill, decode); chat_template (not reported by "
        "prefill, decode)"
    )
    assert [row["effective"] for row in result.evidence["servers"]] == ['{"index_topk": 1024}'] * 2
    assert result.evidence["agreement"]["compared"] == ["json_model_override_args", "model_path", "page_size"]
    assert "needle gate" in result.evidence["note"]


def test_server_info_disagreeing_with_the_log_fails_with_both_values(stub):
    servers = [
        server(stub, "prefill", "prefill", LOG_0518),
        server(stub, "decode", "decode", LOG_0523, reply=info('{"index_topk": 512}')),
    ]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.FAILED
    assert (
        'decode: /server_info says {"index_topk": 512} while the log says {"index_topk": 1024}, '
        'expected {"index_topk": 1024}'
    ) in result.summary
    assert "prefill and decode disagree on json_model_override_args" in result.summary
    decode_row = result.evidence["servers"][1]
    assert decode_row["logged"] == '{"index_topk": 1024}' and decode_row["effective"] == '{"index_topk": 512}'
    assert decode_row["ok"] is False and result.evidence["servers"][0]["ok"] is True


def test_prefill_and_decode_unequal_settings_fail(stub):
    servers = [
        server(stub, "prefill", "prefill", LOG_0518, reply=info(page_size=64)),
        server(stub, "decode", "decode", LOG_0523, reply=info(page_size=1)),
    ]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.FAILED
    assert result.summary == "prefill and decode disagree on page_size: prefill=64, decode=1"
    assert result.evidence["agreement"]["values"]["page_size"] == {"prefill": 64, "decode": 1}


def test_override_missing_from_log_fails(stub):
    servers = [server(stub, "combined", "combined", "[x] The server is fired up and ready to roll!\n")]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.FAILED
    assert result.summary == "combined: no json_model_override_args in its log since this start"


def test_last_start_in_the_log_wins(stub):
    old_start = LOG_0523.replace("1024", "512")
    servers = [server(stub, "combined", "combined", old_start + LOG_0523)]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.PASSED, result.summary
    assert result.evidence["servers"][0]["logged_count"] == 2


def test_old_server_info_alias_is_used_when_server_info_is_missing(stub):
    servers = [server(stub, "combined", "combined", LOG_0518, path="/get_server_info")]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.PASSED, result.summary
    assert result.evidence["servers"][0]["server_info_path"] == "/get_server_info"


def test_server_info_error_body_is_kept(stub):
    servers = [server(stub, "combined", "combined", LOG_0518, reply=(500, "scheduler is not responding"))]
    result = check_config(EXPECTED, servers, deadline_s=1.2)
    assert result.status is GateStatus.FAILED
    assert "combined: server_info unreadable (500 scheduler is not responding)" in result.summary
    [failure] = result.evidence["failures"]
    assert failure["status"] == 500 and failure["body"] == "scheduler is not responding" and failure["tries"] > 1


def test_server_info_is_asked_again_until_it_answers(stub):
    srv = stub({"GET /server_info": after(3, (503, "warming up"), info())})
    servers = [ServerConfigInput(name="combined", role="combined", url=srv.url, log_text=LOG_0518)]
    result = check_config(EXPECTED, servers, deadline_s=30, sleep=lambda _s: None)
    assert result.status is GateStatus.PASSED, result.summary
    assert srv.count("GET /server_info") == 4


def test_a_setting_the_spec_sets_must_be_reported_as_set(stub):
    servers = [server(stub, "prefill", "prefill", LOG_0518), server(stub, "decode", "decode", LOG_0523)]
    wanted = {"model_path": "/models/dsv4", "page_size": 64, "kv_cache_dtype": "fp8_e4m3"}
    result = check_config(EXPECTED, servers, expected_settings={"prefill": wanted, "decode": wanted})
    assert result.status is GateStatus.FAILED
    assert result.evidence["problems"] == [
        "prefill: cannot confirm kv_cache_dtype='fp8_e4m3', which the spec sets: server_info does not report it",
        "decode: cannot confirm kv_cache_dtype='fp8_e4m3', which the spec sets: server_info does not report it"]
    other = [server(stub, "decode", "decode", LOG_0523, reply=info(page_size=32))]
    result = check_config(EXPECTED, other, expected_settings={"decode": {"page_size": 64}})
    assert result.summary == "decode: server_info says page_size=32, the spec sets 64"


def test_unreachable_server_is_reported(dead_url):
    servers = [ServerConfigInput(name="decode", role="decode", url=dead_url, log_text=LOG_0523)]
    result = check_config(EXPECTED, servers, timeout_s=1, deadline_s=0.5)
    assert result.status is GateStatus.FAILED
    assert "decode: server_info unreadable (ConnectError" in result.summary


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="at least one server"):
        check_config(EXPECTED, [])
    with pytest.raises(ValueError, match="must be a mapping"):
        check_config('{"index_topk": 1024}', [])  # type: ignore[arg-type]


# Warnings as sglang 0.5.23 writes them (disaggregation/mooncake/conn.py, nixl/conn.py).
STAGING_FALLBACK = ("[2026-10-01 10:02:00 TP0] Decode staging too small: need 268435456 bytes for 43 layers, "
                    "have 134217728, falling back\n")
NIXL_FALLBACK = ("[2026-10-01 10:00:30 TP0] Installed NIXL does not support strided descriptors, "
                 "falling back to per-block descriptors.\n")


def test_a_slower_kv_transfer_path_in_a_log_is_a_warning_not_a_failure(stub):
    servers = [server(stub, "prefill", "prefill", LOG_0518 + NIXL_FALLBACK),
               server(stub, "decode", "decode", LOG_0523 + STAGING_FALLBACK * 5)]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.PASSED, result.summary
    assert "warning: KV transfer slower than configured on prefill, decode" in result.summary
    assert "per-block descriptors" in result.summary
    found = result.evidence["warnings"]["kv_transfer_fallback"]
    assert found["prefill"] == [NIXL_FALLBACK.strip()]
    assert len(found["decode"]) == 3 and found["decode"][0] == STAGING_FALLBACK.strip()


def test_no_fallback_no_warning(stub):
    servers = [server(stub, "prefill", "prefill", LOG_0518), server(stub, "decode", "decode", LOG_0523)]
    result = check_config(EXPECTED, servers)
    assert "warnings" not in result.evidence and "warning" not in result.summary


# mooncake's own lines (mooncake-transfer-engine/src/transfer_engine_impl.cpp, glog on the server's stderr).
MOONCAKE_RDMA = ("I1001 10:00:20.000000 1 transfer_engine_impl.cpp:190] Topology discovery complete. Found 2 HCAs.\n"
                 "I1001 10:00:20.100000 1 transfer_engine_impl.cpp:330] installTransport, type=rdma\n")
MOONCAKE_TCP = "I1001 10:00:20.000000 1 transfer_engine_impl.cpp:190] Topology discovery complete. Found 0 HCAs.\n"


def test_mooncakes_tcp_fallback_fails_a_worker_whose_spec_asks_for_rdma(stub):
    servers = [server(stub, "prefill", "prefill", LOG_0518 + MOONCAKE_RDMA),
               server(stub, "decode", "decode", LOG_0523 + MOONCAKE_TCP)]
    result = check_config(EXPECTED, servers, expected_transports={"prefill": "rdma", "decode": "rdma"})
    assert result.status is GateStatus.FAILED
    assert result.summary.startswith("decode: mooncake fell back to TCP, the spec asks for transport rdma")
    assert "Found 0 HCAs" in result.summary and "prefill:" not in result.summary


def test_tcp_asked_for_or_no_mooncake_line_is_no_failure(stub):
    servers = [server(stub, "prefill", "prefill", LOG_0518), server(stub, "decode", "decode", LOG_0523 + MOONCAKE_TCP)]
    assert check_config(EXPECTED, servers, expected_transports={"prefill": "rdma", "decode": "tcp"}).status \
        is GateStatus.PASSED


def test_each_key_says_what_proved_it_and_an_override_shown_not_applied_fails(stub):
    servers = [server(stub, "combined", "combined", LOG_0523)]
    plain = check_config(EXPECTED, servers)
    assert plain.status is GateStatus.PASSED
    assert [(p["key"], p["log"], p["server_info"], p["behaviour"]) for p in plain.evidence["proofs"]] == [
        ("index_topk", True, True, "not shown")]
    assert "per key" not in plain.summary  # nothing compared: the summary claims no more than before

    shown = check_config(EXPECTED, servers, behaviour={"index_topk": {"shown": "applied", "why": "2 of 9 moved"}})
    assert shown.status is GateStatus.PASSED
    assert shown.summary.endswith("per key: index_topk reported by log and /server_info, shown applied in behaviour")

    ignored = check_config(EXPECTED, servers, behaviour={"index_topk": {"shown": "not applied", "why": "identical"}})
    assert ignored.status is GateStatus.FAILED
    assert ignored.summary.startswith("override index_topk=1024 is reported (log, /server_info) but not applied: "
                                      "identical; the server computes as without it")


def test_a_key_the_server_info_does_not_report_is_proved_by_the_log_alone(stub):
    servers = [server(stub, "combined", "combined", LOG_0523, reply=info('{"index_topk": 2048}'))]
    result = check_config(EXPECTED, servers)
    assert result.status is GateStatus.FAILED
    assert [(p["log"], p["server_info"], p["reported_by"]) for p in result.evidence["proofs"]] == [
        (True, False, ["log"])]
