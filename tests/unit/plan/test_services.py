"""Service definitions: exact argv, env precedence, names, router argv, secrets, quoting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4deploy.plan.render import render_release
from dsv4deploy.plan.services import build_services, services_on

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import combined_spec, pd_spec, xpyd_spec

LAUNCHER = ["python3", "-m", "sglang.launch_server"]
COMMON = [
    "--model-path", "/models/DeepSeek-V4-Flash-NVFP4", "--served-model-name", "deepseek-v4-flash",
    "--tp-size", "4", "--base-gpu-id", "0", "--host", "0.0.0.0",
]
MODEL = ["--json-model-override-args", '{"index_topk":1024}',
         "--chat-template", "/models/DeepSeek-V4-Flash-NVFP4/chat_template.jinja"]
PARSERS = ["--reasoning-parser", "deepseek-v4", "--tool-call-parser", "deepseekv4"]


def by_name(spec):
    return {s.name: s for s in build_services(spec)}


def test_pd_server_argv_exact():
    svcs = by_name(pd_spec())
    assert list(svcs) == ["sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"]
    assert svcs["sglang-dsv4-prefill"].argv == [
        *LAUNCHER, *COMMON, "--port", "30001", "--mem-fraction-static", "0.8", "--enable-metrics", *MODEL,
        "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "8998", *PARSERS]
    assert svcs["sglang-dsv4-decode"].argv == [
        *LAUNCHER, *COMMON, "--port", "30002", "--mem-fraction-static", "0.8", "--enable-metrics", *MODEL,
        "--disaggregation-mode", "decode", "--cuda-graph-max-bs-decode", "64", *PARSERS]


def test_pd_router_argv_exact():
    router = by_name(pd_spec())["sglang-dsv4-router"]
    assert router.argv == [
        "python3", "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", "http://10.0.0.11:30001", "8998", "--decode", "http://10.0.0.11:30002",
        "--host", "0.0.0.0", "--port", "8000",
        "--retry-max-retries", "3", "--retry-initial-backoff-ms", "100", "--retry-max-backoff-ms", "2000",
        "--cb-failure-threshold", "30", "--cb-timeout-duration-secs", "10",
        "--health-check-endpoint", "/health", "--health-check-interval-secs", "10",
        "--health-failure-threshold", "3", "--health-check-timeout-secs", "5",
        "--worker-startup-timeout-secs", "1800", "--worker-startup-check-interval", "1",
        "--prometheus-port", "29000", "--prometheus-host", "127.0.0.1", "--shutdown-grace-period-secs", "60"]
    assert router.stop_timeout_s == 60 + 15  # the service manager must not kill it while it drains
    assert router.after == ["sglang-dsv4-prefill", "sglang-dsv4-decode"]
    assert router.start_order == 20 and router.ports == [8000, 29000] and router.gpus == []


def test_combined_argv_exact_and_cuda_graph_disabled():
    (svc,) = build_services(combined_spec())
    assert svc.name == "sglang-dsv4" and svc.role == "combined" and svc.start_order == 10
    assert svc.argv == [*LAUNCHER, *COMMON, "--port", "30000", "--mem-fraction-static", "0.8", "--enable-metrics",
                        *MODEL, "--disable-prefill-cuda-graph", "--disable-decode-cuda-graph", *PARSERS]


def test_generic_llama_profile_gets_generic_flags_only():
    # No DeepSeek-V4 reasoning/tool-call parsers and no attention backend: sglang's defaults for the model.
    (svc,) = build_services(combined_spec(model={"path": "/models/Llama-3.1-8B", "served_name": "llama",
                                                 "profile": "llama"}, index_topk=None, chat_template=None))
    assert svc.argv == [*LAUNCHER, "--model-path", "/models/Llama-3.1-8B", "--served-model-name", "llama",
                        *COMMON[4:], "--port", "30000", "--mem-fraction-static", "0.8", "--enable-metrics",
                        "--disable-prefill-cuda-graph", "--disable-decode-cuda-graph"]
    assert not any(a.startswith(("--reasoning-parser", "--tool-call-parser", "--attention-backend")) for a in svc.argv)


def test_old_version_gets_old_cuda_graph_flags():
    assert "--cuda-graph-max-bs" in by_name(pd_spec(version="0.5.12"))["sglang-dsv4-decode"].argv
    (svc,) = build_services(combined_spec(version="0.5.12"))
    assert "--disable-cuda-graph" in svc.argv


@pytest.mark.parametrize("make", [pd_spec, combined_spec, xpyd_spec])
def test_0_5_23_never_emits_removed_flags(make):
    for svc in build_services(make()):
        assert "--cuda-graph-max-bs" not in svc.argv and "--disable-cuda-graph" not in svc.argv


def test_env_precedence_and_gpus():
    svcs = by_name(pd_spec())
    prefill, decode = svcs["sglang-dsv4-prefill"], svcs["sglang-dsv4-decode"]
    assert decode.env["SGLANG_DSV4_BF16_INDEX_K"] == "1"  # worker env beats server_env
    assert prefill.env["SGLANG_DSV4_BF16_INDEX_K"] == "0"
    assert prefill.env["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"] == "600"
    assert prefill.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and decode.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert list(prefill.env) == sorted(prefill.env)
    assert svcs["sglang-dsv4-router"].env == {}


def test_gpu_list_cannot_be_overridden_by_env():
    spec = pd_spec(server_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    assert by_name(spec)["sglang-dsv4-decode"].env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"


def test_paths_ports_users_and_urls():
    svcs = by_name(pd_spec("supervisor"))
    p = svcs["sglang-dsv4-prefill"]
    assert p.workdir == "/opt/dsv4deploy/current"
    assert p.exec_path == "/opt/dsv4deploy/current/bin/serve-sglang-dsv4-prefill.sh"
    assert p.log_path == "/opt/dsv4deploy/logs/sglang-dsv4-prefill.log"
    assert p.ports == [30001, 8998] and p.gpus == [0, 1, 2, 3] and p.user == "sglang"
    assert p.url == "http://10.0.0.11:30001" and p.sglang_version == "0.5.23"
    assert by_name(pd_spec())["sglang-dsv4-prefill"].log_path is None  # systemd: the journal


def test_loopback_listener_is_reached_on_loopback():
    spec = pd_spec()
    hosts = {"gpu1": spec.hosts["gpu1"].model_copy(update={"listen": "127.0.0.1"})}
    spec = spec.model_copy(update={"hosts": hosts})
    assert by_name(spec)["sglang-dsv4-prefill"].url == "http://127.0.0.1:30001"


def test_xpyd_names_and_router_argv():
    spec = xpyd_spec()
    svcs = by_name(spec)
    assert list(svcs) == ["sglang-dsv4-prefill", "sglang-dsv4-prefill-2", "sglang-dsv4-decode",
                          "sglang-dsv4-decode-2", "sglang-dsv4-router"]
    argv = svcs["sglang-dsv4-router"].argv
    assert argv[3:15] == ["--pd-disaggregation",
                          "--prefill", "http://10.0.0.11:30001", "8998", "--prefill", "http://10.0.0.12:30001", "8999",
                          "--decode", "http://10.0.0.13:30002", "--decode", "http://10.0.0.13:30003", "--host"]
    for flag, value in (("--policy", "round_robin"), ("--prefill-policy", "cache_aware"),
                        ("--decode-policy", "power_of_two")):
        assert argv[argv.index(flag) + 1] == value
    assert "--disable-retries" in argv and "--disable-circuit-breaker" in argv
    assert "--retry-max-retries" not in argv and "--cb-failure-threshold" not in argv
    # Only the router's own host can order it after workers.
    assert svcs["sglang-dsv4-router"].after == ["sglang-dsv4-prefill"]
    p2 = svcs["sglang-dsv4-prefill-2"]
    assert p2.argv[p2.argv.index("--disaggregation-transfer-backend") + 1] == "mooncake"
    assert p2.argv[p2.argv.index("--disaggregation-ib-device") + 1] == "mlx5_0"
    assert [s.name for s in services_on(spec, "gpu3")] == ["sglang-dsv4-decode", "sglang-dsv4-decode-2"]
    assert svcs["sglang-dsv4-decode"].api_key_file == "/opt/dsv4deploy/secrets/api_key"


def test_extra_args_last():
    spec = pd_spec(prefill={**pd_spec().prefill[0].model_dump(), "extra_args": ["--enable-metrics"]})
    assert by_name(spec)["sglang-dsv4-prefill"].argv[-1] == "--enable-metrics"


def test_no_overrides_no_json_flag():
    spec = combined_spec(index_topk=None)
    assert "--json-model-override-args" not in build_services(spec)[0].argv


def test_api_key_value_never_rendered(tmp_path):
    key = "sk-very-secret-0123456789"
    key_file = tmp_path / "api_key"
    key_file.write_text(key + "\n")
    spec = pd_spec(api_key={"file": str(key_file)})
    files = render_release(spec, "gpu1")
    assert all(key not in text for text in files.values())
    assert all(str(key_file) in files[f"bin/serve-{n}.sh"] for n in by_name(spec))
    for svc in build_services(spec):
        assert key not in " ".join(svc.argv) and key not in str(svc.env)


HOSTILE = "/models/it's a \"model\" $(touch pwned) `id` ; rm -rf ~ \\ *"


def _run_script(tmp_path, spec, name):
    """Run the rendered serve script with the launcher replaced by a printer of its argv and env."""
    files = render_release(spec, "gpu1")
    script = files[f"bin/serve-{name}.sh"]
    script = script.replace("cd /opt/dsv4deploy/current", f"cd {tmp_path}")
    path = tmp_path / "serve.sh"
    path.write_text(script)
    out = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\0")


def test_hostile_values_round_trip_through_bash(tmp_path):
    printer = [sys.executable, "-c",
               "import os,sys; sys.stdout.write('\\0'.join(sys.argv[1:] + [os.environ['HOSTILE']]))"]
    key_file = tmp_path / "key_file"  # a plain path (validated); the key itself is hostile
    key_file.write_text("k'ey $x\n")
    # Names and paths must be plain (validation refuses the rest); free text reaches only argv and env.
    hostile_args = ["--tokenizer-path", HOSTILE]
    spec = combined_spec(combined={**combined_spec().combined.model_dump(), "extra_args": hostile_args},
                         server_env={"HOSTILE": HOSTILE + "\nsecond line"}, server_launcher=printer,
                         api_key={"file": str(key_file)})
    (svc,) = build_services(spec)
    got = _run_script(tmp_path, spec, svc.name)
    assert got[:-1] == [*svc.argv[len(printer):], "--api-key", "k'ey $x"]
    assert got[-1] == HOSTILE + "\nsecond line"
    assert not (tmp_path / "pwned").exists()


def test_missing_key_file_stops_the_script(tmp_path):
    spec = combined_spec(api_key={"file": str(tmp_path / "absent")}, server_launcher=["true"])
    files = render_release(spec, "gpu1")
    path = tmp_path / "serve.sh"
    path.write_text(files["bin/serve-sglang-dsv4.sh"].replace("cd /opt/dsv4deploy/current", f"cd {tmp_path}"))
    out = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "cannot read the API key file" in out.stderr


def test_smg_router_argv_and_description():
    sglang_router = by_name(pd_spec())["sglang-dsv4-router"]
    smg = by_name(pd_spec(router_implementation="smg"))["sglang-dsv4-router"]
    # Same flags (both wheels spell them alike), the other launcher.
    assert smg.argv == ["python3", "-m", "smg.launch_router", *sglang_router.argv[3:]]
    assert smg.description.startswith("smg (PD)") and sglang_router.description.startswith("sglang-router (PD)")


# -- the recipes' settings, per sglang version ------------------------------------------

BALANCED = {"attn_dp_size": 4, "moe": {"a2a_backend": "deepep", "deepep_max_dispatch_tokens_per_rank": 256},
            "speculative": {"num_steps": 1, "num_draft_tokens": 2}, "max_running_requests": 128}


def _combined(version: str, **worker: object):
    spec = combined_spec(version=version)
    assert spec.combined is not None
    return combined_spec(version=version, combined={**spec.combined.model_dump(), **worker})


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("version", ["0.5.12", "0.5.18"])
def test_attention_dp_is_dp_size_plus_enable_dp_attention_up_to_0518(version: str) -> None:
    (svc,) = build_services(_combined(version, **BALANCED))
    assert _after(svc.argv, "--dp-size") == "4" and "--enable-dp-attention" in svc.argv
    assert "--attn-dp-size" not in svc.argv


def test_attention_dp_is_attn_dp_size_in_0523() -> None:
    (svc,) = build_services(_combined("0.5.23", **BALANCED))
    assert _after(svc.argv, "--attn-dp-size") == "4"
    assert "--enable-dp-attention" not in svc.argv and "--dp-size" not in svc.argv
    assert [_after(svc.argv, f) for f in ("--moe-a2a-backend", "--speculative-algorithm", "--speculative-num-steps",
                                          "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                                          "--max-running-requests")] == ["deepep", "EAGLE", "1", "1", "2", "128"]
    # Its name holds TOKEN, so dsv4deploy.spec.secret_env keeps it in the secret env file.
    assert {**svc.env, **svc.secret_env}["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "256"
    assert "SGLANG_ENABLE_SPEC_V2" not in svc.env  # speculative v2 is always on from 0.5.18


def test_mtp_sets_sglang_enable_spec_v2_on_0512_where_it_exists() -> None:
    (svc,) = build_services(_combined("0.5.12", **BALANCED))
    assert svc.env["SGLANG_ENABLE_SPEC_V2"] == "1"


def test_an_fp8_checkpoint_switches_the_fp4_experts_off_and_the_inventory_env_wins() -> None:
    model = {"path": "/models/DeepSeek-V4-Flash-FP8", "served_name": "s", "precision": "fp8"}
    (svc,) = build_services(combined_spec(model=model))
    assert svc.env["SGLANG_DSV4_FP4_EXPERTS"] == "0"
    (svc,) = build_services(combined_spec(model=model, server_env={"SGLANG_DSV4_FP4_EXPERTS": "1"}))
    assert svc.env["SGLANG_DSV4_FP4_EXPERTS"] == "1"


@pytest.mark.parametrize(("version", "backend"), [("0.5.18", "mooncake_tcp"), ("0.5.23", "mooncake_tcp")])
def test_tcp_transport_is_mooncake_tcp(version: str, backend: str) -> None:
    spec = pd_spec(version=version)
    spec = pd_spec(version=version, prefill={**spec.prefill[0].model_dump(), "transport": "tcp"},
                   decode={**spec.decode[0].model_dump(), "transport": "tcp"})
    assert {_after(s.argv, "--disaggregation-transfer-backend") for s in build_services(spec)[:2]} == {backend}


def test_a_server_over_two_nodes_runs_one_service_per_node_with_its_rank() -> None:
    from fixture_specs import multi_node_pd_spec

    spec = multi_node_pd_spec()
    services = build_services(spec)
    decode, rank1 = [s for s in services if s.role == "decode"]
    assert (decode.host, rank1.host, rank1.name) == ("gpu1", "gpu2", f"{decode.name}-rank1")
    for svc, rank in ((decode, "0"), (rank1, "1")):
        assert [_after(svc.argv, f) for f in ("--nnodes", "--node-rank", "--dist-init-addr", "--tp-size")] == [
            "2", rank, "10.0.0.11:5000", "8"]
    assert rank1.rank0 == decode.name and rank1.node_rank == 1 and rank1.gpus == decode.gpus
    router = services[-1]
    assert rank1.url not in router.argv and decode.url in router.argv  # the router knows rank 0 only
    files = render_release(spec, "gpu2")
    assert f"units/{rank1.name}.service" in files and '"rank0"' in files["services.json"]


def test_each_rank_listens_on_its_own_nodes_address() -> None:
    from fixture_specs import multi_node_pd_spec

    spec = multi_node_pd_spec()
    hosts = {name: h.model_copy(update={"listen": h.address}) for name, h in spec.hosts.items()}
    decode, rank1 = [s for s in build_services(spec.model_copy(update={"hosts": hosts})) if s.role == "decode"]
    assert (_after(decode.argv, "--host"), _after(rank1.argv, "--host")) == ("10.0.0.11", "10.0.0.12")
    assert rank1.url == "http://10.0.0.12:30002"


def test_the_gates_address_rank0_and_the_wait_on_rank1s_host_watches_rank1_until_rank0_answers() -> None:
    from fixture_specs import multi_node_pd_spec

    from dsv4deploy.plan import gate_targets

    targets = gate_targets(multi_node_pd_spec())
    assert "sglang-dsv4-decode-rank1" not in [w["name"] for w in targets["workers"]]
    assert targets["ranks"] == [{"name": "sglang-dsv4-decode-rank1", "host": "gpu2", "rank0": "sglang-dsv4-decode",
                                 "rank0_url": "http://10.0.0.11:30002"}]


def test_an_unset_mem_fraction_static_is_left_to_sglang_and_out_of_spec_json():
    spec = combined_spec()
    unset = spec.model_copy(update={"combined": spec.combined.model_copy(update={"mem_fraction_static": None})})
    argv = by_name(unset)["sglang-dsv4"].argv
    assert "--mem-fraction-static" not in argv
    assert "--mem-fraction-static" in by_name(spec)["sglang-dsv4"].argv
    deployment = json.loads(render_release(unset, "gpu1")["spec.json"])["deployment"]
    assert "mem_fraction_static" not in deployment["combined"]
