"""dsv4deploy CLI: validate, plan, render against real inventories; bad input exits 2 without a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dsv4deploy import cli

REPO = Path(__file__).resolve().parents[2]
LOCAL = str(REPO / "inventory" / "local")
EXAMPLES = REPO / "inventory" / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def fake_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in dsv4deploy.render, so these tests check the CLI, not the templates."""
    module = types.ModuleType("dsv4deploy.render")

    class RenderError(ValueError):
        pass

    def render_all(spec):
        return {host: {"bin/serve-x.sh": f"#!/bin/sh\n# {spec.topology}\n", "spec.json": "{}\n"}
                for host in spec.hosts_in_use()}

    module.RenderError = RenderError
    module.render_all = render_all
    module.file_mode = lambda rel: 0o755 if rel.startswith("bin/") else 0o644
    monkeypatch.setitem(sys.modules, "dsv4deploy.render", module)


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", "-i", LOCAL)
    assert (code, err) == (0, "")
    assert out == "ok: topology pd, prefill[0] on local, decode[0] on local\n"


def test_validate_combined_from_extra_vars(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "-i", LOCAL, "-e", "topology=combined")
    assert (code, out) == (0, "ok: topology combined, combined on local\n")


def test_unsupported_index_topk_is_refused_naming_field_host_and_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", "-i", LOCAL, "-e", "index_topk=1000")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "dsv4deploy validate: invalid input",
        "index_topk (host local): sglang 0.5.23's DeepSeek-V4 backend accepts index_topk 512 or 1024 only, "
        "got 1000; fix: set index_topk to 512 or 1024",
    ]


def test_memory_that_does_not_fit_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    decode = {"host": "local", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 31002, "mem_fraction_static": 0.85}
    code, _, err = run(capsys, "validate", "-i", LOCAL, "-e", json.dumps({"decode": [decode]}))
    assert code == 2
    assert err.splitlines()[1] == (
        "decode[0].mem_fraction_static (host local): 0.85 leaves 14.4 GiB outside the static pool, 18.5 GiB needed "
        "with index_topk 1024 (base 5.0 + CUDA graphs 3.5 + top-k buffers 10.0); "
        "fix: set mem_fraction_static to 0.80 or less")


