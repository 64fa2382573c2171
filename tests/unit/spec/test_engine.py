"""engine: the spec section, its errors, the release it makes (digest, record, serve scripts) and the change line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils.engines import change_line
from dsv4deploy.plan import host_parsers
from dsv4deploy.plan.render import content_hash, render_release
from dsv4deploy.plan.services import build_services
from dsv4deploy.spec import load_spec
from tests.unit.spec.test_spec import HOSTS, problems, seeds_pd

ENGINE = {"sglang": "0.5.23", "wheelhouse": "/srv/wheels"}


def with_engine(engine: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {**seeds_pd(), "engine": {**ENGINE, **(engine or {})}, **more}


def test_without_engine_the_launcher_runs_as_written() -> None:
    spec = load_spec(seeds_pd(), HOSTS)
    assert spec.server_command("gpu1")[0] == "python3"
    assert "engine.json" not in render_release(spec, "gpu1")


def test_engine_interpreter_runs_every_server_and_the_router_it_installs() -> None:
    spec = load_spec(with_engine({"router": "0.3.2"}), HOSTS)
    venv = spec.engine_record("gpu1")["venv"]
    assert venv.startswith("/opt/dsv4deploy/engines/sglang-0.5.23-")
    for svc in build_services(spec):
        assert svc.argv[0] == f"{venv}/bin/python", svc.name
    record = json.loads(render_release(spec, "gpu1")["engine.json"])
    assert record == {"sglang": "0.5.23", "router": "0.3.2", "venv": venv, "python": f"{venv}/bin/python",
                      "requirements": ["sglang==0.5.23", "sglang-router==0.3.2"], "base_python": None}
    # Preflight's parsers ask the engine's sglang, so the version checked is the version run.
    assert {c["python"] for c in host_parsers.host_checks(spec, build_services(spec))} == {f"{venv}/bin/python"}


def test_router_runs_as_written_when_the_engine_does_not_install_it() -> None:
    spec = load_spec(with_engine(), HOSTS)
    router = next(s for s in build_services(spec) if s.role == "router")
    assert router.argv[0] == "python3"
    assert json.loads(render_release(spec, "gpu1")["engine.json"])["requirements"] == ["sglang==0.5.23"]


def test_a_changed_engine_is_a_new_release_and_the_same_engine_the_same() -> None:
    def digest(engine: dict[str, Any], version: str = "0.5.23") -> str:
        hosts = {"gpu1": {**HOSTS["gpu1"], "sglang_version": version}}
        return content_hash(render_release(load_spec(with_engine(engine), hosts), "gpu1"))
    same = digest({})
    assert digest({}) == same
    assert digest({"sglang": "0.5.23.post1"}, "0.5.23.post1") != same
    assert digest({"base_python": "/opt/base/bin/python"}) != same
    assert digest({"packages": ["sglang[srt]==0.5.23"]}) != same


def test_the_venv_is_per_version_and_per_host_install_root() -> None:
    hosts = {"gpu1": {**HOSTS["gpu1"], "install_root": "/srv/dsv4"}}
    spec = load_spec(with_engine(), hosts)
    assert spec.engine_record("gpu1")["python"].startswith("/srv/dsv4/engines/sglang-0.5.23-")


@pytest.mark.parametrize(("engine", "expected"), [
    ({"wheelhouse": None}, "engine: Value error, give index (a package index URL) or wheelhouse"),
    ({"sglang": "latest"}, "engine.sglang: Value error, 'latest' is not a version"),
    ({"wheelhouse": "wheels"}, "engine.wheelhouse: Value error, 'wheels' is not an absolute path on the hosts"),
    ({"index": "pypi.example"}, "engine.index: Value error, 'pypi.example' is not an http(s) or file URL"),
    ({"packages": ["sglang==="]}, "engine.packages: Value error, 'sglang===' is not a pip requirement"),
    ({"color": "red"}, "engine.color: unknown key 'color'; fix: remove it"),
])
def test_bad_engine_is_refused_naming_the_field(engine: dict[str, Any], expected: str) -> None:
    found = problems(with_engine(engine))
    assert any(p.startswith(expected) for p in found), found


def test_engine_version_must_be_the_version_the_flags_are_rendered_for() -> None:
    found = problems(with_engine({"sglang": "0.5.23.post1"}))
    assert found == ["sglang_version (host gpu1): is 0.5.23, but engine.sglang installs 0.5.23.post1: the flags "
                     "would be rendered for another version than the one that runs; fix: set sglang_version: "
                     "'0.5.23.post1' (or the engine's version to '0.5.23')"]


def test_a_launcher_the_engine_cannot_run_is_refused() -> None:
    found = problems(with_engine(server_launcher=["/usr/local/bin/sglang-serve"]))
    assert "server_launcher: /usr/local/bin/sglang-serve is not `PYTHON -m MODULE`" in found[0]
    assert "unset engine" in found[0]


def test_change_line() -> None:
    old = {"sglang": "0.5.23", "venv": "/r/engines/sglang-0.5.23-aaaa"}
    new = {"sglang": "0.5.23.post1", "venv": "/r/engines/sglang-0.5.23.post1-bbbb"}
    assert change_line(old, new) == "engine 0.5.23 -> 0.5.23.post1"
    assert change_line(old, dict(old)) is None
    assert change_line(None, new) == "engine host-provided -> 0.5.23.post1"
    assert change_line(old, None) == "engine 0.5.23 -> host-provided"
    assert change_line(None, None) is None
    moved = {"sglang": "0.5.23", "venv": "/r/engines/sglang-0.5.23-cccc"}
    assert change_line(old, moved) == ("engine 0.5.23 -> 0.5.23 (same version, another venv: "
                                               "/r/engines/sglang-0.5.23-cccc)")
