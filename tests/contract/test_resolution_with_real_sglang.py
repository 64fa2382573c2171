"""Preflight's start-up resolution against the real wheels of every supported sglang, on a stated H200.

Each server line the plan hands preflight goes through plugins/module_utils/host_parser.py exactly as on a
host: the service's Python parses it and resolves it as `sglang.launch_server` does before loading anything
(the post-init checks, the model's own hooks with the model folder's config.json). Here the model folder is
tests/contract/fixtures/deepseek-v4-flash (the published config.json, no weights) and the GPU is the one the
test states (stated_gpu/sitecustomize.py, harness only). Pythons: sglang 0.5.23 is the real-engine venv's
(the contract venv has no transformers, which resolution needs); 0.5.18 and 0.5.12 are the contract venv
with their wheel folders first on PYTHONPATH.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import host_parser
from dsv4deploy.inventory import spec_from_inventory
from dsv4deploy.inventory.starter import RECIPE_EXAMPLES, examples_dir
from dsv4deploy.plan import make_plan
from dsv4deploy.spec import SpecError

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MODEL = HERE / "fixtures" / "deepseek-v4-flash"
# version -> (python, PYTHONPATH after the stated GPU's folder, modules a CPU wheel set lacks)
PYTHONS = {
    "0.5.23": (ROOT / ".engine-venv" / "bin" / "python", [], ["sgl_kernel"]),
    "0.5.18": (ROOT / ".contract-venv" / "bin" / "python", [ROOT / ".contract-sglang-0.5.18", HERE / "stubs"],
               ["sgl_kernel", "compressed_tensors", "flashinfer", "gguf"]),
    "0.5.12": (ROOT / ".contract-venv" / "bin" / "python", [ROOT / ".contract-sglang-0.5.12", HERE / "stubs"],
               ["sgl_kernel", "compressed_tensors", "einops", "gguf"]),
}
# An H200 as nvidia-smi and torch describe it: 143771 MiB, SM 9.0, 8 on the box.
H200 = {"name": "NVIDIA H200", "memory_mib": 143771, "capability": [9, 0], "count": 8, "cuda": "13.0"}


def _python(version: str) -> Path:
    python = PYTHONS[version][0]
    if not python.exists():
        pytest.skip(f"{python} missing: `./scripts/setup.sh {'engine' if version == '0.5.23' else 'contract'}`")
    return python


@pytest.fixture(scope="module")
def gpu_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per version, a folder holding the stated-GPU sitecustomize and its JSON."""
    out = {}
    for version, (_python_path, _path, stubs) in PYTHONS.items():
        folder = tmp_path_factory.mktemp(f"gpu-{version}")
        shutil.copy(HERE / "stated_gpu" / "sitecustomize.py", folder / "sitecustomize.py")
        shutil.copy(HERE / "stubs" / "stub_finder.py", folder / "stub_finder.py")
        (folder / "stated_gpu.json").write_text(json.dumps({**H200, "stub_modules": stubs}), encoding="utf-8")
        out[version] = folder
    return out


IB = "--disaggregation-ib-device"


def _checks(spec, host: str, version: str, gpu: Path, keep_ib: bool = False) -> list[dict]:
    """The plan's server lines of `host`, run by `version`'s Python on this fixture model and stated GPU. This
    machine has no InfiniBand, which sglang checks for a named IB device: the device is left out unless kept."""
    python, path, _stubs = PYTHONS[version]
    checks = [c for c in make_plan(spec, [host])["hosts"][host]["parsers"] if c["kind"] == "server"]
    for check in checks:
        check["python"] = str(python)
        check["env"] = {**check["env"], "PYTHONPATH": ":".join(map(str, [gpu, *path]))}
        argv = check["argv"]
        argv[argv.index("--model-path") + 1] = str(MODEL)
        if IB in argv and not keep_ib:
            del argv[argv.index(IB):argv.index(IB) + 2]
    return checks


