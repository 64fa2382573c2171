"""dsv4deploy.spec: every validation error, with its exact message (field, host, fix)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dsv4deploy.spec import Deployment, SpecError, load_spec

HOSTS = {"gpu1": {"sglang_version": "0.5.23", "gpu_count": 8, "gpu_memory_gib": 96, "ansible_host": "10.0.0.11"}}


def seeds_pd() -> dict[str, Any]:
    """The seeds' box: prefill on GPUs 0-3, decode on 4-7, router beside them."""
    return {
        "topology": "pd",
        "model": {"path": "/models/DeepSeek-V4-Flash-NVFP4", "served_name": "deepseek-v4-flash"},
        "index_topk": 1024,
        "prefill": [{"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30001, "bootstrap_port": 8998,
                     "mem_fraction_static": 0.80}],
        "decode": [{"host": "gpu1", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 30002, "mem_fraction_static": 0.80}],
        "combined": {"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30010, "mem_fraction_static": 0.80},
        "router": {"host": "gpu1", "port": 30000},
    }


def problems(common: dict[str, Any], hostvars: dict[str, dict[str, Any]] = HOSTS) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec(common, hostvars)
    assert str(err.value) == "\n".join(str(p) for p in err.value.problems)
    return [str(p) for p in err.value.problems]


def changed(**changes: Any) -> dict[str, Any]:
    """seeds_pd() with dotted paths replaced, e.g. changed(**{"decode.0.port": 30001})."""
    common = seeds_pd()
    for path, value in changes.items():
        node: Any = common
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return common


_DELETE = object()


def test_seeds_deployment_is_valid() -> None:
    spec = load_spec(seeds_pd(), HOSTS)
    assert isinstance(spec, Deployment)
    assert [path for path, _ in spec.workers()] == ["prefill[0]", "decode[0]"]
    assert spec.hosts["gpu1"].address == "10.0.0.11"
    assert spec.model_override_args(spec.decode[0]) == {"index_topk": 1024}


def test_a_single_worker_mapping_is_a_list_of_one() -> None:
    common = seeds_pd()
    common["decode"] = common["decode"][0]
    assert len(load_spec(common, HOSTS).decode) == 1


def test_unrelated_inventory_variables_are_ignored() -> None:
    assert load_spec({**seeds_pd(), "ansible_connection": "local", "needle_lengths": [1]}, HOSTS).topology == "pd"


def test_gpu_overlap_on_one_host() -> None:
    assert problems(changed(**{"decode.0.gpus": [3, 4, 5, 6]})) == [
        "decode[0].gpus (host gpu1): GPUs [3] are also used by prefill[0]; "
        "fix: give each server its own GPUs on a host (e.g. prefill 0-3, decode 4-7)"]


def test_same_gpus_on_different_hosts_are_fine() -> None:
    # The two hosts reach each other: each listens on every address, with a key.
    hosts = {"gpu1": {**HOSTS["gpu1"], "listen": "0.0.0.0"},
             "gpu2": {**HOSTS["gpu1"], "ansible_host": "10.0.0.12", "listen": "0.0.0.0"}}
    spec = load_spec(changed(**{"decode.0.host": "gpu2", "decode.0.gpus": [0, 1, 2, 3],
                                "api_key": {"file": "/etc/dsv4deploy/api_key"}}), hosts)
    assert spec.decode[0].host == "gpu2"


def test_tp_not_matching_the_gpu_list() -> None:
    assert problems(changed(**{"prefill.0.tp_size": 2})) == [
        "prefill[0].tp_size (host gpu1): tp_size 2 does not match 4 GPUs [0, 1, 2, 3]; "
        "fix: set tp_size: 4 or list 2 GPUs (e.g. [0, 1])"]


def test_tp_fix_never_suggests_a_tp_size_the_model_cannot_split_over() -> None:
    # tp_size 4 on 5 GPUs suggested "tp_size 5".
    assert problems(changed(**{"prefill.0.tp_size": 4, "prefill.0.gpus": [0, 1, 2, 3, 4],
                               "decode.0.gpus": [5, 6, 7]}))[0] == (
        "prefill[0].tp_size (host gpu1): tp_size 4 does not match 5 GPUs [0, 1, 2, 3, 4]; "
        "fix: list 4 GPUs (e.g. [0, 1, 2, 3]); tp_size is one of 1, 2, 4, 8, 16 (the model's heads split evenly)")


def test_gpu_the_host_does_not_have() -> None:
    assert problems(changed(**{"decode.0.gpus": [6, 7, 8, 9]})) == [
        "decode[0].gpus (host gpu1): GPUs [8, 9] do not exist (the host has 8: 0-7); "
        "fix: use GPU indices the host has, or set gpu_count for the host"]


def test_port_clash_between_workers() -> None:
    assert problems(changed(**{"decode.0.port": 30001})) == [
        "decode[0].port (host gpu1): port 30001 is also used by prefill[0].port; "
        "fix: give every listener on a host its own port"]


def test_port_clash_with_the_bootstrap_port_and_the_router() -> None:
    assert problems(changed(**{"decode.0.port": 8998, "router.port": 30001})) == [
        "decode[0].port (host gpu1): port 8998 is also used by prefill[0].bootstrap_port; "
        "fix: give every listener on a host its own port",
        "router.port (host gpu1): port 30001 is also used by prefill[0].port; "
        "fix: give every listener on a host its own port"]


@pytest.mark.parametrize(("name", "prefill_value", "decode_value", "shown"), [
    ("index_topk", 1024, 512, "index_topk 512 differs from prefill[0] (1024)"),
    ("page_size", 64, 1, "page_size 1 differs from prefill[0] (64)"),
    ("kv_cache_dtype", "fp8_e4m3", "auto", "kv_cache_dtype 'auto' differs from prefill[0] ('fp8_e4m3')"),
    ("chat_template", "/m/a.jinja", "/m/b.jinja", "chat_template '/m/b.jinja' differs from prefill[0] ('/m/a.jinja')"),
    ("context_length", 524288, 65536, "context_length 65536 differs from prefill[0] (524288)"),
    ("model_overrides", {"rope_theta": 1}, {"rope_theta": 2},
     'model_overrides {"rope_theta": 2} differs from prefill[0] ({"rope_theta": 1})'),
])
def test_prefill_and_decode_disagree_on_a_model_affecting_setting(
        name: str, prefill_value: Any, decode_value: Any, shown: str) -> None:
    common = changed(**{f"prefill.0.{name}": prefill_value, f"decode.0.{name}": decode_value})
    assert problems(common) == [
        f"decode[0].{name} (host gpu1): {shown}; "
        f"fix: set {name} once at the top level, or to the same value on every worker"]


def test_a_worker_value_against_the_top_level_one_also_disagrees() -> None:
    assert problems(changed(**{"decode.0.page_size": 64, "page_size": 1})) == [
        "decode[0].page_size (host gpu1): page_size 64 differs from prefill[0] (1); "
        "fix: set page_size once at the top level, or to the same value on every worker"]


def test_the_model_cannot_differ_per_role() -> None:
    # One `model` for the whole deployment: a per-worker model is an unknown key, not a silent split.
    assert problems(changed(**{"decode.0.model": {"path": "/other", "served_name": "x"}})) == [
        "decode[0].model (host gpu1): unknown key 'model'; fix: remove it or check its spelling against the keys "
        "of decode[0]"]


def test_index_topk_the_version_does_not_support() -> None:
    # Once, though both workers inherit it from the top level on the same host.
    assert problems(changed(index_topk=1000)) == [
        "index_topk (host gpu1): sglang 0.5.23's DeepSeek-V4 backend accepts index_topk 512 or 1024 only, got 1000; "
        "fix: set index_topk to 512 or 1024"]


def test_index_topk_set_on_one_worker_names_that_worker() -> None:
    common = changed(**{"prefill.0.index_topk": 2048, "decode.0.index_topk": 2048, "index_topk": None})
    assert problems(common) == [
        "prefill[0].index_topk (host gpu1): sglang 0.5.23's DeepSeek-V4 backend accepts index_topk 512 or 1024 "
        "only, got 2048; fix: set index_topk to 512 or 1024",
        "decode[0].index_topk (host gpu1): sglang 0.5.23's DeepSeek-V4 backend accepts index_topk 512 or 1024 "
        "only, got 2048; fix: set index_topk to 512 or 1024"]


@pytest.mark.parametrize("fraction", [0, 0.0, 1, 1.2, -0.1])
def test_mem_fraction_outside_0_1(fraction: float) -> None:
    assert problems(changed(**{"decode.0.mem_fraction_static": fraction})) == [
        f"decode[0].mem_fraction_static (host gpu1): {fraction!r} is outside (0, 1); "
        "fix: use a fraction such as 0.80 (see `dsv4deploy plan` for the largest that fits)"]


@pytest.mark.parametrize("version", ["0.5.11", "0.6.1", "latest"])
def test_a_version_older_than_every_table_or_of_another_series_is_refused(version) -> None:
    hosts = {"gpu1": {**HOSTS["gpu1"], "sglang_version": version}}
    assert problems(seeds_pd(), hosts) == [
        f"sglang_version (host gpu1): sglang {version} is older than, or of another series than, the releases "
        "dsv4deploy knows the flags of (0.5.12, 0.5.18, 0.5.23; a newer patch release uses the nearest of them); "
        "fix: set sglang_version to the version installed on the host (python -c 'import sglang; "
        "print(sglang.__version__)'); for an older or newer series, install a known release"]


@pytest.mark.parametrize(("version", "table"), [("0.5.24", "0.5.23"), ("0.5.23.post1", "0.5.23"),
                                                ("0.5.19", "0.5.18"), ("0.5.12", "0.5.12")])
def test_a_patch_release_without_a_table_uses_the_nearest_one_below(version, table) -> None:
    from dsv4deploy.sglang import flags, versions

    load_spec(seeds_pd(), {"gpu1": {**HOSTS["gpu1"], "sglang_version": version}})
    assert versions.table_version(version) == table and flags.table(version).version == table


def test_the_plan_line_names_the_table_whose_flags_and_rules_a_patch_release_follows() -> None:
    from dsv4deploy.cli.plan import version_note

    assert version_note("0.5.23.post1").startswith("0.5.23.post1 (flags and rules of 0.5.23, the nearest known table")
    assert version_note("0.5.23") == "0.5.23"


def test_unknown_key_in_a_nested_mapping_says_which_key_was_meant() -> None:
    assert problems(changed(**{"router.polcy": "round_robin"})) == [
        "router.polcy (host gpu1): unknown key 'polcy'; fix: did you mean policy? rename polcy to policy"]


def test_a_misspelt_required_key_is_one_problem_with_did_you_mean_not_also_is_required() -> None:
    common = seeds_pd()
    common["decode"][0]["mem_fraction_statc"] = common["decode"][0].pop("mem_fraction_static")
    assert problems(common) == [
        "decode[0].mem_fraction_statc (host gpu1): unknown key 'mem_fraction_statc'; fix: did you mean "
        "mem_fraction_static? rename mem_fraction_statc to mem_fraction_static"]


@pytest.mark.parametrize(("value", "written", "fix"), [
    ("/etc/dsv4deploy/api_key", "the text '/etc/dsv4deploy/api_key'", "write api_key: {file: /etc/dsv4deploy/api_key}"),
    ([{"file": "/k"}], "a list of 1", "write api_key: {file: /etc/dsv4deploy/api_key} (a file only"),
])
def test_a_mapping_written_as_something_else_says_what_was_written_and_names_no_class(value, written, fix) -> None:
    [problem] = problems(changed(api_key=value))
    assert problem.startswith(f"api_key: is {written}, not a mapping; fix: {fix}")
    assert "ApiKeyRef" not in problem and "instance of" not in problem


def test_two_combined_servers_are_told_that_combined_runs_one() -> None:
    [problem] = problems({**changed(topology="combined"), "combined": [seeds_pd()["combined"]] * 2})
    assert "combined: is a list of 2, not a mapping" in problem and "the combined topology runs one server" in problem
    assert "CombinedSpec" not in problem


def test_unknown_key_in_the_model() -> None:
    assert problems(changed(**{"model.weights": "/x"})) == [
        "model.weights: unknown key 'weights'; fix: remove it or check its spelling against the keys of model"]


@pytest.mark.parametrize(("role", "expected"), [
    ("decode", "decode: topology is 'pd' but no decode worker is defined; fix: define at least one decode worker"),
    ("prefill", "prefill: topology is 'pd' but no prefill worker is defined; fix: define at least one prefill worker"),
    ("router", "router: topology is 'pd' but no router is defined; fix: define router: {host, port}"),
])
def test_missing_role_for_pd(role: str, expected: str) -> None:
    assert problems(changed(**{role: _DELETE})) == [expected]


def test_missing_combined_server() -> None:
    assert problems(changed(topology="combined", combined=_DELETE)) == [
        "combined: topology is 'combined' but no combined server is defined; "
        "fix: define combined: {host, gpus, tp_size, port, mem_fraction_static}"]


def test_combined_ignores_pd_roles() -> None:
    spec = load_spec(changed(topology="combined", decode=_DELETE, router=_DELETE), HOSTS)
    assert [path for path, _ in spec.workers()] == ["combined"]


def test_host_not_in_the_inventory() -> None:
    assert problems(changed(**{"router.host": "gpu9"})) == [
        "router.host (host gpu9): host 'gpu9' is not in the inventory; "
        "fix: add gpu9 to the inventory or use one of: gpu1"]


def test_missing_required_field() -> None:
    assert problems(changed(**{"decode.0.port": _DELETE})) == [
        "decode[0].port (host gpu1): is required; fix: set decode[0].port"]


def test_unknown_topology() -> None:
    assert problems(changed(topology="mixed")) == [
        "topology: Input should be 'pd' or 'combined' (got 'mixed'); fix: set topology to pd or combined "
        "(exactly, lower case)"]


def test_topology_in_upper_case_names_the_valid_values() -> None:
    # topology=PD got only "correct topology".
    assert problems(changed(topology="PD")) == [
        "topology: Input should be 'pd' or 'combined' (got 'PD'); fix: set topology to pd or combined "
        "(lower case: pd)"]


def test_a_gpu_range_as_a_string_suggests_the_list_and_a_valid_extra_var() -> None:
    # gpus: "4-7" suggested -e '{"prefill[0].gpus": ...}', which Ansible cannot set.
    assert problems(changed(**{"decode.0.gpus": "4-7"})) == [
        "decode[0].gpus (host gpu1): Input should be a valid list (got the string '4-7'); fix: give "
        "decode[0].gpus as a list such as [4, 5, 6, 7] in the inventory, on the command line -e replaces the "
        "whole decode, as JSON: -e '{\"decode\": ...}' (key=value always gives a string)"]


def test_structured_value_given_as_a_string() -> None:
    # What `-e decode=[...]` gives: Ansible parses key=value into a string.
    assert problems(changed(decode="[]")) == [
        "decode: Input should be a valid list (got the string '[]'); fix: give decode as YAML in the inventory, "
        "or on the command line as JSON: -e '{\"decode\": ...}' (key=value always gives a string)"]


def test_rendered_flag_in_extra_args() -> None:
    assert problems(changed(**{"decode.0.extra_args": ["--tp", "8"]})) == [
        "decode[0].extra_args (host gpu1): '--tp' is rendered from the spec already (--tp-size); "
        "fix: remove it from extra_args and set the spec field instead"]


# A router on a host of its own reaches the workers' host (it listens on every address, with a key).
ROUTER_HOSTS = {"gpu1": {**HOSTS["gpu1"], "listen": "0.0.0.0"},
                "router1": {"gpu_count": 0, "ansible_host": "10.0.0.10"}}
KEY = {"api_key": {"file": "/etc/dsv4deploy/api_key"}}


def test_router_only_host_may_have_no_gpus() -> None:
    spec = load_spec(changed(**{"router.host": "router1"}, **KEY), ROUTER_HOSTS)
    assert spec.hosts["router1"].gpu_count == 0


def test_env_values_become_strings() -> None:
    spec = load_spec({**changed(**{"decode.0.env": {"A": 1, "B": True}}), "server_env": {"C": 96}}, HOSTS)
    assert spec.decode[0].env == {"A": "1", "B": "1"}
    assert spec.server_env == {"C": "96"}


def test_every_problem_is_reported_at_once() -> None:
    common = copy.deepcopy(seeds_pd())
    common["decode"][0]["gpus"] = [3, 4, 5, 6]
    common["decode"][0]["port"] = 30001
    assert [p.split(" ")[0] for p in problems(common)] == ["decode[0].gpus", "decode[0].port"]


RENDERED = "is rendered from the spec already"
RENDERED_FIX = "fix: remove it from extra_args and set the spec field instead"


@pytest.mark.parametrize(("args", "flag", "shown"), [
    (["--reasoning-parser", "deepseek-v3"], "--reasoning-parser", "--reasoning-parser"),
    (["--tool-call-parser=deepseekv3"], "--tool-call-parser", "--tool-call-parser"),
    (["--cuda-graph-max-bs-decode", "64"], "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-decode"),
    (["--disable-prefill-cuda-graph"], "--disable-prefill-cuda-graph", "--disable-prefill-cuda-graph"),
    (["--disable-decode"], "--disable-decode", "--disable-decode-cuda-graph"),  # an argparse abbreviation
])
def test_rendered_parser_and_cuda_graph_flags_in_extra_args(args: list[str], flag: str, shown: str) -> None:
    assert problems(changed(**{"decode.0.extra_args": args})) == [
        f"decode[0].extra_args (host gpu1): '{flag}' {RENDERED} ({shown}); {RENDERED_FIX}"]


@pytest.mark.parametrize("flag", [
    "--policy", "--retry-max-retries", "--disable-retries", "--cb-failure-threshold", "--cb-timeout-duration-secs",
    "--disable-circuit-breaker", "--health-check-endpoint", "--health-check-interval-secs",
    "--health-failure-threshold", "--health-check-timeout-secs", "--worker-startup-timeout-secs",
    "--worker-startup-check-interval", "--prometheus-port", "--prometheus-host", "--prefill-policy",
])
def test_rendered_router_flags_in_extra_args(flag: str) -> None:
    assert problems(changed(**{"router.extra_args": [f"{flag}=1"]})) == [
        f"router.extra_args (host gpu1): '{flag}' {RENDERED} ({flag}); {RENDERED_FIX}"]


def test_other_router_and_server_flags_pass() -> None:
    common = changed(**{"router.extra_args": ["--cb-success-threshold", "2", "--log-level", "debug"],
                        "decode.0.extra_args": ["--disable-cuda-graph-padding", "--enable-metrics"]})
    assert load_spec(common, HOSTS).router.extra_args[0] == "--cb-success-threshold"


@pytest.mark.parametrize(("arg", "flag", "replacement"), [
    ("--cuda-graph-max-bs", "--cuda-graph-max-bs",
     "cuda_graph.max_bs (rendered as --cuda-graph-max-bs-decode or --cuda-graph-max-bs-prefill)"),
    ("--cuda-graph-max-bs=64", "--cuda-graph-max-bs",
     "cuda_graph.max_bs (rendered as --cuda-graph-max-bs-decode or --cuda-graph-max-bs-prefill)"),
    ("--disable-cuda-graph", "--disable-cuda-graph",
     "cuda_graph.enabled: false (rendered as --disable-decode-cuda-graph and/or --disable-prefill-cuda-graph)"),
    ("--cuda-graph-bs", "--cuda-graph-bs", "--cuda-graph-bs-decode or --cuda-graph-bs-prefill"),
])
@pytest.mark.parametrize("version", ["0.5.18", "0.5.23"])
def test_flags_the_version_removed_are_refused_with_the_replacement(version: str, arg: str, flag: str,
                                                                    replacement: str) -> None:
    hosts = {"gpu1": {**HOSTS["gpu1"], "sglang_version": version}}
    assert problems(changed(**{"prefill.0.extra_args": [arg]}), hosts) == [
        f"prefill[0].extra_args (host gpu1): sglang {version} has removed or deprecated '{flag}'; "
        f"fix: remove it and use {replacement}"]


def test_old_cuda_graph_flags_on_0_5_12_are_rendered_ones_not_removed() -> None:
    hosts = {"gpu1": {**HOSTS["gpu1"], "sglang_version": "0.5.12"}}
    assert problems(changed(**{"prefill.0.extra_args": ["--cuda-graph-max-bs", "8"]}), hosts) == [
        f"prefill[0].extra_args (host gpu1): '--cuda-graph-max-bs' {RENDERED} (--cuda-graph-max-bs); {RENDERED_FIX}"]
    assert load_spec(changed(**{"prefill.0.extra_args": ["--cuda-graph-bs", "1", "2"]}), hosts)


ENV_FIX = "fix: use letters, digits and underscores only, not starting with a digit"


def test_env_names_that_are_not_shell_variables_are_refused() -> None:
    common = {**changed(**{"decode.0.env": {"1ST": "x", "OK_1": "y"}, "router.env": {"RUST LOG": "info"}}),
              "server_env": {"A-B": "1"}}
    assert problems(common) == [
        f"server_env: 'A-B' is not a valid environment variable name; {ENV_FIX}",
        f"decode[0].env (host gpu1): '1ST' is not a valid environment variable name; {ENV_FIX}",
        f"router.env (host gpu1): 'RUST LOG' is not a valid environment variable name; {ENV_FIX}"]


def test_the_routers_default_prometheus_port_is_claimed() -> None:
    assert problems(changed(**{"decode.0.port": 29000})) == [
        "router.prometheus_port (host gpu1): port 29000 is also used by decode[0].port; "
        "fix: set router.prometheus_port to a free port (unset, sglang-router serves metrics on 29000)"]


def test_an_explicit_prometheus_port_is_claimed_and_frees_the_default() -> None:
    assert load_spec(changed(**{"decode.0.port": 29000, "router.prometheus_port": 29100}), HOSTS)
    assert problems(changed(**{"router.prometheus_port": 30000})) == [
        "router.prometheus_port (host gpu1): port 30000 is also used by router.port; "
        "fix: give every listener on a host its own port"]


def test_prometheus_port_only_counts_where_the_router_runs() -> None:
    assert load_spec(changed(**{"decode.0.port": 29000, "router.host": "router1"}, **KEY), ROUTER_HOSTS)
    assert load_spec(changed(topology="combined", **{"combined.port": 29000}), HOSTS)


def test_router_implementation_is_a_choice_with_its_own_launcher() -> None:
    launchers = {"sglang-router": ["/venv/bin/python", "-m", "sglang_router.launch_router"],
                 "smg": ["/smg-venv/bin/python", "-m", "smg.launch_router"]}
    assert load_spec(changed(router_launcher=launchers), HOSTS).router_command() == launchers["sglang-router"]
    smg = load_spec(changed(router_launcher=launchers, router_implementation="smg"), HOSTS)
    assert smg.router_command() == launchers["smg"]
    assert load_spec(changed(router_implementation="smg"), HOSTS).router_command() == [
        "python3", "-m", "smg.launch_router"]
    assert problems(changed(router_implementation="nginx"))[0].startswith("router_implementation: Input should be")


def test_router_launcher_mapping_is_checked() -> None:
    assert problems(changed(router_launcher={"smgg": ["smg"], "smg": []})) == [
        "router_launcher.smgg: unknown router implementation 'smgg'; fix: use the keys sglang-router and smg",
        "router_launcher.smg: is an empty command; fix: give the router's argv"]


def test_smg_refuses_mini_lb_in_extra_args() -> None:
    common = changed(**{"router.extra_args": ["--mini-lb"]})
    assert load_spec(common, HOSTS).router.extra_args == ["--mini-lb"]  # sglang-router has it
    assert problems({**common, "router_implementation": "smg"}) == [
        "router.extra_args (host gpu1): smg 1.13.0 has no '--mini-lb'; "
        "fix: remove it (or set router_implementation to a router that has it)"]


@pytest.mark.parametrize(("flag", "replacement"), [
    ("--nsa-prefill-backend", "--dsa-prefill-backend"),
    ("--disable-piecewise-cuda-graph", "--cuda-graph-backend-prefill disabled"),
    ("--enable-dp-attention", "--attn-dp-size N"),
])
def test_flags_0523_removed_or_deprecated_are_refused(flag: str, replacement: str) -> None:
    assert problems(changed(**{"decode.0.extra_args": [flag]})) == [
        f"decode[0].extra_args (host gpu1): sglang 0.5.23 has removed or deprecated '{flag}'; "
        f"fix: remove it and use {replacement}"]


# -- what a first day on one's own hosts runs into (issue: paths, ports, router policies) -----------

@pytest.mark.parametrize("path", ["models/DeepSeek-V4-Flash", "~/models/DeepSeek-V4-Flash"])
def test_a_model_path_that_is_not_absolute_is_refused(path):
    assert problems(changed(**{"model.path": path})) == [
        f"model.path: {path!r} is not an absolute path; fix: give the absolute path of the downloaded checkpoint "
        "on the hosts (the folder holding config.json), e.g. /models/DeepSeek-V4-Flash; ~ is not expanded"]


def test_a_relative_chat_template_file_is_refused_but_a_builtin_name_is_not():
    assert problems(changed(chat_template="templates/dsv4.jinja"))[0].startswith(
        "chat_template: 'templates/dsv4.jinja' is not an absolute path")
    load_spec(changed(chat_template="chatml"), HOSTS)


def test_a_port_below_1024_is_refused_since_the_units_have_no_capability_to_bind_it():
    assert problems(changed(**{"router.port": 80})) == [
        "router.port (host gpu1): port 80 is below 1024: binding it needs CAP_NET_BIND_SERVICE, which the "
        "services do not have; fix: use a port of 1024 or above (put a reverse proxy in front for 80 or 443)"]


def test_a_router_policy_the_router_does_not_know_is_refused_with_did_you_mean():
    assert problems(changed(**{"router.policy": "rr"})) == [
        "router.policy (host gpu1): sglang-router 0.3.2 has no policy 'rr'; fix: did you mean round_robin? use one "
        "of random, round_robin, cache_aware, power_of_two, manual"]
    load_spec(changed(**{"router.prefill_policy": "bucket", "router.policy": "cache_aware"}), HOSTS)
    smg = {**changed(**{"router.policy": "least_load"}), "router_implementation": "smg"}
    load_spec(smg, HOSTS)
