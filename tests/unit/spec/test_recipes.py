"""dsv4deploy.spec.recipes: the DeepSeek-V4 recipes' rules, each refused with field, host and fix."""

from __future__ import annotations

from typing import Any

import pytest

from dsv4deploy.spec import SpecError, load_spec

HOST = {"sglang_version": "0.5.23", "gpu_count": 8, "gpu_memory_gib": 140, "ansible_host": "10.0.0.11"}
WORKER = {"host": "gpu1", "tp_size": 4, "mem_fraction_static": 0.8}


def pd(prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None, version: str = "0.5.23",
       hosts: dict[str, Any] | None = None, **top: Any):
    data = {
        "topology": "pd", "model": {"path": "/m", "served_name": "s"},
        "prefill": {**WORKER, "gpus": [0, 1, 2, 3], "port": 30001, **(prefill or {})},
        "decode": {**WORKER, "gpus": [4, 5, 6, 7], "port": 30002, **(decode or {})},
        "router": {"host": "gpu1", "port": 8000, "prometheus_port": 29001},
        **top,
    }
    return load_spec(data, hosts or {"gpu1": {**HOST, "sglang_version": version}})


def combined(version: str = "0.5.23", **worker: Any):
    data = {"topology": "combined", "model": {"path": "/m", "served_name": "s"},
            "combined": {**WORKER, "gpus": [0, 1, 2, 3], "port": 30000, **worker}}
    return load_spec(data, {"gpu1": {**HOST, "sglang_version": version}})


def refused(build, *args: Any, **kwargs: Any) -> list[str]:
    with pytest.raises(SpecError) as exc:
        build(*args, **kwargs)
    return [str(p) for p in exc.value.problems]


BALANCED = {"attn_dp_size": 4, "moe": {"a2a_backend": "deepep", "deepep_max_dispatch_tokens_per_rank": 256},
            "speculative": {"num_steps": 1, "num_draft_tokens": 2}, "max_running_requests": 128}


def test_the_recipes_balanced_h200_cell_is_accepted() -> None:
    spec = combined(**BALANCED)
    assert spec.combined is not None and spec.combined.attn_dp_size == 4


def test_attn_dp_size_must_divide_tp_size() -> None:
    (problem,) = refused(combined, attn_dp_size=3)
    assert problem.startswith("combined.attn_dp_size (host gpu1): attn_dp_size 3 does not divide tp_size 4")
    assert "fix: set attn_dp_size to a divisor of 4" in problem


def test_ep_size_must_fit_the_servers_gpus() -> None:
    (problem,) = refused(combined, moe={"ep_size": 8})
    assert problem.startswith("combined.moe.ep_size (host gpu1): ep_size 8 does not fit the server's 4 GPUs")


def test_mtp_with_deepep_keeps_running_requests_times_draft_tokens_within_the_dispatch_tokens() -> None:
    (problem,) = refused(combined, **{**BALANCED, "max_running_requests": 129})
    assert problem == ("combined.max_running_requests (host gpu1): max_running_requests 129 x 2 draft tokens = 258 "
                       "exceeds 256 DeepEP dispatch tokens per rank (moe.deepep_max_dispatch_tokens_per_rank); fix: "
                       "set max_running_requests to 128 or less, or moe.deepep_max_dispatch_tokens_per_rank to 258 "
                       "or more")


def test_mtp_with_deepep_and_no_limit_uses_sglangs_default_and_asks_for_max_running_requests() -> None:
    (problem,) = refused(combined, **{**BALANCED, "moe": {"a2a_backend": "deepep"}, "max_running_requests": None})
    assert "128 dispatch tokens per rank (sglang's default)" in problem
    assert problem.endswith("fix: set max_running_requests to 64 or less")


