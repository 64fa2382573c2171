"""Per-version flag tables: the CUDA-graph traps of 0.5.12 -> 0.5.23."""

from __future__ import annotations

import pytest

from dsv4deploy.sglang import flags, versions

REMOVED_ON_NEW = ("--cuda-graph-max-bs", "--disable-cuda-graph")


def test_every_known_version_has_a_table():
    assert set(flags.TABLES) == set(versions.RELEASES)


def test_unknown_version_is_refused():
    with pytest.raises(KeyError, match=r"no flag table for sglang 0\.4\.0"):
        flags.table("0.4.0")


@pytest.mark.parametrize("role", ["prefill", "decode", "combined"])
def test_0_5_12_uses_the_old_spelling(role):
    t = flags.table("0.5.12")
    assert t.cuda_graph_args(role, True, 64) == ["--cuda-graph-max-bs", "64"]
    assert t.cuda_graph_args(role, False, None) == ["--disable-cuda-graph"]
    assert t.cuda_graph_args(role, True, None) == []


@pytest.mark.parametrize("version", ["0.5.18", "0.5.23"])
def test_per_phase_releases_render_per_role_flags(version):
    t = flags.table(version)
    assert t.cuda_graph_args("decode", True, 64) == ["--cuda-graph-max-bs-decode", "64"]
    assert t.cuda_graph_args("combined", True, 64) == ["--cuda-graph-max-bs-decode", "64"]
    assert t.cuda_graph_args("prefill", True, 256) == ["--cuda-graph-max-bs-prefill", "256"]
    assert t.cuda_graph_args("decode", False, None) == ["--disable-decode-cuda-graph"]
    assert t.cuda_graph_args("prefill", False, 8) == ["--disable-prefill-cuda-graph"]
    assert t.cuda_graph_args("combined", False, None) == ["--disable-prefill-cuda-graph", "--disable-decode-cuda-graph"]


@pytest.mark.parametrize("version", ["0.5.18", "0.5.23"])
@pytest.mark.parametrize("role", ["prefill", "decode", "combined"])
@pytest.mark.parametrize("enabled,max_bs", [(True, 1), (True, 512), (False, None), (False, 64), (True, None)])
def test_new_releases_never_emit_the_removed_flags(version, role, enabled, max_bs):
    args = flags.table(version).cuda_graph_args(role, enabled, max_bs)
    assert not set(args) & set(REMOVED_ON_NEW)


def test_forbidden_flags_in_extra_args():
    assert flags.forbidden_flags_in("0.5.23", ["--cuda-graph-max-bs=8", "--cuda-graph-max-bs-decode", "8"]) == [
        "--cuda-graph-max-bs=8"]
    assert flags.forbidden_flags_in("0.5.23", ["--disable-cuda-graph"]) == ["--disable-cuda-graph"]
    assert flags.forbidden_flags_in("0.5.12", ["--disable-cuda-graph"]) == []


def test_dsv4_parsers_and_common_flags():
    t = flags.table("0.5.23")
    assert (t.dsv4_reasoning_parser, t.dsv4_tool_call_parser) == ("deepseek-v4", "deepseekv4")
    assert t.flag("tp_size") == "--tp-size"
    assert t.flag("json_model_override_args") == "--json-model-override-args"