def _starter(example: str, version: str):
    launch = {"sglang_version": version, "server_launcher": ["python3", "-m", "sglang.launch_server"]}
    return spec_from_inventory([str(examples_dir() / example)], [json.dumps(launch)])


def _starter_lines(version: str, gpu: Path) -> list[dict]:
    out = []
    for example in RECIPE_EXAMPLES:
        try:
            spec = _starter(example, version)
        except SpecError as exc:  # a setting this release lacks: validate says so, nothing to resolve
            print(f"{example} on {version}: refused by validate: {exc.problems[0]}")
            continue
        for host in spec.hosts_in_use():
            out += [{**c, "service": f"{example} {host} {c['service']}"} for c in _checks(spec, host, version, gpu)]
    return out


# The bad cases, rendered past dsv4deploy's own rules (as a table that did not know them would):
# the host's sglang refuses each with its own message, in preflight, before anything stops.
BAD = [
    ("0.5.23", ["--kv-cache-dtype", "nvfp4"], "nvfp4 is not supported for DeepseekV4ForCausalLM"),
    ("0.5.23", ["--kv-cache-dtype", "bf16"], "bf16 is not supported for DeepseekV4ForCausalLM"),
    ("0.5.23", ["--kv-cache-dtype", "fp8_e5m2"], "fp8_e5m2 is not supported for DeepseekV4ForCausalLM"),
    ("0.5.18", ["--kv-cache-dtype", "fp4_e2m1"], "fp4_e2m1 is not supported for DeepseekV4ForCausalLM"),
    ("0.5.12", ["--kv-cache-dtype", "fp4_e2m1"], "fp4_e2m1 is not supported for DeepseekV4ForCausalLM"),
    ("0.5.12", ["--kv-cache-dtype", "bfloat16"], "bfloat16 is not supported for DeepseekV4ForCausalLM"),
    ("0.5.23", ["--schedule-policy", "fastest"], "argument --schedule-policy: invalid choice: 'fastest'"),
]
# Resolution also asks the host: a named IB device where /sys/class/infiniband is missing (this machine).
NO_IB = "InfiniBand sysfs path not found: /sys/class/infiniband"


def _bad_lines(version: str, gpu: Path) -> list[dict]:
    out = []
    for number, (bad_version, extra, _said) in enumerate(BAD):
        if bad_version == version:
            (check,) = _checks(_starter("h200-tp4", version), "gpu1", version, gpu)
            out.append({**check, "service": f"bad{number}", "argv": [*check["argv"], *extra]})
    if version == "0.5.23" and not Path("/sys/class/infiniband").exists():
        (check,) = _checks(_starter("multi-node-pd", version), "gpu1", version, gpu, keep_ib=True)
        out.append({**check, "service": "no-ib"})
    return out


