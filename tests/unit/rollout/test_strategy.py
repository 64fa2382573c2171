"""dsv4_rollout_strategy: the plan says which strategy applies and why, and blue_green is refused by name
(field, host, fix) when the new release cannot run beside the serving one."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from dsv4deploy.plan import make_plan
from dsv4deploy.plan.services import build_services
from dsv4deploy.rollout.blue_green import beside_spec
from dsv4deploy.rollout.settings import Strategy, bake_problems, load_rollout
from dsv4deploy.rollout.strategy import STRATEGIES, rollout_plan
from dsv4deploy.spec import SpecError, load_spec
from dsv4deploy.spec.engine import EngineSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import PD_COMMON, combined_spec, host_vars, pd_spec

REPO = Path(__file__).resolve().parents[3]
# tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
H200 = {"gpu_memory_gib": 141}
HALF = {"prefill": {"host": "gpu1", "gpus": [0, 1], "tp_size": 2, "port": 30001, "bootstrap_port": 8998,
                    "mem_fraction_static": 0.8},
        "decode": {"host": "gpu1", "gpus": [2, 3], "tp_size": 2, "port": 30002, "mem_fraction_static": 0.8}}


def _refusal(spec: object, **variables: object) -> list[str]:
    with pytest.raises(SpecError) as err:
        rollout_plan(spec, load_rollout(variables))
    return [str(p) for p in err.value.problems]


def test_recreate_is_the_default_and_says_why() -> None:
    plan = make_plan(pd_spec(), ["gpu1"], now=0, rollout=rollout_plan(pd_spec(), load_rollout({})))
    assert plan["rollout"]["strategy"] == "recreate" and "outage" in plan["rollout"]["why"]
    assert make_plan(pd_spec(), ["gpu1"], now=0)["rollout"]["strategy"] == "recreate"


def test_blue_green_that_fits_places_the_other_release_beside() -> None:
    spec = pd_spec(host=H200, **HALF)
    rollout = rollout_plan(spec, load_rollout({"dsv4_rollout_strategy": "blue_green"}))
    assert rollout["strategy"] == "blue_green" and "fits beside" in rollout["why"] and "short outage" in rollout["why"]
    assert rollout["beside"]["prefill[0]"] == {"host": "gpu1", "gpus": [4, 5], "port": 30101, "bootstrap_port": 9098}
    assert rollout["beside"]["decode[0]"]["gpus"] == [6, 7] and rollout["preview_router_port"] == 8100
    plan = make_plan(spec, ["gpu1"], now=0, rollout=rollout)
    assert plan["rollout"]["preview_router_port"] == 8100
    # The strategy is how a release is rolled out, not what it is: same files, same release id.
    assert plan["release_id"] == make_plan(spec, ["gpu1"], now=0)["release_id"]


def test_blue_green_refused_when_the_gpus_do_not_fit() -> None:
    problems = _refusal(pd_spec(), dsv4_rollout_strategy="blue_green")
    assert any(p.startswith("dsv4_rollout_blue_green_gpu_offset (host gpu1): ") and "[8, 9, 10, 11]" in p
               and "has 8 GPUs" in p for p in problems), problems
    assert any("which the serving decode[0] uses" in p for p in problems)
    assert all("this release takes 8 of gpu1's 8" in p and "dsv4_rollout_strategy: recreate" in p for p in problems)


def test_blue_green_refused_when_ports_collide_or_overflow() -> None:
    problems = _refusal(pd_spec(host=H200, **HALF), dsv4_rollout_strategy="blue_green",
                        dsv4_rollout_blue_green_port_offset=1)
    assert any(p.startswith("dsv4_rollout_blue_green_port_offset (host gpu1)") and "new prefill[0].port" in p
               and "30002, which the serving decode[0].port uses" in p for p in problems), problems
    problems = _refusal(pd_spec(host=H200, **HALF), dsv4_rollout_strategy="blue_green",
                        dsv4_rollout_blue_green_port_offset=40000)
    assert any("would listen on port 70001 (over 65535)" in p for p in problems), problems


def test_blue_green_refused_when_memory_per_gpu_does_not_fit() -> None:
    """tp 1 puts all the weights on one GPU of each release: over 96 GiB, named per worker."""
    small = {role: {**w, "gpus": w["gpus"][:1], "tp_size": 1} for role, w in HALF.items()}
    with pytest.raises(SpecError):  # the plan itself already refuses it ...
        make_plan(pd_spec(**small), ["gpu1"])
    problems = _refusal(pd_spec(**small), dsv4_rollout_strategy="blue_green")
    assert any(p.startswith("prefill[0].tp_size (host gpu1): blue_green (the new release beside the serving one)")
               for p in problems), problems  # ... and so does the fit check, saying it is about both


def test_blue_green_refused_for_combined() -> None:
    problems = _refusal(combined_spec(), dsv4_rollout_strategy="blue_green")
    assert problems == ["dsv4_rollout_strategy: blue_green switches workers behind a router, and a combined "
                        "deployment has none; fix: use dsv4_rollout_strategy: recreate, or topology: pd"]


def test_bad_rollout_variables_are_named() -> None:
    problems = _refusal(pd_spec(), dsv4_rollout_strategy="blue-green", dsv4_rollout_keep_previous_s=-1)
    assert any(p.startswith("dsv4_rollout_strategy: ") and "recreate, blue_green, blue_green_hosts or rolling" in p
               for p in problems)
    assert any(p.startswith("dsv4_rollout_keep_previous_s: ") for p in problems), problems


def test_the_embedded_example_fits_and_the_default_inventory_does_not() -> None:
    """inventory/blue-green-local.yml: tp 2 per role, two releases on the simulated 8 GPUs."""
    cli = [sys.executable, "-m", "dsv4deploy.cli", "plan", "-i", str(REPO / "inventory" / "local")]
    ok = subprocess.run([*cli, "-e", f"@{REPO / 'inventory' / 'blue-green-local.yml'}"], capture_output=True,
                        text=True, cwd=REPO, timeout=120)
    assert ok.returncode == 0 and "rollout: blue_green: the new release fits beside" in ok.stdout, ok.stdout + ok.stderr
    refused = subprocess.run([*cli, "-e", "dsv4_rollout_strategy=blue_green"], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
    assert refused.returncode != 0 and "dsv4_rollout_blue_green_gpu_offset (host local)" in refused.stdout + \
        refused.stderr


def _multi_node_half(gpu2: dict[str, object] | None = None, **decode: object) -> object:
    """HALF with the decode over gpu1 (rank 0) and gpu2 (rank 1): tp 4, GPUs 2 and 3 on each node."""
    from fixture_specs import PD_COMMON, host_vars, load_spec

    data = {**PD_COMMON, "prefill": {**PD_COMMON["prefill"], **HALF["prefill"]},
            "decode": {**PD_COMMON["decode"], **HALF["decode"], "nodes": ["gpu1", "gpu2"], "tp_size": 4,
                       "dist_init_port": 5000, **decode}}
    return load_spec(data, {"gpu1": host_vars(**H200),
                            "gpu2": host_vars(ansible_host="10.0.0.12", **H200, **(gpu2 or {}))})


def test_blue_green_moves_a_multi_node_server_as_one_every_rank_beside_its_own() -> None:
    spec = _multi_node_half()
    settings = load_rollout({"dsv4_rollout_strategy": "blue_green"})
    rollout = rollout_plan(spec, settings)
    assert rollout["beside"]["decode[0]"] == {"host": "gpu1", "gpus": [6, 7], "port": 30102, "bootstrap_port": None,
                                              "dist_init_port": 5100}
    assert "Over 2 hosts: each gets the slot where it has workers (gpu1: prefill[0], decode[0]; gpu2: decode[0] " \
           "rank 1)" in rollout["why"], rollout["why"]
    # Every rank of the other slot: on its own node, the shifted GPUs and port, meeting at the shifted
    # dist_init_port on rank 0's host; the serving ranks keep theirs.
    slot = {s.name: s for s in build_services(beside_spec(spec, settings))}
    rank1 = next(s for s in slot.values() if s.rank0 is not None)
    assert (rank1.host, rank1.gpus, rank1.ports) == ("gpu2", [6, 7], [30102])
    assert rank1.install_root == "/opt/dsv4deploy/slot-b"
    assert rank1.argv[rank1.argv.index("--dist-init-addr") + 1] == "10.0.0.11:5100"
    assert slot[rank1.rank0].argv[slot[rank1.rank0].argv.index("--dist-init-addr") + 1] == "10.0.0.11:5100"
    serving = next(s for s in build_services(spec) if s.rank0 is not None)
    assert serving.argv[serving.argv.index("--dist-init-addr") + 1] == "10.0.0.11:5000"


def test_blue_green_judges_a_multi_node_server_on_every_node() -> None:
    # rank 1's node has 6 GPUs: the shifted 6 and 7 do not exist there.
    problems = _refusal(_multi_node_half(gpu2={"gpu_count": 6}), dsv4_rollout_strategy="blue_green")
    assert any(p.startswith("dsv4_rollout_blue_green_gpu_offset (host gpu2): ") and "gpu2 has 6 GPUs" in p
               for p in problems), problems
    # The shifted rendezvous port would land on the serving prefill's port.
    problems = _refusal(_multi_node_half(dist_init_port=29901), dsv4_rollout_strategy="blue_green")
    assert problems == ["dsv4_rollout_blue_green_port_offset (host gpu1): the new decode[0].dist_init_port would "
                        "listen on port 30001, which the serving prefill[0].port uses; fix: set "
                        "dsv4_rollout_blue_green_port_offset so no shifted port lands on another (now 100)"], problems


def test_rolling_surges_a_lone_multi_node_server_onto_gpus_spare_on_every_node() -> None:
    # gpu2 runs a second prefill on GPUs 4 and 5: the surge decode's ranks take 6 and 7 on both nodes.
    spec = _multi_node_half()
    data = spec.model_dump()
    data["prefill"].append({**data["prefill"][0], "host": "gpu2", "gpus": [4, 5], "port": 30003,
                            "bootstrap_port": 8999})
    spec = type(spec).model_validate(data)
    settings = load_rollout({"dsv4_rollout_strategy": "rolling"})
    rollout = rollout_plan(spec, settings)
    assert rollout["surge"] == {"decode[0]": {"host": "gpu1", "gpus": [6, 7], "port": 30102, "bootstrap_port": None,
                                              "dist_init_port": 5100}}
    # The multi-node recipe's own example has no spare GPUs on gpu1: refused by the surge fit, not by its nodes.
    from fixture_specs import multi_node_pd_spec

    problems = _refusal(multi_node_pd_spec(), dsv4_rollout_strategy="rolling")
    assert problems and all("no surge fits beside it" in p for p in problems), problems
    assert rollout_plan(multi_node_pd_spec(), load_rollout({}))["strategy"] == "recreate"


def test_every_strategy_the_settings_take_has_one_plan_in_the_contract() -> None:
    # The one place a strategy is chosen: a strategy the settings accept without a plan would fail at a deploy.
    assert set(typing.get_args(Strategy)) == set(STRATEGIES)
    # blue_green_hosts reads its pairing, and a second box to move to.
    second_box = {"gpu2": host_vars(ansible_host="10.0.0.12", gpu_memory_gib=141)}
    for name in STRATEGIES:
        spec = pd_spec(host=H200, **HALF)
        variables: dict[str, object] = {"dsv4_rollout_strategy": name}
        if name == "blue_green_hosts":
            spec = load_spec({**PD_COMMON, **HALF}, {"gpu1": host_vars(**H200), **second_box})
            variables["dsv4_rollout_blue_green_hosts"] = {"gpu1": "gpu2"}
        part = rollout_plan(spec, load_rollout(variables))
        assert part["strategy"] == name and part["why"].startswith(name), part


@pytest.mark.parametrize("strategy", ["blue_green", "rolling"])
def test_an_engine_is_refused_by_the_strategies_with_another_slot(strategy: str) -> None:
    spec = pd_spec(host=H200, **HALF).model_copy(update={"engine": EngineSpec(sglang="0.5.23", wheelhouse="/w")})
    assert _refusal(spec, dsv4_rollout_strategy=strategy) == [
        f"engine: is installed for the serving slot only, so the {strategy} strategy cannot run it yet; fix: deploy "
        "with -e dsv4_rollout_strategy=recreate, or unset engine"]
    assert rollout_plan(spec, load_rollout({}))["strategy"] == "recreate"


def test_a_bake_beside_a_previous_release_kept_warm_is_refused_naming_both_settings() -> None:
    # blue_green then serves the new release from the other slot; the bake reads the servers at home.
    kept = load_rollout({"dsv4_rollout_strategy": "blue_green", "dsv4_rollout_keep_previous_s": 300})
    [problem] = bake_problems(kept, 60)
    assert str(problem).startswith("dsv4_bake_s: 60 with dsv4_rollout_keep_previous_s 300: blue_green then serves")
    assert "fix: set dsv4_bake_s: 0" in str(problem)
    # No bake, no window, or another strategy (each bakes the release where the bake reads it): nothing to refuse.
    assert bake_problems(kept, 0) == []
    assert bake_problems(load_rollout({"dsv4_rollout_strategy": "blue_green"}), 60) == []
    assert bake_problems(load_rollout({"dsv4_rollout_strategy": "rolling", "dsv4_rollout_keep_previous_s": 300}),
                         60) == []
