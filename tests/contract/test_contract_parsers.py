"""Every rendered command line parses with the real parser of the release it is rendered for.

Five real parsers: sglang 0.5.12, 0.5.18 and 0.5.23 (servers), sglang-router 0.3.2 and smg 1.13.0
(routers). The harness also refuses what they would refuse, so these tests can fail; a flag table
that renders a removed flag for 0.5.23 is caught; the simulator's flag tables are checked against
the same parsers.

Environments (built once per machine by scripts/setup.sh, see ../shared/contract-env/README.md):
`.contract-venv` (CPU torch, sglang 0.5.23, sglang-router 0.3.2), `.contract-sglang-0.5.12` and
`.contract-sglang-0.5.18` (older sglang folders put first on that venv's PYTHONPATH, with a torchvision
import stub), `.smg-venv` (smg, never beside sglang-router: both install an `smg` command). Each
environment's harness runs once per test session (importing sglang takes seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from dsv4deploy.inventory import spec_from_inventory
from dsv4deploy.inventory.starter import RECIPE_EXAMPLES, examples_dir
from dsv4deploy.plan.services import build_services
from dsv4deploy.sglang import flags
from dsv4deploy.sim import _flag_tables
from dsv4deploy.sim.gen_flag_tables import rows_of
from dsv4deploy.spec import SpecError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from fixture_specs import combined_spec, multi_node_pd_spec, pd_spec, xpyd_spec

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
HARNESS = HERE / "parse_argv.py"
VENV_PYTHON = os.environ.get("DSV4_CONTRACT_PYTHON", str(ROOT / ".contract-venv" / "bin" / "python"))
SGLANG_VERSIONS = ("0.5.12", "0.5.18", "0.5.23")
# environment -> (python, PYTHONPATH entries)
ENVS: dict[str, tuple[str, list[str]]] = {
    "0.5.23": (VENV_PYTHON, []),
    "0.5.12": (VENV_PYTHON, [str(ROOT / ".contract-sglang-0.5.12"), str(HERE / "stubs")]),
    "0.5.18": (VENV_PYTHON, [str(ROOT / ".contract-sglang-0.5.18"), str(HERE / "stubs")]),
    "smg": (str(ROOT / ".smg-venv" / "bin" / "python"), []),
}
EXPECTED_VERSIONS = {"0.5.12": {"server": "0.5.12"}, "0.5.18": {"server": "0.5.18"},
                     "0.5.23": {"server": "0.5.23", "sglang-router": "0.3.2"}, "smg": {"smg": "1.13.0"}}
LAUNCHERS = {"server": ["python3", "-m", "sglang.launch_server"],
             "sglang-router": ["python3", "-m", "sglang_router.launch_router"],
             "smg": ["python3", "-m", "smg.launch_router"]}


def _strip(argv: list[str], launcher: list[str]) -> list[str]:
    assert argv[: len(launcher)] == launcher, argv
    return argv[len(launcher):]


# The recipes' settings: the H200 balanced cell (attention DP, deepep, MTP 1-1-2, its
# running-request limit) and the low-latency cell (MTP 3-1-4, FP4 MoE runner), EP.
BALANCED = {"attn_dp_size": 4, "moe": {"a2a_backend": "deepep", "deepep_max_dispatch_tokens_per_rank": 256},
            "speculative": {"num_steps": 1, "num_draft_tokens": 2}, "max_running_requests": 128}
LOW_LATENCY = {"moe": {"runner_backend": "marlin", "ep_size": 4},
               "speculative": {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}}


def _recipe_specs(version: str, router: str) -> list:
    pd = pd_spec(version=version, router_implementation=router)
    transport = {"transport": "tcp"} if "tcp" in flags.table(version).mooncake_transports else {"transport": "rdma"}
    combined = combined_spec(version=version)
    assert combined.combined is not None
    return [
        combined_spec(version=version, combined={**combined.combined.model_dump(), **BALANCED}),
        pd_spec(version=version, router_implementation=router,
                prefill={**pd.prefill[0].model_dump(), **LOW_LATENCY, **transport},
                decode={**pd.decode[0].model_dump(), **LOW_LATENCY, **transport}),
        multi_node_pd_spec(version=version).model_copy(update={"router_implementation": router}),
    ]


def starter_specs(version: str) -> list:
    """The recipe starter inventories (`dsv4deploy init --example ...`) on sglang `version`, where it can run
    them: a starter the version's validation refuses (a setting it lacks) is left out for that version."""
    out = []
    for example in RECIPE_EXAMPLES:
        try:
            extra = {"sglang_version": version, "server_launcher": LAUNCHERS["server"],
                     "router_launcher": LAUNCHERS["sglang-router"]}
            out.append(spec_from_inventory([str(examples_dir() / example)], [json.dumps(extra)]))
        except SpecError:
            continue
    return out


