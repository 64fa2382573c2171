"""The host's own parsers over the rendered command lines, as preflight runs them: here with a Python that has
sglang-router but no sglang (this venv, like the embedded host), so the router line meets its real parser
and the server lines fall back to dsv4deploy's tables (the real sglang:
tests/contract/test_host_parser_with_real_sglang.py)."""

from __future__ import annotations

import sys

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import host_parser
from dsv4deploy.plan import host_parsers, make_plan
from dsv4deploy.plan.services import build_services
from tests.golden.fixture_specs import pd_spec


def checks(**changes) -> list[dict]:
    spec = pd_spec(server_launcher=[sys.executable, "-m", "sglang.launch_server"],
                   router_launcher=[sys.executable, "-m", "sglang_router.launch_router"], **changes)
    return make_plan(spec, ["gpu1"])["hosts"]["gpu1"]["parsers"]


def test_the_plan_hands_each_python_m_launcher_to_its_parser():
    found = {c["service"]: (c["kind"], c["python"], c["argv"][:2]) for c in checks()}
    model = ["--model-path", "/models/DeepSeek-V4-Flash-NVFP4"]
    assert found["sglang-dsv4-decode"] == ("server", sys.executable, model)
    assert found["sglang-dsv4-router"][0] == "sglang-router"
    assert host_parsers.parser_kind(["/opt/bin/serve.sh"]) is None  # a wrapper: no parser we can load


def test_a_known_release_without_sglang_on_the_host_keeps_the_tables_and_the_router_line_parses():
    found = host_parser.check_lines("gpu1", "", checks())
    assert found["problems"] == []
    assert len(found["notes"]) == 2 and all("dsv4deploy's tables are the rule" in n for n in found["notes"])
    assert sorted(n.split(": not resolved: no sglang on the host (")[0] for n in found["notes"]) == [
        "host gpu1, sglang-dsv4-decode", "host gpu1, sglang-dsv4-prefill"], found
    assert found["parser_seconds"] > 0 and found["resolved"] == {}


def test_each_server_line_asks_for_resolution_with_its_switches_and_gpus():
    lines = {c["service"]: c for c in checks(server_env={"SGLANG_DSV4_FP4_EXPERTS": "0", "HF_TOKEN": "x"})}
    assert lines["sglang-dsv4-decode"]["resolve"] is True and lines["sglang-dsv4-router"]["resolve"] is False
    env = lines["sglang-dsv4-decode"]["resolve_env"]
    assert env["SGLANG_DSV4_FP4_EXPERTS"] == "0" and env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert "HF_TOKEN" not in env and all(k.startswith("SGLANG_") for k in set(env) - {"CUDA_VISIBLE_DEVICES"})


# A stand-in for an sglang release on the host (its parser's entry point, and its resolution or none), so the
# module's handling of each answer shows without the real wheels (those: tests/contract).
FAKE_SERVER_ARGS = """
import os
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path")
        parser.add_argument("--kv-cache-dtype", default="auto")
"""
FAKE_RESOLUTION = """
class _Args:
    def __init__(self, ns):
        self.kv_cache_dtype = ns.kv_cache_dtype
        self.mem_fraction_static = float(os.environ.get("SGLANG_FAKE_FRACTION", "0.9"))
    def resolve_once(self):
        assert self.kv_cache_dtype in ("auto", "fp8_e4m3"), f"{self.kv_cache_dtype} is not supported for X"
        os.environ["SGLANG_SET_BY_A_HOOK"] = "1"
def prepare_server_args(argv):
    import argparse
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert "SGLANG_SET_BY_A_HOOK" not in os.environ, "a hook's switch leaked into the next line"
    return _Args(parser.parse_args(argv))
"""


def _fake_sglang(tmp_path, resolution: bool) -> dict[str, str]:
    package = tmp_path / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.5.23"\n')
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS + (FAKE_RESOLUTION if resolution else ""))
    return {"PYTHONPATH": str(tmp_path)}


