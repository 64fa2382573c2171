"""dsv4deploy.plan.memory: the seeds' memory reasoning must come out right, explained."""

from __future__ import annotations

from typing import Any

import pytest

from dsv4deploy.plan.memory import GIB, check_memory, load_profile, problems_from_memory
from dsv4deploy.spec import SpecError, load_spec

HOSTS = {"gpu1": {"sglang_version": "0.5.23", "gpu_count": 8, "gpu_memory_gib": 96}}


def spec(index_topk: int | None = 1024, prefill_fraction: float | None = 0.80, decode_fraction: float | None = 0.80,
         hosts: dict[str, Any] = HOSTS, **top: Any):
    """The seeds' box: tp 4 per role on 96 GiB GPUs."""
    common: dict[str, Any] = {
        "topology": "pd",
        "model": {"path": "/models/DeepSeek-V4-Flash-NVFP4", "served_name": "deepseek-v4-flash"},
        "prefill": [{"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30001,
                     **_fraction(prefill_fraction)}],
        "decode": [{"host": "gpu1", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 30002,
                    **_fraction(decode_fraction)}],
        "combined": {"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30010, "mem_fraction_static": 0.80},
        "router": {"host": "gpu1", "port": 30000},
        "index_topk": index_topk,
        **top,
    }
    return load_spec(common, hosts)


def _fraction(value: float | None) -> dict[str, float]:
    return {} if value is None else {"mem_fraction_static": value}


def by_field(deployment) -> dict[str, Any]:
    return {r.field: r for r in check_memory(deployment)}


def test_weights_are_counted_by_layer_type_at_the_checkpoints_precision() -> None:
    decode = by_field(spec(index_topk=512))["decode[0]"]
    # NVFP4: 277.03B experts x 4.5 bits + 6.17B dense x 8 + 1.06B embedding/head x 16 = 164.1 GB; / tp 4.
    expected_gb = (277.03 * 4.5 + (5.09 + 1.08) * 8 + 1.06 * 16) / 8 / 4
    assert decode.weights_gib * GIB / 1e9 == pytest.approx(expected_gb)
    assert decode.weights_gib == pytest.approx(38.21, abs=0.01)  # the seeds' 4-bit estimate said 33.1
    assert decode.explanation[0] == ("weights: 284B params (nvfp4), bits by layer: experts 4.5, dense 8, embedding 16; "
                                     "/ tp_size 4 = 38.2 GiB (41.0 GB) per GPU")


def test_decode_at_085_with_index_topk_512_fits() -> None:
    decode = by_field(spec(index_topk=512, decode_fraction=0.85))["decode[0]"]
    assert decode.headroom_available_gib == pytest.approx(14.4)
    # sglang's own reserve for a tp-4 decode on a 96 GiB card: the 10 GiB floor.
    assert decode.headroom_needed_gib == pytest.approx(10.0)
    assert decode.sglang_default_fraction == 0.896
    assert decode.feasible
    assert decode.max_feasible_fraction == 0.90


def test_raising_index_topk_to_1024_on_a_decode_at_085_is_refused_with_084_or_less() -> None:
    reports = check_memory(spec(index_topk=1024, decode_fraction=0.85))
    decode = reports[1]
    assert not decode.feasible
    assert decode.max_feasible_fraction == 0.84
    assert decode.headroom_parts["topk_buffers"] == 5.0
    assert [str(p) for p in problems_from_memory(reports)] == [
        "decode[0].mem_fraction_static (host gpu1): 0.85 leaves 14.4 GiB outside the static pool, 15.0 GiB needed "
        "with index_topk 1024 (sglang's reserve 10.0 (constant 0.5 + activations 3.0 + parallel 0.5 + cuda graphs "
        "1.0 + floor 5.0) + topk buffers 5.0); fix: set mem_fraction_static to 0.84 or less"]


def test_prefill_and_decode_at_080_with_index_topk_1024_fit() -> None:
    reports = check_memory(spec(index_topk=1024))
    assert [(r.field, r.feasible) for r in reports] == [("prefill[0]", True), ("decode[0]", True)]
    assert problems_from_memory(reports) == []


def test_combined_at_080_with_1024_fits() -> None:
    combined = check_memory(spec(topology="combined"))[0]
    assert combined.role == "combined" and combined.feasible


def test_index_topk_defaults_to_the_models_and_needs_no_top_k_buffers_beyond_sglangs_reserve() -> None:
    decode = by_field(spec(index_topk=None))["decode[0]"]
    assert decode.index_topk == 512
    assert decode.headroom_parts["topk_buffers"] == 0.0


def test_unset_mem_fraction_static_is_sglangs_own_default_shown_in_the_plan() -> None:
    reports = by_field(spec(index_topk=None, prefill_fraction=None, decode_fraction=None))
    prefill, decode = reports["prefill[0]"], reports["decode[0]"]
    # 96 GiB: a prefill reserves 512 + 8192 x 1.5 + 4/8 x 1024 MiB = 13 GiB, a decode the 10 GiB floor.
    assert (prefill.mem_fraction_static, prefill.fraction_source) == (0.865, "sglang default")
    assert (decode.mem_fraction_static, decode.fraction_source) == (0.896, "sglang default")
    assert prefill.feasible and decode.feasible
    assert "mem_fraction_static 0.865 (sglang default; sglang's own 0.865)" in prefill.explanation[1]


def test_sglangs_default_is_refused_only_for_what_sglang_does_not_reserve() -> None:
    reports = check_memory(spec(index_topk=1024, prefill_fraction=None, decode_fraction=None))
    assert [str(p) for p in problems_from_memory(reports)] == [
        "prefill[0].mem_fraction_static (host gpu1): sglang's default 0.865 leaves 13.0 GiB outside the static pool, "
        "17.0 GiB needed with index_topk 1024 (sglang's reserve 13.0 (constant 0.5 + activations 12.0 + parallel 0.5) "
        "+ topk buffers 4.0); fix: set mem_fraction_static to 0.82 or less",
        "decode[0].mem_fraction_static (host gpu1): sglang's default 0.896 leaves 10.0 GiB outside the static pool, "
        "15.0 GiB needed with index_topk 1024 (sglang's reserve 10.0 (constant 0.5 + activations 3.0 + parallel 0.5 + "
        "cuda graphs 1.0 + floor 5.0) + topk buffers 5.0); fix: set mem_fraction_static to 0.84 or less"]


def test_the_explanation_names_every_number() -> None:
    decode = by_field(spec(index_topk=1024, decode_fraction=0.85))["decode[0]"]
    assert decode.explanation[1:] == [
        "static pool: mem_fraction_static 0.85 (set; sglang's own 0.896) x 96 GiB = 81.6 GiB, leaving 43.4 GiB of KV "
        "cache after the weights (at least 4.5 GiB needed, 2.5 of it compress state per request slot)",
        "headroom: 14.4 GiB outside the static pool, 15.0 GiB needed = sglang's reserve 10.0 (constant 0.5 + "
        "activations 3.0 + parallel 0.5 + cuda graphs 1.0 + floor 5.0) + topk buffers 5.0 (index_topk 1024, decode)",
        "KV cache: 7087 bytes per token (auto, sglang DeepSeek-V4 pool) -> about 6190592 tokens per attention-DP "
        "rank, 6190592 in all (attn_dp_size 1)",
        "does not fit: mem_fraction_static may be 0.45 to 0.84",
    ]


def test_a_static_pool_too_small_for_the_weights_asks_for_more() -> None:
    reports = check_memory(spec(prefill_fraction=0.30))
    assert [str(p) for p in problems_from_memory(reports)] == [
        "prefill[0].mem_fraction_static (host gpu1): 0.3 gives a 28.8 GiB static pool, too small for 38.2 GiB of "
        "weights per GPU and a 4.5 GiB KV pool; fix: set mem_fraction_static to at least 0.45"]


def test_weights_that_do_not_fit_at_any_fraction_ask_for_more_tp() -> None:
    common_hosts = {"gpu1": {**HOSTS["gpu1"], "gpu_memory_gib": 48}}
    reports = check_memory(spec(hosts=common_hosts))
    assert all(r.max_feasible_fraction is None for r in reports)
    assert [str(p) for p in problems_from_memory(reports)][1] == (
        "decode[0].tp_size (host gpu1): no mem_fraction_static fits: 38.2 GiB of weights per GPU at tp_size 4 + "
        "4.5 GiB KV + 9.3 GiB headroom exceed 48 GiB; "
        "fix: raise tp_size (more GPUs per server), lower index_topk or the CUDA graphs' max_bs")


def test_cuda_graphs_follow_max_bs_and_vanish_when_disabled() -> None:
    deployment = spec()
    halved = deployment.model_copy(update={"decode": [deployment.decode[0].model_copy(
        update={"cuda_graph": deployment.decode[0].cuda_graph.model_copy(update={"max_bs": 128})})]})
    off = deployment.model_copy(update={"decode": [deployment.decode[0].model_copy(
        update={"cuda_graph": deployment.decode[0].cuda_graph.model_copy(update={"enabled": False})})]})
    assert by_field(deployment)["decode[0]"].headroom_parts["cuda_graphs"] == pytest.approx(1.0)  # 512 x 2 MiB
    assert by_field(halved)["decode[0]"].headroom_parts["cuda_graphs"] == pytest.approx(0.25)
    assert by_field(off)["decode[0]"].headroom_parts["cuda_graphs"] == 0.0


def test_a_profile_override_from_the_inventory_changes_the_answer() -> None:
    assert by_field(spec())["decode[0]"].feasible
    heavier = by_field(spec(memory_profile={"headroom": {"extra_gib": 5.0}}))["decode[0]"]
    assert not heavier.feasible
    assert heavier.max_feasible_fraction == 0.79
    bigger_gpus = by_field(spec(decode_fraction=0.85, hosts={"gpu1": {**HOSTS["gpu1"], "gpu_memory_gib": 141}}))
    assert bigger_gpus["decode[0]"].feasible


def test_the_override_merges_deeply() -> None:
    profile = load_profile({"headroom": {"topk_gib_per_512": {"decode": 7.0}}})
    assert profile.headroom.topk_gib_per_512 == {"prefill": 4.0, "decode": 7.0, "combined": 5.0}
    assert profile.headroom.min_kv_pool_gib == 2.0


def test_a_misspelt_override_key_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        check_memory(spec(memory_profile={"headroom": {"extra_gb": 6.0}}))
    assert str(err.value) == ("memory_profile.headroom.extra_gb: Extra inputs are not permitted (got 6.0); "
                              "fix: correct it; dsv4deploy/plan/profiles.yml documents every key")


def test_an_unknown_model_profile_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        check_memory(spec(model={"path": "/m", "served_name": "m", "profile": "deepseek-v5"}))
    assert str(err.value) == ("model.profile: no memory profile 'deepseek-v5'; fix: use one of deepseek-v4-flash, "
                              "deepseek-v4-pro, llama or define memory_profile.models.deepseek-v5")


def test_a_new_model_profile_from_the_inventory() -> None:
    extra = {"models": {"small": {"params_billion": 100, "bits_per_param": 8}}}
    reports = check_memory(spec(model={"path": "/m", "served_name": "m", "profile": "small"}, memory_profile=extra))
    assert reports[0].weights_gib == pytest.approx(100e9 / GIB / 4)


def test_the_generic_llama_profile_has_no_top_k_buffers() -> None:
    llama = spec(index_topk=None, model={"path": "/models/Llama-3.1-8B", "served_name": "llama", "profile": "llama"})
    decode = by_field(llama)["decode[0]"]
    assert decode.headroom_parts["topk_buffers"] == 0.0
    assert decode.min_kv_pool_gib == load_profile().models["llama"].headroom["min_kv_pool_gib"]
    assert decode.weights_gib == pytest.approx(8.03e9 * 2 / GIB / 4)
    assert decode.feasible


def test_a_bad_per_model_headroom_names_its_key() -> None:
    bad = spec(memory_profile={"models": {"deepseek-v4-flash": {"headroom": {"extra_gib": -1}}}})
    with pytest.raises(SpecError, match=r"memory_profile\.models\.deepseek-v4-flash\.headroom\.extra_gib"):
        check_memory(bad)


# -- the recipes' settings -----------------------------------------------------------------------------

H200 = {"gpu1": {"sglang_version": "0.5.23", "gpu_count": 8, "gpu_memory_gib": 140}}


def _decode(**worker: Any) -> dict[str, Any]:
    return {"host": "gpu1", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 30002, "mem_fraction_static": 0.80, **worker}


def _combined(**worker: Any) -> dict[str, Any]:
    return {"host": "gpu1", "gpus": list(range(8)), "tp_size": 8, "port": 30010, "mem_fraction_static": 0.90,
            **worker}


def test_an_fp8_checkpoint_doubles_the_expert_bytes() -> None:
    nvfp4 = by_field(spec(hosts=H200, model={"path": "/m", "served_name": "s", "precision": "nvfp4"}))["decode[0]"]
    fp8 = by_field(spec(hosts=H200, model={"path": "/m", "served_name": "s", "precision": "fp8"}))["decode[0]"]
    # Only the experts change: 277.03B x (8 - 4.5) bits / 8 / tp 4.
    assert (fp8.weights_gib - nvfp4.weights_gib) * GIB == pytest.approx(277.03e9 * 3.5 / 8 / 4)
    assert "(fp8), bits by layer: experts 8, dense 8, embedding 16" in fp8.explanation[0]


def test_an_fp8_checkpoint_needs_a_larger_static_pool() -> None:
    fp8 = by_field(spec(decode_fraction=0.60, model={"path": "/m", "served_name": "s", "precision": "fp8"}))
    assert not fp8["decode[0]"].feasible  # 66 GiB of weights per GPU do not fit a 57.6 GiB pool
    assert fp8["decode[0]"].min_feasible_fraction == 0.74
    assert by_field(spec(decode_fraction=0.60))["decode[0]"].feasible


def test_attention_dp_keeps_attention_embedding_and_shared_experts_whole_on_every_gpu() -> None:
    fp8 = {"path": "/m", "served_name": "s", "precision": "fp8"}
    tp = by_field(spec(hosts=H200, model=fp8, decode=_decode()))["decode[0]"]
    dp = by_field(spec(hosts=H200, model=fp8, decode=_decode(attn_dp_size=4)))["decode[0]"]
    # 3 of 4 shares of attention (5.09B x 1 byte), shared experts (1.08B x 1) and embedding (0.53B x 2) more.
    assert (dp.weights_gib - tp.weights_gib) * GIB == pytest.approx((5.09 + 1.08 + 1.06) * 1e9 * 3 / 4)
    assert "whole on every GPU (attn_dp_size 4)" in dp.explanation[0]
    assert dp.kv_tokens_total == 4 * dp.kv_tokens_per_rank
    assert dp.kv_tokens_per_rank < tp.kv_tokens_per_rank


def test_dsv4_kv_bytes_per_token_follow_sglangs_pool_layout() -> None:
    combined = by_field(spec(hosts=H200, topology="combined", combined=_combined()))["combined"]
    # 10 % of a sliding-window slot (43 layers x 585 B + the 4:1 layers' compress state 6720 B), 21 layers
    # 4:1 ((585 + 132) / 4) and 20 layers 128:1 (864 / 128): sglang's 7086.75, not the old 43 x 576 = 24768.
    assert combined.kv_bytes_per_token == pytest.approx(0.1 * (43 * 585 + 6720) + 21 * 717 / 4 + 20 * 864 / 128)
    mtp = by_field(spec(hosts=H200, topology="combined",
                        combined=_combined(speculative={"num_steps": 3, "num_draft_tokens": 4})))["combined"]
    assert mtp.kv_bytes_per_token > combined.kv_bytes_per_token * 44 / 43  # wider rings too
    assert mtp.draft_weights_gib == pytest.approx(6.6e9 * 4.5 / 8 / GIB / 8)


def test_h200_tp_cells_take_the_cookbooks_090_and_dp_with_deepep_does_not() -> None:
    tp8 = by_field(spec(hosts=H200, index_topk=None, topology="combined", combined=_combined()))["combined"]
    assert tp8.sglang_default_fraction == 0.896 and tp8.feasible
    balanced = _combined(attn_dp_size=8, moe={"a2a_backend": "deepep"}, max_running_requests=256,
                         cuda_graph={"max_bs": 128})
    dp = check_memory(spec(hosts=H200, index_topk=None, topology="combined", combined=balanced))
    # 512 + 8192 x 1.5 + 1024 + 128 x 2 + DP padding 128 x 8 x 3 + DeepEP 2048 = 19200 MiB of 143360.
    assert dp[0].sglang_default_fraction == 0.866 and not dp[0].feasible
    assert [p.fix for p in problems_from_memory(dp)] == ["set mem_fraction_static to 0.87 or less"]


def test_the_pro_profile_allows_the_guides_75_minute_start_and_every_dsv4_profile_names_fatal_lines() -> None:
    from dsv4deploy.plan.memory import startup_window

    pro = startup_window(spec(model={"path": "/m", "served_name": "s", "profile": "deepseek-v4-pro"}))
    assert pro["readiness_deadline_s"] == 4500
    flash = startup_window(spec())
    assert flash["readiness_deadline_s"] == 600 and "CUDA error" in flash["fatal_log_patterns"]
