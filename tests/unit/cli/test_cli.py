"""dsv4deploy CLI: validate, plan, render against real inventories; bad input exits 2 without a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsv4deploy import cli
from tests.ports import free_port
from tests.processes import stop_process

REPO = Path(__file__).resolve().parents[3]
LOCAL = str(REPO / "inventory" / "local")
EXAMPLES = REPO / "inventory" / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def fake_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in dsv4deploy.plan.render, so these tests check the CLI, not the templates."""
    module = types.ModuleType("dsv4deploy.plan.render")

    class RenderError(ValueError):
        pass

    def render_all(spec):
        return {host: {"bin/serve-x.sh": f"#!/bin/sh\n# {spec.topology}\n", "spec.json": "{}\n"}
                for host in spec.hosts_in_use()}

    module.RenderError = RenderError
    module.render_all = render_all
    module.file_mode = lambda rel: 0o755 if rel.startswith("bin/") else 0o644
    monkeypatch.setitem(sys.modules, "dsv4deploy.plan.render", module)


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
        "decode[0].mem_fraction_static (host local): 0.85 leaves 14.4 GiB outside the static pool, 15.0 GiB needed "
        "with index_topk 1024 (sglang's reserve 10.0 (constant 0.5 + activations 3.0 + parallel 0.5 + cuda graphs "
        "1.0 + floor 5.0) + topk buffers 5.0); fix: set mem_fraction_static to 0.84 or less")