def test_the_dispatch_tokens_in_the_workers_env_count_too() -> None:
    problems = refused(combined, **{**BALANCED, "moe": {"a2a_backend": "deepep"},
                                    "env": {"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "200"}})
    assert "exceeds 200 DeepEP dispatch tokens per rank (env)" in problems[0]


def test_fp4_kv_on_hopper_needs_tp8_without_mtp_or_pd() -> None:
    problems = refused(combined, version="0.5.18", kv_cache_dtype="fp4_e2m1",
                       speculative={"num_steps": 3, "num_draft_tokens": 4})
    assert [p.split(":")[0] for p in problems] == ["combined.tp_size (host gpu1)", "combined.speculative (host gpu1)"]
    pd_problems = refused(pd, version="0.5.18", kv_cache_dtype="fp4_e2m1")
    assert any("does not run with PD disaggregation" in p for p in pd_problems)


def test_a_release_without_the_kv_dtype_is_refused_naming_the_releases_that_have_it() -> None:
    (problem,) = refused(combined, version="0.5.23", kv_cache_dtype="fp4_e2m1",
                         gpus=list(range(8)), tp_size=8)
    assert problem.startswith("combined.kv_cache_dtype (host gpu1): sglang 0.5.23's --kv-cache-dtype has no 'fp4_e2m1'")
    assert problem.endswith("fix: use one of those, or sglang_version 0.5.12, 0.5.18")


def test_the_fp4_kv_recipe_flag_is_in_no_supported_release() -> None:
    (problem,) = refused(combined, version="0.5.18", kv_cache_recipe="nvfp4", gpus=list(range(8)), tp_size=8)
    assert "sglang 0.5.18 has no --fp4-kv-cache-recipe" in problem


def test_an_fp8_checkpoint_refuses_an_fp4_moe_runner() -> None:
    problems = refused(pd, decode={"moe": {"runner_backend": "marlin"}}, model={"path": "/m", "served_name": "s",
                                                                               "precision": "fp8"})
    assert problems[0].startswith("decode[0].moe.runner_backend (host gpu1): 'marlin' runs FP4 experts")


def test_tcp_transport_needs_mooncake_tcp_which_0512_lacks() -> None:
    problem, _decode = refused(pd, version="0.5.12", prefill={"transport": "tcp"}, decode={"transport": "tcp"})
    assert problem.startswith("prefill[0].transport (host gpu1): sglang 0.5.12 cannot run mooncake over 'tcp'")
    assert "sglang_version 0.5.18, 0.5.23" in problem


def test_nvlink_transport_is_in_no_supported_release() -> None:
    problems = refused(pd, decode={"transport": "nvlink"})
    assert "has no --disaggregation-transport" in problems[0] and "none of 0.5.12, 0.5.18, 0.5.23" in problems[0]


def test_deepep_is_refused_over_tcp() -> None:
    problems = refused(pd, decode={"transport": "tcp", "moe": {"a2a_backend": "deepep"}})
    assert problems == ["decode[0].moe.a2a_backend (host gpu1): deepep needs RDMA (or NVLink within a node), and "
                        "this worker's transport is tcp; fix: set transport rdma, or unset moe.a2a_backend"]


def test_prefill_and_decode_agree_on_what_shapes_the_kv_and_on_mtp() -> None:
    problems = refused(pd, decode={"page_size": 256, "speculative": {"num_steps": 1, "num_draft_tokens": 2}})
    assert any(p.startswith("decode[0].page_size (host gpu1): page_size 256 differs from prefill[0]") for p in problems)
    mtp = "decode[0].speculative (host gpu1): speculative algorithm 'EAGLE' differs"
    assert any(p.startswith(mtp) for p in problems)


TWO_NODES = {"gpu1": HOST, "gpu2": {**HOST, "ansible_host": "10.0.0.12"}}


def test_a_server_over_two_nodes_counts_the_gpus_of_both() -> None:
    spec = pd(decode={"nodes": ["gpu1", "gpu2"], "gpus": [4, 5, 6, 7], "tp_size": 8, "dist_init_port": 5000},
              hosts=TWO_NODES)
    assert spec.decode[0].gpu_total() == 8 and spec.hosts_in_use() == ["gpu1", "gpu2"]


def test_a_server_over_nodes_needs_known_hosts() -> None:
    (problem,) = refused(pd, decode={"nodes": ["gpu1", "gpu9"], "tp_size": 8}, hosts=TWO_NODES)
    assert problem.startswith("decode[0].nodes (host gpu9): host 'gpu9' is not in the inventory")


def test_a_server_over_nodes_needs_rank0_first_and_a_dist_init_port() -> None:
    text = "\n".join(refused(pd, decode={"nodes": ["gpu2", "gpu1"], "tp_size": 8}, hosts=TWO_NODES))
    assert "decode[0].nodes (host gpu1): nodes must start with the server's host (rank 0), got gpu2" in text
    assert "decode[0].dist_init_port (host gpu1): a server over 2 nodes needs the port" in text


def test_a_dist_init_port_clashing_with_a_listener_is_refused() -> None:
    problems = refused(pd, decode={"nodes": ["gpu1", "gpu2"], "tp_size": 8, "dist_init_port": 30001},
                       hosts=TWO_NODES)
    assert any(p.startswith("decode[0].dist_init_port (host gpu1): port 30001 is also used by prefill[0].port")
               for p in problems)


def test_tp_size_over_nodes_must_be_gpus_times_nodes() -> None:
    problems = refused(pd, decode={"nodes": ["gpu1", "gpu2"], "tp_size": 4, "dist_init_port": 5000},
                       hosts=TWO_NODES)
    assert problems[0].startswith("decode[0].tp_size (host gpu1): tp_size 4 does not match 4 GPUs [4, 5, 6, 7] on "
                                  "each of 2 nodes (8)")


def test_extra_args_may_not_set_a_recipe_flag_again() -> None:
    problems = refused(combined, version="0.5.18", extra_args=["--enable-dp-attention"])
    assert "'--enable-dp-attention' is rendered from the spec already" in problems[0]