def _specs(version: str, router: str) -> list:
    pd = pd_spec(version=version, router_implementation=router)
    starters = starter_specs(version) if router == "sglang-router" else []
    return [*_recipe_specs(version, router), *starters, pd, combined_spec(version=version),
            xpyd_spec(version=version).model_copy(
                update={"router_implementation": router}),
            combined_spec(version=version, index_topk=None),
            pd_spec(version=version, router_implementation=router,
                    decode={**pd.decode[0].model_dump(), "cuda_graph": {"enabled": False}},
                    prefill={**pd.prefill[0].model_dump(), "cuda_graph": {"max_bs": 256},
                             "page_size": 64, "kv_cache_dtype": "fp8_e4m3", "context_length": 524288,
                             "transfer_backend": "nixl", "ib_device": "mlx5_0,mlx5_1"},
                    page_size=64, kv_cache_dtype="fp8_e4m3", context_length=524288,
                    router={"host": "gpu1", "port": 8000, "policy": "cache_aware",
                            "retry": {"enabled": False}, "circuit_breaker": {"enabled": False}})]


def rendered_items() -> dict[str, list[dict]]:
    """Every rendered server and router argv, grouped by the environment whose parser must accept it."""
    by_env: dict[str, list[dict]] = {env: [] for env in ENVS}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for version in SGLANG_VERSIONS:
        for router in ("sglang-router", "smg"):
            for spec in _specs(version, router):
                for svc in build_services(spec):
                    if svc.role == "router":
                        env, kind = ("smg", "smg") if router == "smg" else ("0.5.23", "sglang-router")
                    else:
                        assert svc.sglang_version == version
                        env, kind = version, "server"
                    argv = [*_strip(svc.argv, LAUNCHERS[kind]), "--api-key", "k"]
                    if (env, tuple(argv)) not in seen:
                        seen.add((env, tuple(argv)))
                        by_env[env].append({"name": f"{svc.name} ({kind} for {version})", "kind": kind, "argv": argv})
    return by_env


@contextlib.contextmanager
def _table(version: str, table: flags.FlagTable) -> Iterator[None]:
    saved = flags.TABLES[version]
    flags.TABLES[version] = table  # type: ignore[index]
    try:
        yield
    finally:
        flags.TABLES[version] = saved  # type: ignore[index]


def broken_0523_items() -> list[dict]:
    """What a 0.5.23 table that still spelled the CUDA-graph flags the 0.5.12 way would render."""
    with _table("0.5.23", replace(flags.table("0.5.23"), cuda_graph=flags.table("0.5.12").cuda_graph)):
        servers = [s for s in build_services(pd_spec()) if s.role != "router"]
    return [{"name": s.name, "kind": "server", "argv": _strip(s.argv, LAUNCHERS["server"])} for s in servers]


