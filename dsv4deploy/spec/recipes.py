"""The DeepSeek-V4 recipes' settings, checked: what each sglang release can render, and the recipes' rules.

sglang's DeepSeek-V4 cookbook (docs_new/src/snippets/configs/deepseek-ai/deepseek-v4.jsx) and its
Hopper FP4-KV guide (docs/basic_usage/deepseek_v4_nvfp4_sm90.md) combine attention data parallelism,
expert parallelism, MTP, FP8 checkpoints and FP4 KV caches under rules that sglang itself only reports
at start-up, minutes into loading the weights (or never: a wrong transport is a silent TCP fallback).
Each rule here names the field, the host and the fix before anything changes on a host.
"""

from __future__ import annotations

from dsv4deploy.sglang import flags, versions
from dsv4deploy.spec.models import DecodeSpec, Deployment, PrefillSpec, Problem, WorkerSpec

# sglang's default for SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK (srt/environ.py of 0.5.12 to 0.5.23).
DEEPEP_DISPATCH_DEFAULT = 128
DEEPEP_DISPATCH_ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"
# MoE runners that compute FP4 experts (the recipes' H200 FP4 cells); an FP8 checkpoint has none.
FP4_MOE_RUNNERS = ("marlin", "flashinfer_mxfp4")
# The Hopper FP4 KV cache of deepseek_v4_nvfp4_sm90.md: "TP8, EP1, PP1 ... Do not enable speculative
# decoding/MTP ... Multi-node serving, two-batch overlap, disaggregation ... are outside the scope".
HOPPER_FP4_KV_DTYPE = "fp4_e2m1"
HOPPER_FP4_KV_TP = 8


def check_recipes(spec: Deployment) -> list[Problem]:
    """Every problem of the recipes' settings in `spec` (hosts and versions already known)."""
    out: list[Problem] = []
    for path, worker in spec.workers():
        version = spec.host(worker.host).sglang_version
        if version not in versions.RELEASES:
            continue
        table = flags.table(version)
        out += _release_lacks(spec, path, worker, table)
        out += _parallelism(path, worker)
        out += _mtp_dispatch(spec, path, worker)
        out += _fp4_kv(spec, path, worker)
        out += _precision(spec, path, worker)
        out += _transport(spec, path, worker)
        out += _nodes(spec, path, worker)
    out += _pd_speculative_agree(spec)
    return out


def _versions_with(predicate) -> str:  # type: ignore[no-untyped-def]
    having = [v for v in versions.known_versions() if predicate(flags.table(v))]
    return ", ".join(having) if having else "none of " + ", ".join(versions.known_versions())


def _release_lacks(spec: Deployment, path: str, worker: WorkerSpec, t: flags.FlagTable) -> list[Problem]:
    """Settings release `t` cannot render: refused with the version and what to do instead."""
    out = []
    dtype = spec.effective(worker, "kv_cache_dtype")
    if dtype is not None and t.kv_cache_dtypes and dtype not in t.kv_cache_dtypes:
        field = f"{path}.kv_cache_dtype" if worker.kv_cache_dtype is not None else "kv_cache_dtype"
        out.append(Problem(
            field=field, host=worker.host,
            message=f"sglang {t.version}'s --kv-cache-dtype has no '{dtype}' (it takes {', '.join(t.kv_cache_dtypes)})",
            fix=f"use one of those, or sglang_version {_versions_with(lambda x: dtype in x.kv_cache_dtypes)}"))
    if spec.effective(worker, "kv_cache_recipe") is not None and "kv_cache_recipe" in t.missing:
        field = f"{path}.kv_cache_recipe" if worker.kv_cache_recipe is not None else "kv_cache_recipe"
        out.append(Problem(
            field=field, host=worker.host,
            message=f"sglang {t.version} has no {t.missing['kv_cache_recipe']} (the Hopper FP4 KV guide's flag)",
            fix="remove kv_cache_recipe (sglang_version "
                f"{_versions_with(lambda x: 'kv_cache_recipe' not in x.missing)} has it), or add a flag table "
                "for a release that has it to dsv4deploy/sglang/flags.py"))
    transport = getattr(worker, "transport", None)
    if transport is not None and getattr(worker, "transfer_backend", None) in (None, "mooncake") \
            and transport not in t.mooncake_transports:
        out.append(Problem(
            field=f"{path}.transport", host=worker.host,
            message=f"sglang {t.version} cannot run mooncake over '{transport}': it offers "
                    f"{', '.join(t.mooncake_transports)} and has no {t.missing.get('transport', 'transport flag')}",
            fix=f"set transport to one of {', '.join(t.mooncake_transports)}, or sglang_version "
                f"{_versions_with(lambda x: transport in x.mooncake_transports)}"))
    return out


