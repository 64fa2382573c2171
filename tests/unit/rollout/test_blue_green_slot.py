"""blue_green's other slot (dsv4deploy.rollout.strategy.beside_spec): the new release rendered to run beside the
serving one shares no GPU, port, path or program name with it, and is refused when it does not fit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dsv4deploy.plan.render import render_release
from dsv4deploy.plan.services import services_on
from dsv4deploy.rollout.blue_green import beside_spec
from dsv4deploy.rollout.settings import load_rollout
from dsv4deploy.rollout.slot import slot_root
from dsv4deploy.spec import SpecError, check_deployment

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import pd_spec

# tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
H200 = {"gpu_memory_gib": 141}
HALF = {"prefill": {"host": "gpu1", "gpus": [0, 1], "tp_size": 2, "port": 30001, "bootstrap_port": 8998,
                    "mem_fraction_static": 0.8},
        "decode": {"host": "gpu1", "gpus": [2, 3], "tp_size": 2, "port": 30002, "mem_fraction_static": 0.8}}
BLUE_GREEN = load_rollout({"dsv4_rollout_strategy": "blue_green"})


def test_the_other_slot_shares_nothing_with_the_serving_one() -> None:
    serving = pd_spec(host=H200, **HALF)
    slot = beside_spec(serving, BLUE_GREEN)
    assert check_deployment(slot) == []
    assert [w.gpus for _, w in slot.workers()] == [[4, 5], [6, 7]]
    assert (slot.prefill[0].port, slot.prefill[0].bootstrap_port, slot.decode[0].port) == (30101, 9098, 30102)
    assert slot.router.port == 8100 and slot.router.prometheus_port == 29100
    root = serving.host("gpu1").install_root
    assert slot.host("gpu1").install_root == slot_root(root) == f"{root}/slot-b"
    old, new = services_on(serving, "gpu1"), services_on(slot, "gpu1")
    # systemd units share one folder per host: the slot's names are its own.
    assert not {s.name for s in old} & {s.name for s in new}, [s.name for s in new]
    assert all(s.exec_path.startswith(f"{root}/slot-b/") and (s.log_path or s.workdir).startswith(f"{root}/slot-b")
               for s in new)
    files = render_release(slot, "gpu1")
    services = json.loads(files["services.json"])
    prefill = next(text for name, text in files.items() if name.startswith("bin/") and "prefill" in name)
    assert "9098" in prefill and "8998" not in prefill and "30101" in prefill
    # services.json (what stop, verify and the GPU wait read) names the slot's own GPUs and ports.
    listed = {x["role"]: (x["gpus"], x["ports"]) for x in services["services"]}
    assert listed["prefill"] == ([4, 5], [30101, 9098]) and listed["decode"][0] == [6, 7]
    assert listed["router"][1][0] == 8100
    # The model and its settings are the serving release's: only the slot's places differ.
    assert slot.model == serving.model and slot.decode[0].mem_fraction_static == serving.decode[0].mem_fraction_static


def test_the_other_slot_is_refused_where_it_does_not_fit() -> None:
    with pytest.raises(SpecError) as err:
        beside_spec(pd_spec(), BLUE_GREEN)
    assert any("dsv4_rollout_blue_green_gpu_offset (host gpu1)" in str(p) for p in err.value.problems)


def test_the_other_slot_gets_the_serving_ones_secret_files_under_its_own_root() -> None:
    # blue_green with a secret env value and a vault key: the slot's release reads both from files under
    # the slot's root, which the release's own install tasks write there from the slot plan's (redacted) spec.
    from dsv4deploy.plan import make_plan, secret_files

    inventory = pd_spec(host=H200, **HALF, api_key={"vault_var": "vault_dsv4_key"},
                        server_env_extra={"HF_TOKEN": "hf_slot"})
    slot = beside_spec(inventory, BLUE_GREEN)
    planned = make_plan(slot, ["gpu1"])
    assert "hf_slot" not in json.dumps(planned)
    root = inventory.host("gpu1").install_root
    home = secret_files(inventory, ["gpu1"])["gpu1"]
    files = secret_files(inventory, ["gpu1"], planned=planned["spec"])["gpu1"]
    assert sorted(files) == sorted(f"{root}/slot-b/secrets/{s.name}.env" for s in services_on(slot, "gpu1")
                                   if s.role != "router")
    assert sorted(files.values()) == sorted(home.values()) == ['HF_TOKEN="hf_slot"\n'] * 2
    # Every slot service, the preview router included, reads the key the playbook writes under the slot.
    assert {s.api_key_file for s in services_on(slot, "gpu1")} == {f"{root}/slot-b/secrets/api_key"}
    router = next(text for name, text in planned["hosts"]["gpu1"]["files"].items() if name.endswith("router.sh"))
    assert f"api_key_file={root}/slot-b/secrets/api_key" in router