def refused_items() -> dict[str, list[dict]]:
    """Command lines each real parser (or the harness's own checks) must refuse."""
    (svc,) = build_services(combined_spec())
    base = _strip(svc.argv, LAUNCHERS["server"])
    router = _strip(build_services(pd_spec())[-1].argv, LAUNCHERS["sglang-router"])
    smg = _strip(build_services(pd_spec(router_implementation="smg"))[-1].argv, LAUNCHERS["smg"])
    return {
        "0.5.23": [
            {"kind": "server", "argv": [*base, "--cuda-graph-max-bs", "64"]},  # gone in 0.5.23: ambiguous
            {"kind": "server", "argv": [*base, "--disable-cuda-graph"]},  # deprecated in 0.5.23
            {"kind": "server", "argv": [*base, "--nsa-prefill-backend", "flashmla_sparse"]},  # removed
            {"kind": "server", "argv": [*base, "--no-such-flag"]},
            {"kind": "server", "argv": [*base, "--mem-frac", "0.5"]},  # abbreviation: accepted by sglang, not by us
            {"kind": "server", "argv": [*base, "--disaggregation-mode", "both"]},
            # The recipe's own spelling of attention DP is deprecated in 0.5.23 (the trap attn_dp_size avoids).
            {"kind": "server", "argv": [*base, "--dp-size", "4", "--enable-dp-attention"]},
            {"kind": "server", "argv": [*base, "--fp4-kv-cache-recipe", "nvfp4"]},  # not in this release
            {"kind": "server", "argv": [*base, "--kv-cache-dtype", "fp4_e2m1"]},  # 0.5.18's choice, gone
            {"kind": "sglang-router", "argv": [*router, "--cb-failure-thresh", "3"]},
            {"kind": "sglang-router", "argv": [*router, "--policy", "fastest"]},
        ],
        "0.5.18": [
            {"kind": "server", "argv": [*base, "--nsa-prefill-backend", "flashmla_sparse"]},  # deprecated
            {"kind": "server", "argv": [*base, "--attn-dp-size", "4"]},  # only from 0.5.23
            {"kind": "server", "argv": [*base, "--disaggregation-transport", "rdma"]},  # not in this release
            {"kind": "server", "argv": [*base, "--dsv4-attn-backend", "auto"]},  # only from 0.5.23
        ],
        "0.5.12": [
            {"kind": "server", "argv": [*base, "--cuda-graph-max-bs-decode", "64"]},  # only from 0.5.18
            {"kind": "server", "argv": [*base, "--disaggregation-transfer-backend", "mooncake_tcp"]},  # from 0.5.18
        ],
        "smg": [
            {"kind": "smg", "argv": [*smg, "--mini-lb"]},  # sglang-router only
            {"kind": "smg", "argv": [*smg, "--policy", "fastest"]},
        ],
    }


def _run(env: str, items: list[dict]) -> dict:
    python, path = ENVS[env]
    missing = [p for p in [python, *path] if not Path(p).exists()]
    if missing:
        pytest.skip(f"contract environment {env} missing ({', '.join(missing)}): `./scripts/setup.sh` builds it "
                    "(see ../shared/contract-env/README.md)")
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)} if path else dict(os.environ)
    out = subprocess.run([python, "-W", "ignore", str(HARNESS), "--dump" if env in SGLANG_VERSIONS else "--"],
                         input=json.dumps(items), capture_output=True, text=True, timeout=600, env=child_env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="session")
def contract() -> dict[str, dict]:
    """Per environment: the parsed items (rendered, refused, broken table) and the parser dump."""
    rendered, refused, broken = rendered_items(), refused_items(), broken_0523_items()
    parsed = {}
    for env in ENVS:
        items = [*rendered[env], *refused.get(env, []), *(broken if env == "0.5.23" else [])]
        answer = _run(env, items)
        results = iter(answer["results"])
        parsed[env] = {
            "versions": answer["versions"],
            "actions": answer.get("actions"),
            "rendered": [(i, next(results)) for i in rendered[env]],
            "refused": [(i, next(results)) for i in refused.get(env, [])],
            "broken": [(i, next(results)) for i in (broken if env == "0.5.23" else [])],
        }
    return parsed


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_every_starter_runs_on_every_supported_version(version: str) -> None:
    # Each recipe starter validates on 0.5.12, 0.5.18 and 0.5.23 (its argv then goes through that parser above).
    assert len(starter_specs(version)) == len(RECIPE_EXAMPLES)


