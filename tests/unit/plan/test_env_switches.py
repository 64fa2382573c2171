"""Env switches for an experiment: added on top of the inventory's, never replacing it.

`server_env_extra` (every server) and `server_env_extra_by_role` (prefill, decode, combined, router) win
over server_env and each worker's env; `plan` lists them; an `-e server_env` that would drop the
inventory's switches is refused, naming them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsv4deploy import cli
from dsv4deploy.plan import env_switches, make_plan
from dsv4deploy.plan.services import build_services
from dsv4deploy.spec import SpecError, secret_env
from tests.golden.fixture_specs import pd_spec

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "inventory" / "examples" / "pd-single-host"


def env_of(spec, role: str) -> dict[str, str]:
    return next(s.env for s in build_services(spec) if s.role == role)


def test_extra_switches_are_added_on_top_of_server_env_and_the_workers_env() -> None:
    spec = pd_spec(server_env_extra={"SGLANG_DSV4_BF16_INDEX_K": "1", "SGLANG_NEW": 1},
                   server_env_extra_by_role={"decode": {"SGLANG_DECODE_ONLY": "yes"}, "router": {"RUST_LOG": "debug"}})
    prefill, decode, router = env_of(spec, "prefill"), env_of(spec, "decode"), env_of(spec, "router")
    # the inventory's switches stay; the experiment's are added and win
    assert prefill["SGLANG_SM120_MMA_FLASHMLA"] == "1" and prefill["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"] == "600"
    assert prefill["SGLANG_DSV4_BF16_INDEX_K"] == "1" and prefill["SGLANG_NEW"] == "1"
    assert "SGLANG_DECODE_ONLY" not in prefill and decode["SGLANG_DECODE_ONLY"] == "yes"
    assert router == {"RUST_LOG": "debug"}  # server_env_extra is for the servers; by role reaches the router


def test_the_gpu_list_still_wins_over_every_switch() -> None:
    spec = pd_spec(server_env_extra={"CUDA_VISIBLE_DEVICES": "0"})
    assert env_of(spec, "decode")["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"


@pytest.mark.parametrize(("extra", "line"), [
    ({"server_env_extra": {"BAD-NAME": "1"}},
     "server_env_extra: 'BAD-NAME' is not a valid environment variable name"),
    ({"server_env_extra_by_role": {"decode": {"1X": "1"}}},
     "server_env_extra_by_role.decode: '1X' is not a valid environment variable name"),
    ({"server_env_extra_by_role": {"docode": {"X": "1"}}},
     "server_env_extra_by_role.docode: Input should be 'prefill', 'decode', 'combined' or 'router'"),
    ({"server_env_extra": ["X=1"]}, "server_env_extra: Input should be a valid dictionary"),
])
def test_bad_switches_are_refused_naming_the_field(extra: dict, line: str) -> None:
    with pytest.raises(SpecError) as err:
        pd_spec(**extra)
    assert any(str(p).startswith(line) for p in err.value.problems), err.value


@pytest.fixture
def site(tmp_path: Path) -> str:
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest)
    return str(dest)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_shows_the_added_switches(capsys, site: str) -> None:
    extra = json.dumps({"server_env_extra": {"SGLANG_DSV4_BF16_INDEX_K": "1"},
                        "server_env_extra_by_role": {"decode": {"SGLANG_X": "2"}}})
    code, out, _ = run(capsys, "plan", "-i", site, "-e", extra)
    assert code == 0
    assert ("env switches added on top of the inventory's (server_env_extra, server_env_extra_by_role):\n"
            "  all servers: SGLANG_DSV4_BF16_INDEX_K=1\n  decode: SGLANG_X=2\n") in out
    code, out, _ = run(capsys, "plan", "--json", "-i", site, "-e", extra)
    assert json.loads(out)["env_switches"] == {"all servers": {"SGLANG_DSV4_BF16_INDEX_K": "1"},
                                               "decode": {"SGLANG_X": "2"}}
    # and the plan the playbooks carry has them in its spec, which the report reads
    planned = make_plan(pd_spec(server_env_extra={"A": "1", "HF_TOKEN": "hf_x"}), ["gpu1"])["spec"]
    assert env_switches(planned) == {"all servers": {"A": "1", "HF_TOKEN": secret_env.redacted("hf_x")}}


def test_an_extra_var_server_env_that_drops_the_inventorys_switches_is_refused(capsys, site: str) -> None:
    code, _, err = run(capsys, "validate", "-i", site, "-e", '{"server_env": {"SGLANG_DSV4_BF16_INDEX_K": "1"}}')
    assert code == 2
    assert (f"server_env: -e server_env replaces the inventory's server_env (set in {site}/group_vars/all/"
            "deployment.yml) and would drop SGLANG_SM120_MMA_FLASHMLA, SGLANG_SM120_TRITON_INDEXER; fix: add "
            "switches on top of the inventory's with server_env_extra (all servers) or server_env_extra_by_role, "
            "e.g. -e '{\"server_env_extra\": {\"NAME\": \"1\"}}'; to drop a switch, remove it from the inventory"
            ) in err
    # keeping every switch (changing a value, adding one) is allowed, and so is the documented way
    keep = {"SGLANG_SM120_MMA_FLASHMLA": "0", "SGLANG_SM120_TRITON_INDEXER": "1", "NEW": "1"}
    assert run(capsys, "validate", "-i", site, "-e", json.dumps({"server_env": keep}))[0] == 0
    assert run(capsys, "validate", "-i", site, "-e", '{"server_env_extra": {"SGLANG_DSV4_BF16_INDEX_K": "1"}}')[0] == 0