def test_memory_profile_override_through_extra_vars(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", "-i", LOCAL, "-e", '{"memory_profile": {"headroom": {"extra_gib": 5}}}')
    assert code == 2
    assert "fix: set mem_fraction_static to 0.79 or less" in err


def test_gate_variables_are_checked_as_the_deploy_checks_them(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    """A typo, a bad value or a needle grid too short for its requirement fails validate and plan, as
    it would fail the deploy's plan step; from -e and from the inventory's own group_vars alike."""
    code, _, err = run(capsys, "validate", "-i", LOCAL, "-e", "soak_sesions=10")
    assert (code, err.splitlines()[1]) == (2, "unknown gate variable soak_sesions; did you mean soak_sessions?")
    code, _, err = run(capsys, "plan", "-i", LOCAL, "-e", "needle_lengths=[1000,2000,5500]")
    assert code == 2
    assert err.splitlines()[1].endswith(
        """fix: pass a list as JSON, e.g. -e '{"needle_lengths": [1000,2000,5500]}'""")
    inventory = tmp_path / "site"
    shutil.copytree(LOCAL, inventory)
    (inventory / "group_vars" / "all" / "zz_gates.yml").write_text("needle_lengths: [1000, 2000, 4000]\n"
                                                                   "needle_required_tokens: null\n")
    code, _, err = run(capsys, "validate", "-i", str(inventory), "-e", "index_topk=1024")
    assert (code, err.splitlines()[1:]) == (2, [
        "needle_lengths [1000, 2000, 4000] cannot reach the required 5500 tokens (the default for index_topk "
        "1024): add a length of at least 5500, e.g. [1000, 2000, 4000, 5500]"])
    code, out, _ = run(capsys, "validate", "-i", str(inventory), "-e", "index_topk=512")
    assert (code, out) == (0, "ok: topology pd, prefill[0] on local, decode[0] on local\n")


def test_undefined_variable_and_missing_inventory_are_messages(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", "-i", LOCAL, "-e", "install_root={{ undefined_thing }}")
    assert code == 2
    assert err.splitlines()[1] == ("install_root (host local): 'undefined_thing' is undefined; fix: define the "
                                   "variable (inventory or -e) or correct the template")
    code, _, err = run(capsys, "validate", "-i", "/no/such/inventory")
    assert (code, err.splitlines()[1]) == (2, "inventory /no/such/inventory: no such file or directory; fix: pass -i "
                                              "with the folder or file of your inventory (e.g. one written by "
                                              "`dsv4deploy init DIR`)")


def test_bad_input_through_the_console_script_has_no_traceback() -> None:
    result = subprocess.run([sys.executable, "-m", "dsv4deploy.cli", "validate", "-i", LOCAL, "-e", "index_topk=1000",
                             "-e", "topology=mixed"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[1:] == [
        "topology: Input should be 'pd' or 'combined' (got 'mixed'); fix: set topology to pd or combined "
        "(exactly, lower case)"]


def test_version_is_the_installed_packages(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"dsv4deploy {version('dsv4deploy')}"


def test_a_reader_that_stops_reading_ends_the_command_quietly() -> None:
    # `dsv4deploy plan | head`: the reader goes before the plan is printed.
    proc = subprocess.Popen([sys.executable, "-m", "dsv4deploy.cli", "plan", "-i", LOCAL], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == cli.EXIT_BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


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
    assert ("      headroom: 19.2 GiB outside the static pool, 15.0 GiB needed = sglang's reserve 10.0 (constant 0.5 + "
            "activations 3.0 + parallel 0.5 + cuda graphs 1.0 + floor 5.0) + topk buffers 5.0 (index_topk 1024, "
            "decode)\n") in out
    assert out.endswith("files that would be rendered:\n  local:\n    bin/serve-x.sh\n    spec.json\n")


def test_plan_json_and_infeasible_plan(capsys: pytest.CaptureFixture[str], fake_render: None) -> None:
    extra = '{"memory_profile": {"headroom": {"extra_gib": 5}}}'
    code, out, _ = run(capsys, "plan", "--json", "-i", LOCAL, "-e", extra)
    plan = json.loads(out)
    assert code == 2
    assert [r["feasible"] for r in plan["memory"]] == [False, False]
    assert [r["max_feasible_fraction"] for r in plan["memory"]] == [0.77, 0.79]
    assert plan["files"] == {}
    assert plan["problems"][1]["field"] == "decode[0].mem_fraction_static"


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
    pytest.importorskip("dsv4deploy.plan.render")
    code, _, err = run(capsys, "render", "-i", str(EXAMPLES / "pd-single-host"), "--out", str(tmp_path))
    assert (code, err) == (0, "")
    assert (tmp_path / "gpu1" / "manifest.json").is_file()
    assert any((tmp_path / "gpu1").rglob("*decode*"))


def test_missing_renderer_is_a_clear_message(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "dsv4deploy.plan.render", None)  # import fails as if the module were absent
    code, _, err = run(capsys, "render", "-i", LOCAL, "--out", str(tmp_path))
    assert code == 2
    assert err.splitlines()[1].startswith(
        "rendering is not available: dsv4deploy.plan.render.render_all cannot be imported")


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


# -- gate: against the real simulated server ---------------------------------------------------------

@pytest.fixture(scope="module")
def sim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A simulated sglang server on a free loopback port: (URL, its log file); stopped by PID.

    tp 4: the simulated DeepSeek-V4-Flash weights do not fit one 96 GiB GPU.
    """
    import time

    import httpx

    tmp = tmp_path_factory.mktemp("sim")
    port = free_port()
    log = tmp / "server.log"
    env = {**os.environ, "DSV4_SIM_STATE_DIR": str(tmp / "gpus"), "DSV4_SIM_STARTUP_S": "0.2",
           "CUDA_VISIBLE_DEVICES": "0,1,2,3", "DSV4_SIM_FAULTS": ""}
    argv = [sys.executable, "-m", "dsv4deploy.sim.server", "--model-path", "/m", "--served-model-name",
            "deepseek-v4-flash", "--tp-size", "4", "--host", "127.0.0.1", "--port", str(port),
            "--mem-fraction-static", "0.8", "--json-model-override-args", '{"index_topk":1024}',
            "--tool-call-parser", "deepseekv4"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail(f"simulated server did not become healthy:\n{log.read_text()}")
        yield url, log
    finally:
        stop_process(proc)


def test_gate_smoke_passes_against_the_simulated_server(capsys: pytest.CaptureFixture[str],
                                                        sim_server: tuple[str, Path]) -> None:
    url, _ = sim_server
    code, out, _ = run(capsys, "gate", "smoke", "--url", url, "--deadline", "20")
    assert code == 0
    assert out.startswith("smoke: passed in ") and out.endswith(": answer 'OK' after 1 try\n")


def test_gate_readiness_of_a_combined_server_as_json(capsys: pytest.CaptureFixture[str],
                                                     sim_server: tuple[str, Path]) -> None:
    url, _ = sim_server
    code, out, err = run(capsys, "gate", "readiness", "--url", url, "--deadline", "20", "--json")
    result = json.loads(out)
    assert (code, result["name"], result["status"]) == (0, "readiness", "passed")
    assert [e["check"] for e in result["evidence"]["endpoints"]] == ["combined /health", "combined /v1/models"]
    assert "readiness: passed in " in err and "readiness: [2/2]" in err


def test_gate_readiness_fails_for_a_model_the_server_does_not_serve(capsys: pytest.CaptureFixture[str],
                                                                    sim_server: tuple[str, Path]) -> None:
    url, _ = sim_server
    code, out, _ = run(capsys, "gate", "readiness", "--url", url, "--model", "other", "--deadline", "0.5")
    assert code == 1
    assert out.splitlines()[0].endswith(
        "not ready after 0.5 s: combined /v1/models does not list 'other' (seen: deepseek-v4-flash)")


def test_gate_config_reads_the_log_and_server_info(capsys: pytest.CaptureFixture[str],
                                                   sim_server: tuple[str, Path]) -> None:
    url, log = sim_server
    common = ["gate", "config", "--server", f"combined={url}", "--log-file", f"combined={log}"]
    code, out, _ = run(capsys, *common, "--expected", '{"index_topk": 1024}')
    assert code == 0 and out.endswith(': override {"index_topk": 1024} logged and effective on 1 server(s)\n')
    code, out, _ = run(capsys, *common, "--expected", '{"index_topk": 512}')
    assert code == 1 and out.startswith("config: failed in ")


def test_gate_needle_small_grid(capsys: pytest.CaptureFixture[str], sim_server: tuple[str, Path]) -> None:
    url, _ = sim_server
    code, out, _ = run(capsys, "gate", "needle", "--url", url, "--lengths", "500,1000", "--depths", "0.5",
                       "--required-tokens", "1000", "--concurrency", "2", "--deadline", "60")
    assert code == 0, out
    assert out.startswith("needle: passed in ")


def test_gate_accuracy_by_hand(capsys: pytest.CaptureFixture[str], sim_server: tuple[str, Path]) -> None:
    url, _ = sim_server
    # The built-in questions, judged against the model profile's reference score for them.
    code, out, err = run(capsys, "gate", "accuracy", "--url", url, "--concurrency", "8", "--deadline", "120")
    assert code == 0, out
    assert out.startswith("accuracy: passed in ") and "(builtin)" in out and "accuracy: [1/" in err
    # A model profile that does not exist is refused, naming the option and the choices.
    code, out, err = run(capsys, "gate", "accuracy", "--url", url, "--model-profile", "nope")
    assert code == 2 and "--model-profile 'nope': choose one of deepseek-v4-flash" in out + err


def test_gate_soak_by_hand(capsys: pytest.CaptureFixture[str], sim_server: tuple[str, Path]) -> None:
    url, _ = sim_server
    # the sequential test at its defaults: 65 clean sessions pass a release
    code, out, err = run(capsys, "gate", "soak", "--url", url, "--sessions", "80", "--turns", "1",
                         "--concurrency", "8", "--deadline", "120")
    assert code == 0, out
    assert out.startswith("soak: passed in ") and "0 of 65 sessions corrupted" in out
    assert "soak: [1/80] session" in err  # progress on stderr
    # a budget too small to decide: inconclusive, which is not a pass, saying how many more would decide
    code, out, _ = run(capsys, "gate", "soak", "--url", url, "--sessions", "4", "--turns", "1", "--deadline", "60")
    assert code == 1 and out.startswith("soak: inconclusive in "), out
    assert "at least 61 more clean sessions would decide" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["smoke"], "--url is required"),
    (["smoke", "--url", "localhost:1"],
     "--url must be an http(s) URL such as http://127.0.0.1:30000, got 'localhost:1'"),
    (["smoke", "--url", "http://127.0.0.1:1", "--deadline", "0"], "--deadline 0: must be positive"),
    (["readiness", "--url", "http://127.0.0.1:1", "--worker", "http://127.0.0.1:2"],
     "--worker 'http://127.0.0.1:2': expected ROLE=VALUE with ROLE one of prefill, decode, combined"),
    (["needle", "--url", "http://127.0.0.1:1", "--lengths", "1k"],
     "--lengths '1k': expected comma-separated ints such as 1000,2000,4000"),
    (["needle", "--url", "http://127.0.0.1:1", "--depths", "2"],
     "depths must be fractions between 0 and 1, got [2.0]"),
    (["needle", "--url", "http://127.0.0.1:1", "--lengths", "1000,2000", "--index-topk", "1024"],
     "--lengths [1000, 2000] cannot reach the required 5500 tokens: add a length of at least 5500 "
     "(or lower --required-tokens)"),
    (["soak", "--url", "http://127.0.0.1:1", "--sessions", "0"],
     "need sessions, turns and concurrency >= 1 (got 0, 4, 32)"),
    (["config", "--server", "prefill=http://127.0.0.1:1"],
     "no --log-file for server prefill (give one per --server, in the same order)"),
    (["config", "--server", "prefill=http://127.0.0.1:1", "--log-file", "prefill=/nonexistent/x.log",
      "--expected", "{}"], "--log-file /nonexistent/x.log: cannot read it (No such file or directory)"),
    (["config", "--server", "prefill=http://127.0.0.1:1", "--log-file", "prefill=/dev/null", "--expected", "[1]"],
     "--expected '[1]' must be a JSON object"),
    (["smoke", "--url", "http://127.0.0.1:1", "--api-key-file", "/nonexistent/key"],
     "--api-key-file /nonexistent/key: cannot read it (No such file or directory)"),
])
def test_gate_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                                              message: str) -> None:
    code, out, err = run(capsys, "gate", *argv)
    assert (code, out) == (2, "")
    assert err.splitlines() == ["dsv4deploy gate: invalid input", message]


def test_gate_unknown_name_is_argparse_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["gate", "latency", "--url", "http://127.0.0.1:1"])
    assert exc.value.code == 2
    assert "invalid choice: 'latency'" in capsys.readouterr().err


def test_a_vault_var_nobody_defines_fails_validation_not_the_deploy(capsys: pytest.CaptureFixture[str]) -> None:
    # It passed validate, and the deploy then failed after writing the release.
    code, _, err = run(capsys, "validate", "-i", LOCAL, "-e", '{"api_key": {"vault_var": "vault_dsv4_key"}}')
    assert (code, err.splitlines()[1:]) == (2, [
        "api_key.vault_var: the variable 'vault_dsv4_key' is not defined in the inventory or -e; fix: define "
        "vault_dsv4_key (e.g. ansible-vault encrypt_string --name vault_dsv4_key, into group_vars), or use "
        "api_key: {file: PATH}"])
    code, _, _ = run(capsys, "validate", "-i", LOCAL, "-e", '{"api_key": {"vault_var": "vault_dsv4_key"}}',
                     "-e", "vault_dsv4_key=sk-1")
    assert code == 0
