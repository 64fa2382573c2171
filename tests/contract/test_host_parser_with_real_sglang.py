"""Preflight's parser check against the real sglang 0.5.23 (the contract venv's Python stands for the host's):
the rendered lines pass; an unknown or deprecated flag in extra_args, or another sglang than the inventory's,
fails naming host, service, flag and fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import host_parser
from dsv4deploy.plan import make_plan
from tests.golden.fixture_specs import pd_spec

ROOT = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("DSV4_CONTRACT_PYTHON", str(ROOT / ".contract-venv" / "bin" / "python"))

pytestmark = pytest.mark.skipif(not Path(PYTHON).exists(),
                                reason=f"contract environment missing ({PYTHON}): `./scripts/setup.sh contract`")


def lines(version: str = "0.5.23", extra: list[str] | None = None) -> list[dict]:
    spec = pd_spec(server_launcher=[PYTHON, "-m", "sglang.launch_server"],
                   router_launcher=[PYTHON, "-m", "sglang_router.launch_router"])
    checks = make_plan(spec, ["gpu1"])["hosts"]["gpu1"]["parsers"]
    for check in checks:
        if check["kind"] == "server":
            check["expected_version"] = version
            # The parser alone (this venv cannot resolve: no transformers, no model folder; the resolution's
            # own tests: test_resolution_with_real_sglang.py).
            check["resolve"] = False
        if check["service"] == "sglang-dsv4-decode":  # as extra_args would add it (validation aside)
            check["argv"] += extra or []
    return checks


def test_every_rendered_line_passes_the_real_parsers_in_one_child():
    found = host_parser.check_lines("gpu1", "", lines())
    assert found == {**found, "problems": [], "notes": []}
    print(f"parser_seconds {found['parser_seconds']}")  # the stated cost: one sglang import per Python


def test_an_unknown_and_a_deprecated_flag_and_another_version_are_each_named():
    problems = host_parser.check_lines("gpu1", "", lines("0.5.18", ["--enable-turbo-mode"]))["problems"]
    assert any(p.startswith("host gpu1, sglang-dsv4-decode: sglang 0.5.23's own parser refuses the command line: ")
               and "--enable-turbo-mode" in p for p in problems), problems
    assert any("has sglang 0.5.23, the inventory says sglang_version 0.5.18; fix: set sglang_version: \"0.5.23\""
               in p for p in problems), problems
    deprecated = host_parser.check_lines("gpu1", "", lines(extra=["--enable-dp-attention"]))["problems"]
    assert any("--enable-dp-attention is deprecated" in p for p in deprecated), deprecated


def test_a_patch_release_passes_when_the_hosts_parser_accepts_the_nearest_tables_lines():
    found = host_parser.check_lines("gpu1", "", lines("0.5.23"))
    assert found["problems"] == []