# Each recipe starter's cookbook cell (sglang docs_new/src/snippets/configs/deepseek-ai/deepseek-v4.jsx,
# commit 01c5c03): the cell's flags as sglang 0.5.23 resolves them, and its environment.
CELLS: dict[str, tuple[str, dict, dict]] = {
    "h200-tp4": ("h200 / flash / fp4 / low-latency / single", {
        "tp_size": 4, "moe_runner_backend": "marlin", "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}, {}),
    "h200-fp8": ("h200 / flash / fp8 / low-latency / single", {
        "tp_size": 4, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4}, {"SGLANG_DSV4_FP4_EXPERTS": "0"}),
    "h200-dp-attention": ("h200 / flash / fp8 / balanced / single", {
        "tp_size": 4, "attn_dp_size": 4, "moe_a2a_backend": "deepep", "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2,
        "cuda_graph_max_bs_decode": 128, "max_running_requests": 128},
        {"SGLANG_DSV4_FP4_EXPERTS": "0", "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "256"}),
    "multi-node-pd": ("none", {}, {}),
}
FRACTION = "--mem-fraction-static"


def _without_fraction(lines: list[dict]) -> list[dict]:
    """The cells leave mem_fraction_static to sglang: the same lines without it, for sglang's own default."""
    out = []
    for line in lines:
        argv = list(line["argv"])
        if FRACTION in argv:
            del argv[argv.index(FRACTION):argv.index(FRACTION) + 2]
        out.append({**line, "service": f"default {line['service']}", "argv": argv})
    return out


@pytest.fixture(scope="module")
def answers(gpu_dir) -> dict[str, dict]:
    """Per version, one preflight child (as on a host: one process per Python) over every starter's server
    lines and the bad cases: check_lines' answer and the lines it was given."""
    out = {}
    for version in PYTHONS:
        if not PYTHONS[version][0].exists():
            continue
        starters = _starter_lines(version, gpu_dir[version])
        lines = starters + _bad_lines(version, gpu_dir[version]) + _without_fraction(starters)
        out[version] = {"found": host_parser.check_lines("gpu1", "", lines), "lines": lines}
    return out


def _problems_of(found: dict, service: str) -> list[str]:
    return [p for p in found["problems"] if p.startswith(f"host gpu1, {service}: ")]


@pytest.mark.parametrize("version", list(PYTHONS))
def test_every_starters_server_lines_resolve_on_every_supported_release(version: str, answers) -> None:
    _python(version)
    found, lines = answers[version]["found"], answers[version]["lines"]
    starters = [c["service"] for c in lines if c["service"].split(" ")[0] in RECIPE_EXAMPLES]
    defaults = [f"default {name}" for name in starters]
    assert [p for s in defaults for p in _problems_of(found, s)] == []
    assert [p for s in starters for p in _problems_of(found, s)] == []
    assert set(starters) <= set(found["resolved"]), found
    print(f"{len(lines)} lines through sglang {version} in one child: {found['parser_seconds']} s")
    for name in sorted(starters):
        got = found["resolved"][name]
        print(f"{version} {name}: " + json.dumps({k: got.get(k) for k in (
            "kv_cache_dtype", "mem_fraction_static", "max_running_requests", "chunked_prefill_size", "page_size",
            "cuda_graph_max_bs", "cuda_graph_max_bs_decode", "attention_backend")})
              + f"; sglang's own mem_fraction_static: {found['resolved'][f'default {name}']['mem_fraction_static']}")


def test_each_recipe_starter_names_its_cookbook_cell_and_resolves_to_its_values(answers) -> None:
    _python("0.5.23")
    assert set(CELLS) == set(RECIPE_EXAMPLES)
    found, lines = answers["0.5.23"]["found"], answers["0.5.23"]["lines"]
    for example, (cell, values, env) in CELLS.items():
        header = (examples_dir() / example / "group_vars" / "all" / "deployment.yml").read_text().splitlines()[0]
        assert header.startswith(f"# cookbook cell: {cell}"), (example, header)
        for line in (c for c in lines if c["service"].split(" ")[0] == example):
            got = found["resolved"][line["service"]]
            assert {k: got.get(k) for k in values} == values, (example, got)
            assert {k: line["resolve_env"].get(k) for k in env} == env, (example, line["resolve_env"])


@pytest.mark.parametrize(("number", "version", "said"), [(n, v, s) for n, (v, _e, s) in enumerate(BAD)],
                         ids=[f"{v}{' '.join(e)}" for v, e, _ in BAD])
def test_each_bad_case_is_refused_with_sglangs_own_message(number: int, version: str, said: str, answers) -> None:
    _python(version)
    (problem,) = _problems_of(answers[version]["found"], f"bad{number}")
    assert problem.startswith(f"host gpu1, bad{number}: sglang {version}"), problem
    assert said in problem and "fix: " in problem, problem


def test_a_named_ib_device_on_a_host_without_infiniband_is_refused_before_the_stop(answers) -> None:
    _python("0.5.23")
    if Path("/sys/class/infiniband").exists():
        pytest.skip("this machine has InfiniBand: the refusal needs a host without it")
    (problem,) = _problems_of(answers["0.5.23"]["found"], "no-ib")
    assert NO_IB in problem, problem
