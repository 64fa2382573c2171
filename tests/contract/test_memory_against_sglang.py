"""The plan's memory figures against sglang 0.5.23's own, for every starter in inventory/examples.

For each server of each starter, its rendered line is resolved by the real sglang (the real-engine
venv: the contract venv has no transformers) with a GPU of the host's `gpu_memory_gib` faked and the
published DeepSeek-V4-Flash config.json as the model (fixtures/deepseek-v4-flash-config.json, from the
Hugging Face card of deepseek-ai/DeepSeek-V4-Flash as quoted in public code: the Flash-Base fields
with `expert_dtype` fp4 and the FP8 `quantization_config`). Each server is resolved twice, as the
starter sets it and with no `mem_fraction_static` (sglang picks its own), and two figures are compared
within 5 %: the fraction in use, and the KV pool's token count (`max_total_num_tokens`, per
attention-DP rank) against the plan's `kv_tokens_per_rank`. sglang is given the plan's weights per GPU (it measures
  them after loading, which no CPU can), so this holds the plan's pool layout, fixed costs and
  fraction to sglang's.

`-s` prints the table (docs/memory.md quotes it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dsv4deploy.inventory import spec_from_inventory
from dsv4deploy.inventory.starter import EXAMPLES, examples_dir
from dsv4deploy.plan.memory import check_memory
from dsv4deploy.plan.services import server_argv, server_env
from dsv4deploy.spec import Deployment, WorkerSpec
from tests.real_engine.enginehost import engine_python

pytestmark = pytest.mark.contract

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "resolve_memory.py"
FIXTURE = HERE / "fixtures" / "deepseek-v4-flash-config.json"
STARTERS = [name for name in EXAMPLES if name != "local"]  # local: the simulator's tiny host
LAUNCHER = ["python3", "-m", "sglang.launch_server"]
# Flags naming files or devices of the target host (the fixture folder holds only config.json; sglang
# looks the InfiniBand device up in sysfs).
_HOST_FILES = ("--model-path", "--chat-template", "--disaggregation-ib-device")


def _line(argv: list[str], drop_fraction: bool) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv[len(LAUNCHER):]:
        if skip:
            skip = False
            continue
        if arg in _HOST_FILES or (drop_fraction and arg == "--mem-fraction-static"):
            skip = True
            continue
        out.append(arg)
    return out


def _unset(spec: Deployment) -> Deployment:
    """`spec` with no server setting mem_fraction_static (each takes sglang's default)."""
    def clear(worker: WorkerSpec) -> WorkerSpec:
        return worker.model_copy(update={"mem_fraction_static": None})

    return spec.model_copy(update={
        "prefill": [clear(w) for w in spec.prefill], "decode": [clear(w) for w in spec.decode],
        "combined": clear(spec.combined) if spec.combined else None})


def _cases() -> list[dict]:
    cases = []
    for starter in STARTERS:
        spec = spec_from_inventory([str(examples_dir() / starter)], [json.dumps({"server_launcher": LAUNCHER})])
        plans = {r.field: r for r in check_memory(spec)}
        defaults = {r.field: r for r in check_memory(_unset(spec))}
        for path, worker in spec.workers():
            role = path.split("[")[0]
            argv = server_argv(spec, role, worker)
            env = {k: v for k, v in server_env(spec, worker, role).items() if k != "CUDA_VISIBLE_DEVICES"}
            plan = plans[path]
            common = {"starter": starter, "server": path, "env": env, "gpu_mib": plan.gpu_memory_gib * 1024,
                      "weights_gib": plan.weights_gib, "plan": plan}
            cases.append({**common, "argv": _line(argv, drop_fraction=False)})
            cases.append({**common, "argv": _line(argv, drop_fraction=True), "plan": defaults[path], "default": True})
    return cases


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    python = engine_python()
    if not python.exists():
        pytest.skip(f"needs the real-engine venv ({python}; ./scripts/setup.sh engine): the full sglang")
    model = tmp_path_factory.mktemp("dsv4-flash")
    shutil.copy(FIXTURE, model / "config.json")
    cases = _cases()
    request = {"model": str(model), "cases": [{k: c[k] for k in ("argv", "env", "gpu_mib", "weights_gib")}
                                              for c in cases]}
    done = subprocess.run([str(python), str(HARNESS)], input=json.dumps(request), capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout)
    rows = [{**case, "sglang": answer} for case, answer in zip(cases, answers, strict=True)]
    print("\nstarter | server | fraction set: KV tokens per rank plan / sglang | sglang's default fraction "
          "plan / sglang: KV tokens per rank plan / sglang")
    for used, default in zip(rows[::2], rows[1::2], strict=True):
        print(f"{used['starter']} | {used['server']} | {used['plan'].mem_fraction_static:g}: "
              f"{used['plan'].kv_tokens_per_rank} / {used['sglang'].get('max_total_num_tokens')} | "
              f"{default['plan'].mem_fraction_static:g} / {default['sglang'].get('mem_fraction_static')}: "
              f"{default['plan'].kv_tokens_per_rank} / {default['sglang'].get('max_total_num_tokens')}")
    return rows


@pytest.mark.parametrize("starter", STARTERS)
def test_the_plan_matches_sglangs_own_fraction_and_kv_pool(figures: list[dict], starter: str) -> None:
    rows = [r for r in figures if r["starter"] == starter]
    assert rows, starter
    for row in rows:
        answer, plan = row["sglang"], row["plan"]
        assert not answer["error"], f"{starter} {row['server']}: sglang refused the line: {answer['error']}"
        assert plan.fraction_source == ("sglang default" if row.get("default") else "set")
        assert plan.mem_fraction_static == pytest.approx(answer["mem_fraction_static"], rel=0.05), row
        assert plan.kv_tokens_per_rank == pytest.approx(answer["max_total_num_tokens"], rel=0.05), row
