"""The simulator beside the real sglang 0.5.23: the same requests to both, each deployed by the tool.

Compared: the status codes of every path during warm-up and once up, the fields of /server_info,
/model_info and /v1/models, the start-log lines the gates read, and the error bodies of bad requests.
The models differ (the simulator plays DeepSeek-V4, the real server a tiny Llama), so values that are
the model's are not compared; what a client or a gate can rely on is. Each difference found was fixed
in the simulator (or in the code), and the test keeps it fixed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest
import yaml

from dsv4deploy.gates.config import AGREEMENT_KEYS, parse_logged_overrides
from tests.integration.simhost import SimHost, make_sim_host
from tests.real_engine.sidebyside import BAD_REQUESTS, FIRST_DEPLOY_GATES, PATHS, observe, shape, warm_up_statuses

pytestmark = pytest.mark.real_engine

# What the gates and the report read from /server_info.
READ_BY_THE_TOOL = ("json_model_override_args", "version", *AGREEMENT_KEYS, "served_model_name",
                    "disaggregation_mode", "tp_size", "mem_fraction_static", "port")
# The start-log lines the config gate and an operator read.
LOG_LINES = ("server_args={", "Load weight end.", "KV Cache is allocated.", "max_total_num_tokens=",
             "Uvicorn running on http://", "The server is fired up and ready to roll!")


@pytest.fixture(scope="module")
def sides(combined_first_deploy: tuple[SimHost, dict], tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, dict]]:
    """{"sim": ..., "real": ...}: the same observations of both, each deployed by the tool (the real side is
    the tier's first combined deploy, with the same gates as the simulator's here)."""
    root = tmp_path_factory.mktemp("side-sim")
    sim = make_sim_host(root)
    try:
        # A simulated warm-up of some seconds, so the poller sees it as it sees the real one.
        sim_env = yaml.safe_load((sim.inventory / "group_vars" / "all" / "sim.yml").read_text())["server_env"]
        yield {"sim": observe(sim, "deepseek-v4-flash", "-e", "topology=combined", *FIRST_DEPLOY_GATES, "-e",
                              json.dumps({"server_env": {**sim_env, "DSV4_SIM_STARTUP_S": "8"}})),
               "real": combined_first_deploy[1]}
    finally:
        sim.teardown()
        shutil.rmtree(root, ignore_errors=True)


def test_status_codes_during_warm_up_and_once_up(sides: dict[str, dict]) -> None:
    for path in PATHS:
        sim, real = sides["sim"], sides["real"]
        assert warm_up_statuses(sim["seen"][path]) == warm_up_statuses(real["seen"][path]), (
            path, sim["seen"][path], real["seen"][path])
        assert sim["up"][path][0] == real["up"][path][0] == 200, (path, sim["up"][path], real["up"][path])


def test_server_info_fields(sides: dict[str, dict]) -> None:
    sim, real = sides["sim"]["up"]["/server_info"][1], sides["real"]["up"]["/server_info"][1]
    invented = sorted(set(sim) - set(real))
    assert not invented, f"the simulator reports fields the real server does not: {invented}"
    for key in READ_BY_THE_TOOL:
        assert key in sim and key in real, key
        assert type(sim[key]) is type(real[key]) or None in (sim[key], real[key]), (key, sim[key], real[key])


def test_model_info_and_models_fields(sides: dict[str, dict]) -> None:
    for path in ("/model_info", "/v1/models"):
        sim, real = sides["sim"]["up"][path][1], sides["real"]["up"][path][1]
        assert sorted(shape(sim)) == sorted(shape(real)), (path, sim, real)
    sim_models, real_models = sides["sim"]["up"]["/v1/models"][1], sides["real"]["up"]["/v1/models"][1]
    assert shape(sim_models["data"][0]) == shape(real_models["data"][0]), (sim_models, real_models)


def test_start_log_lines_the_gates_read(sides: dict[str, dict]) -> None:
    for side in ("sim", "real"):
        log = sides[side]["log"]
        missing = [line for line in LOG_LINES if line not in log]
        assert not missing, (side, missing)
    assert parse_logged_overrides(sides["sim"]["log"]) and parse_logged_overrides(sides["real"]["log"])
    real_override = json.loads(parse_logged_overrides(sides["real"]["log"])[-1])
    assert real_override == {"rope_theta": 20000.0}


def test_error_bodies_of_bad_requests(sides: dict[str, dict]) -> None:
    for name, *_ in BAD_REQUESTS:
        (sim_status, sim_body), (real_status, real_body) = sides["sim"]["up"][name], sides["real"]["up"][name]
        assert sim_status == real_status, (name, sim_status, sim_body, real_status, real_body)
        assert shape(sim_body) == shape(real_body), (name, sim_body, real_body)
        if isinstance(real_body, dict) and "type" in real_body:
            assert sim_body["type"] == real_body["type"], (name, sim_body, real_body)


def test_the_gates_verdicts_on_the_same_prompts(sides: dict[str, dict]) -> None:
    # Both sides answer the needle gate's prompts (the same seed, grid and trials; each server's own token count
    # sizes them) and the parity gate's fixed set: the real server with the hand-built test model, which recalls
    # by construction, the simulator with its own recall. Every gate's verdict must be the same on both.
    verdicts = {side: [(g["name"], g["status"]) for g in sides[side]["report"]["gates"]] for side in ("sim", "real")}
    assert verdicts["sim"] == verdicts["real"], verdicts
    needle = {side: next(g for g in sides[side]["report"]["gates"] if g["name"] == "needle")
              for side in ("sim", "real")}
    cells = {side: [(c["context_tokens"], c["depth"], c["outcome"], c["sized"]) for c in g["evidence"]["cells"]]
             for side, g in needle.items()}
    assert cells["sim"] == cells["real"], cells