@pytest.mark.parametrize("env", list(ENVS))
def test_the_parser_is_the_release_it_stands_for(contract: dict, env: str) -> None:
    assert contract[env]["versions"] == EXPECTED_VERSIONS[env]


@pytest.mark.parametrize("env", list(ENVS))
def test_rendered_argv_accepted_by_real_parser(contract: dict, env: str) -> None:
    rendered = contract[env]["rendered"]
    assert rendered, f"nothing rendered for {env}"
    failures = [(i["name"], r["error"]) for i, r in rendered if not r["ok"]]
    assert not failures, failures


@pytest.mark.parametrize("env", list(ENVS))
def test_harness_refuses_what_the_release_refuses(contract: dict, env: str) -> None:
    results = [r for _, r in contract[env]["refused"]]
    assert [r["ok"] for r in results] == [False] * len(results), results
    if env == "0.5.23":
        assert "ambiguous" in results[0]["error"] and "--cuda-graph-max-bs" in results[0]["error"]
        assert "deprecated" in results[1]["error"]


def test_a_removed_flag_rendered_for_0523_fails(contract: dict) -> None:
    broken = contract["0.5.23"]["broken"]
    decode = [(i, r) for i, r in broken if "--cuda-graph-max-bs" in i["argv"]]
    assert decode, "the broken table should have rendered --cuda-graph-max-bs for decode"
    assert all(not r["ok"] and "--cuda-graph-max-bs" in r["error"] for _, r in decode), decode


def _flags_of(actions: list[dict]) -> dict[str, dict]:
    return {opt: a for a in actions for opt in a["opts"] if opt.startswith("--")}


def _deprecated(action: dict) -> bool:
    return action["action"].startswith("Deprecated")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_flag_table_matches_the_real_parser(contract: dict, version: str) -> None:
    """Every flag the renderer may write exists and is current; every flag it refuses really is gone or deprecated."""
    real = _flags_of(contract[version]["actions"])
    t = flags.table(version)
    disable = [f for fs in t.cuda_graph.disable.values() for f in fs]
    attn_dp = [t.attn_dp_flag] if t.attn_dp_flag else ["--dp-size", "--enable-dp-attention"]
    rendered = [*t.flags.values(), *t.cuda_graph.max_bs.values(), *disable, *attn_dp]
    bad = [f for f in rendered if f != "--api-key" and (f not in real or _deprecated(real[f]))]
    assert not bad, f"sglang {version} does not take (or deprecates) {bad}"
    untrue = [f for f in t.forbidden if f in real and not _deprecated(real[f])]
    assert not untrue, f"sglang {version} still takes {untrue}: do not refuse them"
    assert tuple(real["--kv-cache-dtype"]["choices"]) == t.kv_cache_dtypes
    backends = real["--disaggregation-transfer-backend"]["choices"]
    assert set(t.mooncake_transports.values()) <= set(backends), backends
    lacking = [flag for flag in t.missing.values() if flag in real]
    assert not lacking, f"sglang {version} has {lacking}: render them instead of refusing the setting"


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_simulator_tables_are_the_real_parsers(contract: dict, version: str) -> None:
    assert _flag_tables.TABLES[version] == rows_of(contract[version]["actions"]), (
        "dsv4deploy/sim/_flag_tables.py is stale: regenerate it (see dsv4deploy/sim/gen_flag_tables.py)")


def test_the_server_options_extra_args_are_checked_against_are_the_real_parsers(contract: dict[str, dict]) -> None:
    from dsv4deploy.sglang.server_options import OPTIONS

    for env in SGLANG_VERSIONS:
        real = {o for a in contract[env]["actions"] for o in a["opts"] if o.startswith("--")}
        assert set(OPTIONS[env]) == real, (env, sorted(real - OPTIONS[env]), sorted(OPTIONS[env] - real))