def test_memory_profile_override_through_extra_vars(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", "-i", LOCAL, "-e", '{"memory_profile": {"headroom": {"base_gib": 6}}}')
    assert code == 2
    assert "fix: set mem_fraction_static to 0.79 or less" in err


def test_undefined_variable_and_missing_inventory_are_messages(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", "-i", LOCAL, "-e", "install_root={{ undefined_thing }}")
    assert code == 2
    assert err.splitlines()[1] == ("install_root (host local): 'undefined_thing' is undefined; fix: define the "
                                   "variable (inventory or -e) or correct the template")
    code, _, err = run(capsys, "validate", "-i", "/no/such/inventory")
    assert (code, err.splitlines()[1]) == (2, "inventory /no/such/inventory: no such file or directory")


def test_bad_input_through_the_console_script_has_no_traceback() -> None:
    result = subprocess.run([sys.executable, "-m", "dsv4deploy.cli", "validate", "-i", LOCAL, "-e", "index_topk=1000",
                             "-e", "topology=mixed"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[1:] == [
        "topology: Input should be 'pd' or 'combined' (got 'mixed'); fix: correct topology"]


@pytest.mark.parametrize("name", ["pd-single-host", "1p1d-three-hosts", "2p1d"])
def test_example_inventories_validate(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, err = run(capsys, "validate", "-i", str(EXAMPLES / name))
    assert (code, err) == (0, ""), err
    assert out.startswith("ok: topology pd")


def test_single_host_example_is_the_seeds_box(capsys: pytest.CaptureFixture[str]) -> None:
    spec, reports = cli.load_deployment([str(EXAMPLES / "pd-single-host")], [])
    assert (spec.prefill[0].gpus, spec.decode[0].gpus, spec.router.host) == ([0, 1, 2, 3], [4, 5, 6, 7], "gpu1")
    assert spec.index_topk == 1024 and spec.hosts["gpu1"].service_manager == "systemd"
    assert spec.server_env == {"SGLANG_SM120_MMA_FLASHMLA": "1", "SGLANG_SM120_TRITON_INDEXER": "1"}
    assert all(r.feasible for r in reports)


def test_plan_prints_memory_and_files(capsys: pytest.CaptureFixture[str], fake_render: None) -> None:
    code, out, _ = run(capsys, "plan", "-i", LOCAL)
    assert code == 0
    assert "  decode[0] on local (GPUs 4,5,6,7, tp 4, 96 GiB each): fits\n" in out
    assert ("      headroom: 19.2 GiB outside the static pool, 18.5 GiB needed = base 5.0 + CUDA graphs 3.5 + "
            "top-k buffers 10.0 (index_topk 1024, decode)\n") in out
    assert out.endswith("files that would be rendered:\n  local:\n    bin/serve-x.sh\n    spec.json\n")


def test_plan_json_and_infeasible_plan(capsys: pytest.CaptureFixture[str], fake_render: None) -> None:
    code, out, _ = run(capsys, "plan", "--json", "-i", LOCAL, "-e", '{"memory_profile": {"headroom": {"base_gib": 6}}}')
    plan = json.loads(out)
    assert code == 2
    assert [r["feasible"] for r in plan["memory"]] == [True, False]
    assert plan["memory"][1]["max_feasible_fraction"] == 0.79
    assert plan["files"] == {}
    assert plan["problems"][0]["field"] == "decode[0].mem_fraction_static"


def test_render_writes_files_per_host(capsys: pytest.CaptureFixture[str], fake_render: None, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "render", "-i", LOCAL, "-e", "topology=combined", "--out", str(tmp_path))
    assert code == 0
    script = tmp_path / "local" / "bin" / "serve-x.sh"
    assert script.read_text() == "#!/bin/sh\n# combined\n"
    assert os.access(script, os.X_OK)
    assert out.splitlines() == [str(script), str(tmp_path / "local" / "spec.json")]


def test_render_refuses_bad_input_and_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, _ = run(capsys, "render", "-i", LOCAL, "-e", "index_topk=1000", "--out", str(tmp_path / "r"))
    assert code == 2
    assert not (tmp_path / "r").exists()


def test_render_with_the_real_renderer(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("dsv4deploy.render")
    code, _, err = run(capsys, "render", "-i", str(EXAMPLES / "pd-single-host"), "--out", str(tmp_path))
    assert (code, err) == (0, "")
    assert (tmp_path / "gpu1" / "manifest.json").is_file()
    assert any((tmp_path / "gpu1").rglob("*decode*"))


def test_missing_renderer_is_a_clear_message(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "dsv4deploy.render", None)  # import fails as if the module were absent
    code, _, err = run(capsys, "render", "-i", LOCAL, "--out", str(tmp_path))
    assert code == 2
    assert err.splitlines()[1].startswith("rendering is not available: dsv4deploy.render.render_all cannot be imported")


def test_default_inventory_is_ansible_cfgs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert [Path(p).resolve() for p in cli.default_inventory()] == [Path(LOCAL).resolve()]


def test_subcommands_are_a_registry() -> None:
    # The extension point for `gate`: one entry in SUBCOMMANDS gives a subparser.
    seen: list[str] = []
    extra = {**cli.SUBCOMMANDS, "gate": cli.Subcommand("run a gate", lambda p: p.add_argument("name"),
                                                         lambda a: seen.append(a.name) or 0, reads_inventory=False)}
    args = cli.build_parser(extra).parse_args(["gate", "smoke"])
    assert args._run(args) == 0 and seen == ["smoke"]