def _parallelism(path: str, worker: WorkerSpec) -> list[Problem]:
    out = []
    gpus = worker.gpu_total()
    dp = worker.attn_dp_size
    if dp is not None and (dp > worker.tp_size or worker.tp_size % dp):
        out.append(Problem(
            field=f"{path}.attn_dp_size", host=worker.host,
            message=f"attn_dp_size {dp} does not divide tp_size {worker.tp_size} (each attention DP rank is "
                    "tp_size / attn_dp_size GPUs)",
            fix=f"set attn_dp_size to a divisor of {worker.tp_size} (the recipes' balanced cells use "
                f"attn_dp_size = tp_size, e.g. {worker.tp_size})"))
    ep = worker.moe.ep_size if worker.moe else None
    if ep is not None and (ep > gpus or gpus % ep):
        out.append(Problem(
            field=f"{path}.moe.ep_size", host=worker.host,
            message=f"ep_size {ep} does not fit the server's {gpus} GPUs (experts are split over the server's "
                    "own ranks)",
            fix=f"set moe.ep_size to a divisor of {gpus} (e.g. {gpus})"))
    return out


def _dispatch_tokens(spec: Deployment, worker: WorkerSpec) -> tuple[int, str]:
    """SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK for `worker` and where it comes from."""
    for source, env in (("env", worker.env), ("server_env", spec.server_env)):
        if DEEPEP_DISPATCH_ENV in env and env[DEEPEP_DISPATCH_ENV].isdigit():
            return int(env[DEEPEP_DISPATCH_ENV]), source
    if worker.moe and worker.moe.deepep_max_dispatch_tokens_per_rank is not None:
        return worker.moe.deepep_max_dispatch_tokens_per_rank, "moe.deepep_max_dispatch_tokens_per_rank"
    return DEEPEP_DISPATCH_DEFAULT, "sglang's default"


def _mtp_dispatch(spec: Deployment, path: str, worker: WorkerSpec) -> list[Problem]:
    """The recipe's rule: max-running-requests x draft tokens <= the DeepEP dispatch tokens per rank."""
    mtp = worker.speculative
    if mtp is None or worker.moe is None or worker.moe.a2a_backend != "deepep":
        return []
    limit, source = _dispatch_tokens(spec, worker)
    running = worker.max_running_requests
    if running is None:
        return [Problem(
            field=f"{path}.max_running_requests", host=worker.host,
            message=f"MTP with deepep needs max_running_requests x {mtp.num_draft_tokens} draft tokens <= "
                    f"{limit} dispatch tokens per rank ({source}); unset, sglang sizes it from memory",
            fix=f"set max_running_requests to {limit // mtp.num_draft_tokens} or less")]
    if running * mtp.num_draft_tokens > limit:
        return [Problem(
            field=f"{path}.max_running_requests", host=worker.host,
            message=f"max_running_requests {running} x {mtp.num_draft_tokens} draft tokens = "
                    f"{running * mtp.num_draft_tokens} exceeds {limit} DeepEP dispatch tokens per rank ({source})",
            fix=f"set max_running_requests to {limit // mtp.num_draft_tokens} or less, or "
                f"moe.deepep_max_dispatch_tokens_per_rank to {running * mtp.num_draft_tokens} or more")]
    return []


def _fp4_kv(spec: Deployment, path: str, worker: WorkerSpec) -> list[Problem]:
    """The Hopper FP4 KV cache runs TP8 on one node, without MTP or PD (its guide's scope)."""
    if spec.effective(worker, "kv_cache_dtype") != HOPPER_FP4_KV_DTYPE:
        return []
    fix = "use kv_cache_dtype fp8_e4m3 (or unset) for this server"
    out = []
    if worker.tp_size != HOPPER_FP4_KV_TP:
        out.append(Problem(field=f"{path}.tp_size", host=worker.host,
                           message=f"the FP4 KV cache ({HOPPER_FP4_KV_DTYPE}) is validated with tp_size 8 only, "
                                   f"got {worker.tp_size}",
                           fix=f"set tp_size 8 (8 GPUs), or {fix}"))
    if worker.speculative is not None:
        out.append(Problem(field=f"{path}.speculative", host=worker.host,
                           message="the FP4 KV cache does not run with speculative decoding (MTP)",
                           fix=f"remove speculative, or {fix}"))
    if spec.topology == "pd":
        out.append(Problem(field=f"{path}.kv_cache_dtype", host=worker.host,
                           message="the FP4 KV cache does not run with PD disaggregation",
                           fix=f"use topology combined, or {fix}"))
    if len(worker.node_names()) > 1:
        out.append(Problem(field=f"{path}.nodes", host=worker.host,
                           message="the FP4 KV cache does not run on a server that spans nodes",
                           fix=f"run it on one node, or {fix}"))
    return out


