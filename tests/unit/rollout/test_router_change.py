"""A new release that changes the production router's own settings is named by field (rollout/router_change.py)."""

from __future__ import annotations

import json

from dsv4deploy.report import render_markdown
from dsv4deploy.rollout.router_change import rotated_key_problems, router_change, router_changes

ROUTER = {"host": "h1", "port": 8000, "policy": None, "retry": {"enabled": True, "max_retries": 3}}


def _serving(**extra: object) -> str:
    return json.dumps({"host": "h1", "deployment": {"router": ROUTER, "router_implementation": "sglang-router",
                                                    **extra}})


def test_the_changed_router_fields_are_named_and_others_ignored() -> None:
    new = {"router": {**ROUTER, "policy": "round_robin", "retry": {"enabled": True, "max_retries": 5}},
           "router_implementation": "smg", "prefill": [{"gpus": [9]}],
           "server_env_extra_by_role": {"router": {"X": "1"}, "decode": {"Y": "2"}}}
    assert router_changes(json.loads(_serving())["deployment"], new) == [
        "router.policy", "router.retry", "router_implementation", "server_env_extra_by_role.router"]
    change = router_change(_serving(), new)
    assert change["fields"][0] == "router.policy" and "short outage" in change["line"]


def test_no_change_no_serving_release_or_no_router_is_no_outage() -> None:
    same = {"router": dict(ROUTER), "router_implementation": "sglang-router", "server_env_extra": {"A": "1"}}
    assert router_change(_serving(), same) == {}
    # spec.json leaves unset fields out: missing and empty are the same.
    assert router_change(_serving(server_env_extra_by_role={}), same) == {}
    assert router_change("", same) == {}
    assert router_change(json.dumps({"deployment": {"topology": "combined"}}), same) == {}


def test_a_rotated_api_key_is_refused_where_the_router_keeps_serving_with_the_old_one() -> None:
    # blue_green and rolling register the new workers through the running router's API, with the new key: 401.
    assert rotated_key_problems("recreate", ["gpu1"]) == []
    assert rotated_key_problems("blue_green", []) == []
    (problem,) = rotated_key_problems("blue_green", ["gpu1", "gpu2"])
    assert str(problem).startswith("api_key: the API key changed on gpu1, gpu2, and blue_green switches")
    assert "-e dsv4_rollout_strategy=recreate" in problem.fix


def test_the_report_shows_the_router_replacement_and_the_clients_figures() -> None:
    data = {"release": "r2", "verdict": "promoted", "gates": [],
            "rollout": {"strategy": "blue_green", "why": "",
                        "router_change": router_change(_serving(), {"router": {**ROUTER, "port": 8001},
                                                                   "router_implementation": "sglang-router"})},
            "downtime": {"sent": 40, "failed": 3, "longest_gap_s": 1.5, "seconds": 20.0, "endpoint": "http://r:8000",
                         "failures": ["0: ConnectError: refused"]}}
    md = render_markdown(data)
    assert "| production router replaced | the production router's own settings change (router.port)" in md
    assert ("| what clients saw (continuous client on http://r:8000) | sent 40, failed 3, longest gap between "
            "answers 1.50 s over 20.0 s |") in md
    assert "- 0: ConnectError: refused" in md
    unmeasured = render_markdown({**data, "downtime": None})
    assert "| what clients saw | not measured (dsv4_rollout_measure_downtime) |" in unmeasured
