"""dsv4deploy.plan.memory: the seeds' memory reasoning must come out right, explained."""

from __future__ import annotations

from typing import Any

import pytest

from dsv4deploy.plan.memory import GIB, check_memory, load_profile, problems_from_memory
from dsv4deploy.spec import SpecError, load_spec

HOSTS = {"gpu1": {"sglang_version": "0.5.23", "gpu_count": 8, "gpu_memory_gib": 96}}


def spec(index_topk: int | None = 1024, prefill_fraction: float = 0.80, decode_fraction: float = 0.80,
         hosts: dict[str, Any] = HOSTS, **top: Any):
    """The seeds' box: tp 4 per role on 96 GiB GPUs."""
    common: dict[str, Any] = {
        "topology": "pd",
        "model": {"path": "/models/DeepSeek-V4-Flash-NVFP4", "served_name": "deepseek-v4-flash"},
        "prefill": [{"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30001,
                     "mem_fraction_static": prefill_fraction}],
        "decode": [{"host": "gpu1", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 30002,
                    "mem_fraction_static": decode_fraction}],
        "combined": {"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30010, "mem_fraction_static": 0.80},
        "router": {"host": "gpu1", "port": 30000},
        "index_topk": index_topk,
        **top,
    }
    return load_spec(common, hosts)


def by_field(deployment) -> dict[str, Any]:
    return {r.field: r for r in check_memory(deployment)}


def test_seeds_tp4_on_96_gb_cards_fits_with_about_35_gb_of_weights_per_gpu() -> None:
    decode = by_field(spec(index_topk=512))["decode[0]"]
    assert decode.weights_gib * GIB / 1e9 == pytest.approx(35.5)  # "~35GB per GPU" (142 GB / 4)
    assert decode.weights_gib == pytest.approx(33.06, abs=0.01)
    assert decode.static_pool_gib == pytest.approx(76.8)
    assert decode.kv_pool_gib == pytest.approx(76.8 - 33.06, abs=0.01)
    assert decode.feasible
    assert decode.explanation[0] == ("weights: 284B params x 4 bits = 132.2 GiB, / tp_size 4 = 33.1 GiB (35.5 GB) "
                                     "per GPU")


def test_decode_at_085_with_index_topk_512_fits() -> None:
    decode = by_field(spec(index_topk=512, decode_fraction=0.85))["decode[0]"]
    assert decode.headroom_available_gib == pytest.approx(14.4)
    assert decode.headroom_needed_gib == pytest.approx(13.5)
    assert decode.feasible
    assert decode.max_feasible_fraction == 0.85


def test_raising_index_topk_to_1024_on_a_decode_at_085_is_refused_with_080_or_less() -> None:
    reports = check_memory(spec(index_topk=1024, decode_fraction=0.85))
    decode = {r.field: r for r in reports}["decode[0]"]
    assert not decode.feasible
    assert decode.max_feasible_fraction is not None and decode.max_feasible_fraction <= 0.80
    assert decode.headroom_parts == {"base": 5.0, "cuda_graphs": 3.5, "topk_buffers": 10.0}
    assert [str(p) for p in problems_from_memory(reports)] == [
        "decode[0].mem_fraction_static (host gpu1): 0.85 leaves 14.4 GiB outside the static pool, 18.5 GiB needed "
        "with index_topk 1024 (base 5.0 + CUDA graphs 3.5 + top-k buffers 10.0); "
        "fix: set mem_fraction_static to 0.80 or less"]


def test_prefill_and_decode_at_080_with_index_topk_1024_fit() -> None:
    reports = check_memory(spec(index_topk=1024))
    assert [(r.field, r.feasible) for r in reports] == [("prefill[0]", True), ("decode[0]", True)]
    assert problems_from_memory(reports) == []
    # Decode keeps more top-k buffers than prefill.
    assert reports[1].headroom_parts["topk_buffers"] > reports[0].headroom_parts["topk_buffers"]


def test_combined_at_080_with_1024_fits() -> None:
    (combined,) = check_memory(spec(topology="combined"))
    assert combined.role == "combined" and combined.feasible


def test_index_topk_defaults_to_512() -> None:
    decode = by_field(spec(index_topk=None))["decode[0]"]
    assert decode.index_topk == 512
    assert decode.headroom_parts["topk_buffers"] == pytest.approx(5.0)


def test_the_explanation_names_every_number() -> None:
    decode = by_field(spec(index_topk=1024, decode_fraction=0.85))["decode[0]"]
    assert decode.explanation[1:] == [
        "static pool: mem_fraction_static 0.85 x 96 GiB = 81.6 GiB, leaving 48.5 GiB of KV cache after the weights "
        "(at least 2.0 GiB needed)",
        "headroom: 14.4 GiB outside the static pool, 18.5 GiB needed = base 5.0 + CUDA graphs 3.5 + top-k buffers "
        "10.0 (index_topk 1024, decode)",
        "KV cache: 24768 bytes per token (auto) -> about 2104220 tokens per attention-DP rank, 2104220 in all "
        "(attn_dp_size 1)",
        "does not fit: mem_fraction_static may be 0.37 to 0.80",
    ]


def test_a_static_pool_too_small_for_the_weights_asks_for_more() -> None:
    reports = check_memory(spec(prefill_fraction=0.30))
    assert [str(p) for p in problems_from_memory(reports)] == [
        "prefill[0].mem_fraction_static (host gpu1): 0.30 gives a 28.8 GiB static pool, too small for 33.1 GiB of "
        "weights per GPU and a 2.0 GiB KV pool; fix: set mem_fraction_static to at least 0.37"]


def test_weights_that_do_not_fit_at_any_fraction_ask_for_more_tp() -> None:
    common_hosts = {"gpu1": {**HOSTS["gpu1"], "gpu_memory_gib": 48}}
    reports = check_memory(spec(hosts=common_hosts))
    assert all(r.max_feasible_fraction is None for r in reports)
    assert [str(p) for p in problems_from_memory(reports)][1] == (
        "decode[0].tp_size (host gpu1): no mem_fraction_static fits: 33.1 GiB of weights per GPU at tp_size 4 + "
        "2.0 GiB KV + 18.5 GiB headroom exceed 48 GiB; "
        "fix: raise tp_size (more GPUs per server), lower index_topk or disable CUDA graphs")


def test_cuda_graphs_scale_with_max_bs_and_vanish_when_disabled() -> None:
    deployment = spec()
    halved = deployment.model_copy(update={"decode": [deployment.decode[0].model_copy(
        update={"cuda_graph": deployment.decode[0].cuda_graph.model_copy(update={"max_bs": 128})})]})
    off = deployment.model_copy(update={"decode": [deployment.decode[0].model_copy(
        update={"cuda_graph": deployment.decode[0].cuda_graph.model_copy(update={"enabled": False})})]})
    assert by_field(halved)["decode[0]"].headroom_parts["cuda_graphs"] == pytest.approx(1.75)
    assert by_field(off)["decode[0]"].headroom_parts["cuda_graphs"] == 0.0


def test_a_profile_override_from_the_inventory_changes_the_answer() -> None:
    assert by_field(spec())["decode[0]"].feasible
    heavier = by_field(spec(memory_profile={"headroom": {"base_gib": 6.0}}))["decode[0]"]
    assert not heavier.feasible
    assert heavier.max_feasible_fraction == 0.79
    bigger_gpus = by_field(spec(decode_fraction=0.85, hosts={"gpu1": {**HOSTS["gpu1"], "gpu_memory_gib": 141}}))
    assert bigger_gpus["decode[0]"].feasible


def test_the_override_merges_deeply() -> None:
    profile = load_profile({"headroom": {"topk_gib_per_512": {"decode": 7.0}}})
    assert profile.headroom.topk_gib_per_512 == {"prefill": 4.0, "decode": 7.0, "combined": 5.0}
    assert profile.headroom.base_gib == 5.0


def test_a_misspelt_override_key_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        check_memory(spec(memory_profile={"headroom": {"bse_gib": 6.0}}))
    assert str(err.value) == ("memory_profile.headroom.bse_gib: Extra inputs are not permitted (got 6.0); "
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


def test_the_generic_llama_profile_has_its_own_headroom_without_top_k_buffers() -> None:
    llama = spec(index_topk=None, model={"path": "/models/Llama-3.1-8B", "served_name": "llama", "profile": "llama"})
    decode = by_field(llama)["decode[0]"]
    assert decode.headroom_parts["topk_buffers"] == 0.0
    assert decode.headroom_parts["base"] == load_profile().models["llama"].headroom["base_gib"]
    assert decode.weights_gib == pytest.approx(8.03e9 * 2 / GIB / 4)
    assert decode.feasible


def test_a_bad_per_model_headroom_names_its_key() -> None:
    bad = spec(memory_profile={"models": {"deepseek-v4-flash": {"headroom": {"base_gib": -1}}}})
    with pytest.raises(SpecError, match=r"memory_profile\.models\.deepseek-v4-flash\.headroom\.base_gib"):
        check_memory(bad)


# -- the recipes' settings (issue 40) ----------------------------------------------------------------

H200 = {"gpu1": {"sglang_version": "0.5.23", "gpu_count": 8, "gpu_memory_gib": 140}}


def _decode(**worker: Any) -> dict[str, Any]:
    return {"host": "gpu1", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 30002, "mem_fraction_static": 0.80, **worker}


def test_an_fp8_checkpoint_doubles_the_weights_per_gpu() -> None:
    nvfp4 = by_field(spec(hosts=H200, model={"path": "/m", "served_name": "s", "precision": "nvfp4"}))["decode[0]"]
    fp8 = by_field(spec(hosts=H200, model={"path": "/m", "served_name": "s", "precision": "fp8"}))["decode[0]"]
    assert fp8.weights_gib == pytest.approx(2 * nvfp4.weights_gib)
    assert "x 8 bits (fp8)" in fp8.explanation[0]


def test_an_fp8_checkpoint_needs_a_larger_static_pool() -> None:
    fp8 = by_field(spec(decode_fraction=0.60, model={"path": "/m", "served_name": "s", "precision": "fp8"}))
    assert not fp8["decode[0]"].feasible  # 66 GiB of weights per GPU do not fit a 57.6 GiB pool
    assert fp8["decode[0]"].min_feasible_fraction == 0.71
    assert by_field(spec(decode_fraction=0.60))["decode[0]"].feasible


def test_mtp_adds_its_draft_layer_and_buffers() -> None:
    plain = by_field(spec(hosts=H200))["decode[0]"]
    mtp_spec = {"num_steps": 3, "num_draft_tokens": 4}
    prefill = {**_decode(speculative=mtp_spec), "gpus": [0, 1, 2, 3], "port": 30001}
    mtp = by_field(spec(hosts=H200, decode=_decode(speculative=mtp_spec), prefill=prefill))["decode[0]"]
    assert mtp.draft_weights_gib == pytest.approx(6.6e9 * 4 / 8 / GIB / 4)
    assert mtp.weights_gib == pytest.approx(plain.weights_gib + mtp.draft_weights_gib)
    assert mtp.headroom_parts["mtp_buffers"] == pytest.approx(2.0)
    assert mtp.headroom_needed_gib == pytest.approx(plain.headroom_needed_gib + 2.0)


def test_attention_dp_multiplies_the_servers_kv_tokens_and_fp4_kv_shrinks_the_row() -> None:
    dp = by_field(spec(hosts=H200, decode=_decode(attn_dp_size=4)))["decode[0]"]
    assert dp.kv_tokens_total == 4 * dp.kv_tokens_per_rank
    hosts = {"gpu1": {**H200["gpu1"], "sglang_version": "0.5.18"}}  # 0.5.23 spells FP4 KV otherwise
    tp8 = {"host": "gpu1", "gpus": list(range(8)), "tp_size": 8, "port": 30010, "mem_fraction_static": 0.80}
    fp4 = by_field(spec(hosts=hosts, kv_cache_dtype="fp4_e2m1", topology="combined", combined=tp8))["combined"]
    auto = by_field(spec(hosts=hosts, topology="combined", combined=tp8))["combined"]
    assert fp4.kv_tokens_per_rank / auto.kv_tokens_per_rank == pytest.approx(576 / 380, rel=1e-3)


def test_the_pro_profile_allows_the_guides_75_minute_start_and_every_dsv4_profile_names_fatal_lines() -> None:
    from dsv4deploy.plan.memory import startup_window

    pro = startup_window(spec(model={"path": "/m", "served_name": "s", "profile": "deepseek-v4-pro"}))
    assert pro["readiness_deadline_s"] == 4500
    flash = startup_window(spec())
    assert flash["readiness_deadline_s"] == 600 and "CUDA error" in flash["fatal_log_patterns"]