def _precision(spec: Deployment, path: str, worker: WorkerSpec) -> list[Problem]:
    runner = worker.moe.runner_backend if worker.moe else None
    if spec.model.precision == "fp8" and runner in FP4_MOE_RUNNERS:
        return [Problem(field=f"{path}.moe.runner_backend", host=worker.host,
                        message=f"'{runner}' runs FP4 experts; model.precision fp8 has FP8 ones "
                                "(SGLANG_DSV4_FP4_EXPERTS=0)",
                        fix="unset moe.runner_backend (the recipes' H200 FP8 cells use sglang's default), or "
                            "serve an FP4 checkpoint")]
    return []


def _transport(spec: Deployment, path: str, worker: WorkerSpec) -> list[Problem]:
    """DeepEP moves tokens over NVLink and RDMA (NVSHMEM), never TCP; a transport is mooncake's."""
    out = []
    transport = getattr(worker, "transport", None)
    backend = getattr(worker, "transfer_backend", None)
    if transport is not None and backend not in (None, "mooncake"):
        out.append(Problem(field=f"{path}.transport", host=worker.host,
                           message=f"transport chooses mooncake's link; transfer_backend is '{backend}'",
                           fix="unset transport, or set transfer_backend mooncake"))
    deepep = worker.moe is not None and worker.moe.a2a_backend == "deepep"
    if deepep and transport == "tcp":
        out.append(Problem(field=f"{path}.moe.a2a_backend", host=worker.host,
                           message="deepep needs RDMA (or NVLink within a node), and this worker's transport is tcp",
                           fix="set transport rdma, or unset moe.a2a_backend"))
    if deepep and len(worker.node_names()) > 1 and isinstance(worker, PrefillSpec | DecodeSpec) \
            and transport not in (None, "rdma"):
        out.append(Problem(field=f"{path}.transport", host=worker.host,
                           message=f"deepep across {len(worker.node_names())} nodes needs RDMA, got {transport}",
                           fix="set transport rdma"))
    return out


def _nodes(spec: Deployment, path: str, worker: WorkerSpec) -> list[Problem]:
    """A server over several nodes: rank 0 is `host`, each node once, a dist-init port (known hosts: checks.py)."""
    if not worker.nodes:
        return []
    out = []
    nodes = worker.nodes
    if nodes[0] != worker.host:
        out.append(Problem(field=f"{path}.nodes", host=worker.host,
                           message=f"nodes must start with the server's host (rank 0), got {nodes[0]}",
                           fix=f"list {worker.host} first: nodes: [{worker.host}, ...]"))
    if len(set(nodes)) != len(nodes):
        out.append(Problem(field=f"{path}.nodes", host=worker.host, message=f"nodes {nodes} repeats a host",
                           fix="list each host once"))
    if len(nodes) > 1 and worker.dist_init_port is None:
        out.append(Problem(field=f"{path}.dist_init_port", host=worker.host,
                           message=f"a server over {len(nodes)} nodes needs the port where rank 0 gathers the others",
                           fix="set dist_init_port to a free port on rank 0's host (e.g. 5000)"))
    return out


def _pd_speculative_agree(spec: Deployment) -> list[Problem]:
    """Prefill and decode must agree on MTP: prefill runs the draft model whose state decode continues."""
    if spec.topology != "pd":
        return []
    workers = spec.workers()
    ref_path, ref = workers[0]
    out = []
    for path, w in workers[1:]:
        a = ref.speculative.algorithm if ref.speculative else None
        b = w.speculative.algorithm if w.speculative else None
        if a != b:
            out.append(Problem(field=f"{path}.speculative", host=w.host,
                               message=f"speculative algorithm {b!r} differs from {ref_path} ({a!r})",
                               fix="set the same speculative settings on every prefill and decode worker"))
    return out
