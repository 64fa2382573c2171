"""What the servers will read from the model: the needs the plan gives each server host, the profile's limits
(tp_size against the heads, context_length against the model's maximum), and the host module's verdict on a
real model folder (tests/unit/plan/test_access.py judges the other needs the same way)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import access as mod
from dsv4deploy.plan import make_plan
from dsv4deploy.plan.memory import check_memory
from dsv4deploy.spec import SpecError
from tests.golden.fixture_specs import pd_spec

STAND_IN = Path(__file__).resolve().parents[3] / "inventory" / "local" / ".model"
OTHER_UID = 4242


def test_every_server_host_gets_the_model_folder_and_the_template_file_to_check():
    needs = make_plan(pd_spec(), ["gpu1"])["hosts"]["gpu1"]["access"]
    [model] = [n for n in needs if n["need"] == "model"]
    assert model["path"] == "/models/DeepSeek-V4-Flash-NVFP4"
    assert model["what"] == "model.path of sglang-dsv4-decode, sglang-dsv4-prefill"  # once for both servers
    assert model["model"]["architectures"] == ["DeepseekV4ForCausalLM"]
    [template] = [n for n in needs if n["need"] == "read"]
    assert template["path"] == "/models/DeepSeek-V4-Flash-NVFP4/chat_template.jinja"


def test_a_named_builtin_template_is_not_a_file_to_check():
    needs = make_plan(pd_spec(chat_template="chatml"), ["gpu1"])["hosts"]["gpu1"]["access"]
    assert not [n for n in needs if n["need"] == "read"]


def test_a_tp_size_that_does_not_divide_the_heads_is_refused_naming_the_sizes_that_do():
    spec = pd_spec(decode=[{"host": "gpu1", "gpus": [4, 5, 6], "tp_size": 3, "port": 30002,
                            "mem_fraction_static": 0.8}])
    with pytest.raises(SpecError) as err:
        check_memory(spec)
    text = str(err.value)
    assert "decode[0].tp_size (host gpu1): tp_size 3 does not divide the 64 attention heads" in text
    assert "set tp_size to one of 1, 2, 4, 8, 16, 32, 64" in text


def test_a_context_length_above_the_models_maximum_is_refused():
    with pytest.raises(SpecError) as err:
        check_memory(pd_spec(context_length=2_000_000))
    assert "context_length 2000000 is above the model's maximum 1048576" in str(err.value)


# -- the host module, on a real folder ------------------------------------------------------------

@pytest.fixture
def folder() -> Iterator[Path]:
    """A copy of the embedded host's stand-in checkpoint, in a folder everyone may enter."""
    base = Path(tempfile.mkdtemp(prefix="dsv4-model-", dir="/var/tmp"))
    base.chmod(0o755)
    shutil.copytree(STAND_IN, base / "model")
    yield base / "model"
    shutil.rmtree(base)


def who(uid: int = OTHER_UID) -> mod.Who:
    user = mod.Who.__new__(mod.Who)
    user.name, user.exists, user.create, user.uid, user.gids = "svc", True, False, uid, set()
    return user


def model_need(path: Path | str, **model) -> dict:
    want = {"profile": "deepseek-v4-flash", "architectures": ["DeepseekV4ForCausalLM"], "context_length": None,
            **model}
    return {"path": str(path), "need": "model", "what": "model.path of sglang-dsv4-decode", "hidden": {},
            "no_dac_override": True, "model": want}


def test_the_stand_in_checkpoint_passes(folder):
    assert mod.check_need(model_need(folder), who()) == []


def test_a_missing_or_relative_model_path_is_named_with_the_fix(folder):
    [missing] = mod.check_need(model_need(folder.parent / "DeepSeek-V4-Flsh"), who())
    assert "DeepSeek-V4-Flsh (model.path of sglang-dsv4-decode): No such file or directory" in missing
    [relative] = mod.check_need(model_need("models/DeepSeek-V4-Flash"), who())
    assert "not an absolute path" in relative


def test_a_folder_without_config_json_is_not_a_checkpoint(folder):
    (folder / "config.json").unlink()
    [problem] = mod.check_need(model_need(folder), who())
    assert "holds no config.json" in problem and "fix: set model.path to the folder" in problem


def test_a_llama_checkpoint_under_a_deepseek_profile_is_refused(folder):
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                    "max_position_embeddings": 2048}))
    [problem] = mod.check_need(model_need(folder), who())
    assert "config.json says architectures ['LlamaForCausalLM'], model profile deepseek-v4-flash is for " \
           "DeepseekV4ForCausalLM" in problem


def test_a_context_length_above_max_position_embeddings_is_refused_as_sglang_would(folder):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2048}))
    [problem] = mod.check_need(model_need(folder, context_length=4096), who())
    assert "context_length 4096 is above the model's max_position_embeddings 2048" in problem
    assert mod.check_need(model_need(folder, context_length=2048), who()) == []


def test_missing_weights_and_tokenizer_and_an_unreadable_config_are_each_named(folder):
    (folder / "model.safetensors.index.json").unlink()
    (folder / "tokenizer_config.json").unlink()
    (folder / "config.json").chmod(0o600)
    problems = mod.check_need(model_need(folder), who())
    assert any(f"user svc cannot read {folder}/config.json" in p and "chmod -R o+rX" in p for p in problems)
    assert any("holds no weights" in p for p in problems) and any("holds no tokenizer" in p for p in problems)


def test_a_chat_template_the_user_cannot_read_is_named(folder):
    template = folder / "chat_template.jinja"
    template.chmod(0o600)
    need = {"path": str(template), "need": "read", "what": "chat_template of sglang-dsv4-decode", "hidden": {},
            "no_dac_override": True}
    [problem] = mod.check_need(need, who())
    assert "user svc cannot read it" in problem and f"fix: chmod o+r {template}" in problem


def test_dummy_weights_need_no_weight_files(folder):
    (folder / "model.safetensors.index.json").unlink()
    assert mod.check_need(model_need(folder, weights=False), who()) == []
    spec = pd_spec(decode={**pd_spec().decode[0].model_dump(), "extra_args": ["--load-format", "dummy"]})
    [model] = [n for n in make_plan(spec, ["gpu1"])["hosts"]["gpu1"]["access"] if n["need"] == "model"]
    assert model["model"]["weights"] is False