def _server_line(env: dict[str, str], *extra: str, **more) -> dict:
    return {"service": "sglang-dsv4", "kind": "server", "python": sys.executable, "env": env, "resolve": True,
            "argv": ["--model-path", "/m", *extra], "expected_version": "0.5.23", "table_version": "0.5.23", **more}


def test_resolution_quotes_sglangs_refusal_and_hands_back_the_resolved_figures(tmp_path):
    env = _fake_sglang(tmp_path, resolution=True)
    lines = [_server_line(env, resolve_env={"SGLANG_FAKE_FRACTION": "0.88"}),
             {**_server_line(env, "--kv-cache-dtype", "nvfp4"), "service": "bad"}]
    found = host_parser.check_lines("gpu1", "", lines)
    assert found["resolved"] == {"sglang-dsv4": {"kv_cache_dtype": "auto", "mem_fraction_static": 0.88}}
    (problem,) = found["problems"]
    assert problem.startswith("host gpu1, bad: sglang 0.5.23 refuses the server line at start-up")
    assert "AssertionError: nvfp4 is not supported for X; fix: " in problem


def test_an_sglang_without_the_resolution_entry_point_is_parsed_only_and_says_so(tmp_path):
    found = host_parser.check_lines("gpu1", "", [_server_line(_fake_sglang(tmp_path, resolution=False))])
    assert found["problems"] == [] and found["resolved"] == {}
    (note,) = found["notes"]
    assert note.startswith("host gpu1, sglang-dsv4: not resolved: this sglang has no prepare_server_args")


def test_a_patch_release_only_the_nearest_table_describes_needs_the_hosts_parser():
    lines = [c for c in checks() if c["kind"] == "server"]
    for line in lines:
        line["expected_version"] = "0.5.24"
    problems = host_parser.check_lines("gpu1", "", lines)["problems"]
    assert len(problems) == 2
    assert problems[0].startswith("host gpu1, sglang-dsv4-decode: sglang 0.5.24 has no flag table of its own (the "
                                  "flags of 0.5.23 were rendered) and")
    assert "fix: set sglang_version to 0.5.23 if that is what is installed" in problems[0]


@pytest.mark.parametrize(("extra", "said"), [
    ("--policy-typo", "unrecognized arguments: --policy-typo"),
    ("--log-lev", "--log-lev is not a flag of this parser (abbreviated or unknown)"),
])
def test_the_routers_own_parser_refuses_a_flag_naming_it(extra, said):
    [router] = [c for c in checks() if c["kind"] == "sglang-router"]
    router["argv"] += [extra, "info"] if extra == "--log-lev" else [extra]
    [problem] = host_parser.check_lines("gpu1", "", [router])["problems"]
    assert problem.startswith("host gpu1, sglang-dsv4-router: sglang-router 0.3.2's own parser refuses the command "
                              "line: ") and said in problem


def test_a_python_that_cannot_run_is_no_parser():
    [line] = [c for c in checks() if c["service"] == "sglang-dsv4-decode"]
    found = host_parser.check_lines("gpu1", "", [{**line, "python": "/nonexistent/python"}])
    assert found["problems"] == [] and "could not run" in found["notes"][0]


def test_the_plan_says_which_hosts_sglang_resolves_their_lines_and_where_there_is_none():
    asked = pd_spec(server_launcher=["/opt/venv/bin/python", "-m", "sglang.launch_server"])
    (line,) = host_parsers.resolution_lines(asked, build_services(asked))
    assert line.startswith("gpu1: sglang-dsv4-prefill, sglang-dsv4-decode resolved by /opt/venv/bin/python's sglang")
    simulated = pd_spec(server_launcher=["/usr/bin/python3", "-m", "dsv4deploy.sim.server"])
    (line,) = host_parsers.resolution_lines(simulated, build_services(simulated))
    assert line.startswith("gpu1: sglang-dsv4-prefill, sglang-dsv4-decode not resolved: no sglang on the host to ask")
