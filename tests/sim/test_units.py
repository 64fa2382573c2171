"""In-process checks of the simulator's pieces: flags, faults, recall, memory, tokenizer."""

from __future__ import annotations

import json
import re

import pytest
from simhelpers import haystack

from dsv4deploy.sim import memory
from dsv4deploy.sim.faults import FaultError, Faults, parse_faults
from dsv4deploy.sim.flags import parse_server_args
from dsv4deploy.sim.logs import server_args_line
from dsv4deploy.sim.model import generate
from dsv4deploy.sim.recall import compute_kv, truncate_distant_entries
from dsv4deploy.sim.tokenizer import count_tokens

OVERRIDE_RE = re.compile(r"json_model_override_args(?:=|': )'([^']*)'")


def test_cuda_graph_max_bs_per_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_server_args(["--model-path", "m", "--cuda-graph-max-bs", "8"], "0.5.12")["cuda_graph_max_bs"] == 8
    args = parse_server_args(["--model-path", "m", "--cuda-graph-max-bs", "8"], "0.5.18")
    assert args["cuda_graph_max_bs_decode"] == 8
    assert "'--cuda-graph-max-bs' is deprecated" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        parse_server_args(["--model-path", "m", "--cuda-graph-max-bs", "8"], "0.5.23")
    assert exc.value.code == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in capsys.readouterr().err


def test_flags_like_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_server_args(["--model-path", "m", "--tp", "4", "--disable-cuda-graph"], "0.5.23")
    assert args["tp_size"] == 4 and args["disable_cuda_graph"] is True
    assert "'--disable-cuda-graph' is deprecated" in capsys.readouterr().err
    for bad in (["--model-path", "m", "--bogus"], ["--tp-size", "4"],
                ["--model-path", "m", "--disaggregation-mode", "both"]):
        with pytest.raises(SystemExit) as exc:
            parse_server_args(bad, "0.5.23")
        assert exc.value.code == 2


@pytest.mark.parametrize(("version", "prefix"), [("0.5.18", "server_args=ServerArgs("), ("0.5.23", "server_args={")])
def test_server_args_line_formats(version: str, prefix: str) -> None:
    args = parse_server_args(["--model-path", "m", "--json-model-override-args", '{"index_topk": 1024}'], version)
    line = server_args_line(args, version)
    assert line.startswith(prefix)
    assert OVERRIDE_RE.search(line).group(1) == '{"index_topk": 1024}'


def test_faults_parse_and_default_off() -> None:
    assert parse_faults("") == Faults()
    f = parse_faults("warmup_s=2,first_errors=3,ignore_override,tool_call_corruption=0.2,slow_release=1")
    assert (f.warmup_s, f.first_errors, f.ignore_override, f.tool_call_corruption) == (2, 3, True, 0.2)
    for bad in ("nonsense", "first_errors", "warmup_s=x", "crash_on_start=maybe"):
        with pytest.raises(FaultError):
            parse_faults(bad)


def _needle_answer(tokens: int, topk: int, truncate: bool = False, depth: float = 0.5) -> str:
    text = haystack(tokens, depth)
    kv = compute_kv(text, count_tokens(text))
    if truncate:
        kv = truncate_distant_entries(kv)
    return generate(kv, text, index_topk=topk).text


def test_recall_grows_with_index_topk() -> None:
    assert _needle_answer(1500, 512) == "ZEBRA-4492-OMEGA"
    assert "ZEBRA-4492-OMEGA" not in _needle_answer(5500, 512)
    assert _needle_answer(5500, 1024) == "ZEBRA-4492-OMEGA"
    assert "ZEBRA-4492-OMEGA" not in _needle_answer(10500, 1024)
    # the sliding window always sees the last 128 tokens
    assert _needle_answer(10500, 512, depth=1.0) == "ZEBRA-4492-OMEGA"


def test_truncated_transfer_loses_all_but_the_window() -> None:
    assert "ZEBRA-4492-OMEGA" not in _needle_answer(1500, 1024, truncate=True)
    assert _needle_answer(1500, 1024, truncate=True, depth=1.0) == "ZEBRA-4492-OMEGA"


def test_memory_model_matches_the_seeds() -> None:
    # tp 4 on 96 GiB: 0.85 fits with index_topk 512, not with 1024 (the seed lowered decode to 0.80)
    def fits(frac: float, topk: int) -> bool:
        return memory.oom_stage(memory.plan(4, frac, 96, topk, True), 96, 0) is None

    assert fits(0.85, 512) and not fits(0.85, 1024) and fits(0.80, 1024)
    assert not fits(0.30, 512)  # 33 GiB of weights per GPU do not fit in 28.8
    assert memory.oom_stage(memory.plan(4, 0.80, 96, 512, True), 96, held_by_others_gib=40) is not None


def test_a_model_mistake_is_a_well_formed_call_with_one_value_wrong() -> None:
    from dsv4deploy.sim.model import mistaken_tool_call

    call = {"id": "c", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"days": 3, "city": "Oslo"})}}
    wrong = mistaken_tool_call(call).tool_calls[0]["function"]
    assert wrong["name"] == "get_weather" and json.loads(wrong["arguments"]) == {"days": 4, "city": "Oslo"}
    assert parse_faults("tool_call_mistakes=0.1").tool_call_mistakes == 0.1
    with pytest.raises(FaultError):
        parse_faults("tool_call_mistakes=2")
