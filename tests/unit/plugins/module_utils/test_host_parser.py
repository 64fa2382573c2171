"""The host's own parsers over the rendered command lines, as preflight runs them: here with a Python that has
sglang-router but no sglang (this venv, like the embedded host), so the router line meets its real parser
and the server lines fall back to dsv4deploy's tables (the real sglang:
tests/contract/test_host_parser_with_real_sglang.py)."""

from __future__ import annotations

import sys

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import host_parser
from dsv4deploy.plan import host_parsers, make_plan
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
    assert found["parser_seconds"] > 0


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
