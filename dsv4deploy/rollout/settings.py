"""The rollout's own inputs (the `dsv4_rollout_*` variables): which strategy replaces the serving release and how.

They are playbook inputs (role ``dsv4_rollout``), not part of the deployment spec: they choose how a release is
rolled out, not what it is, so they never change a release's files or its id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from dsv4deploy.rollout.rolling import MAX_UNAVAILABLE_VAR
from dsv4deploy.spec import Problem, SpecError, StrictModel

Strategy = Literal["recreate", "blue_green", "rolling"]
VARS = {
    "strategy": "dsv4_rollout_strategy",
    "gpu_offset": "dsv4_rollout_blue_green_gpu_offset",
    "port_offset": "dsv4_rollout_blue_green_port_offset",
    "keep_previous_s": "dsv4_rollout_keep_previous_s",
    "max_unavailable": MAX_UNAVAILABLE_VAR,
}


class RolloutSettings(StrictModel):
    """The rollout's own inputs (the `dsv4_rollout_*` variables)."""

    strategy: Strategy = "recreate"
    # Unset: half the host's GPUs (4 on 8), so tp 2 per role on 8 GPUs fits twice.
    gpu_offset: Annotated[int, Field(ge=1)] | None = None
    port_offset: Annotated[int, Field(ge=1)] = 100
    # How long the previous release's servers stay warm after a blue_green switch (a rollback then is a
    # switch back); after that the next run stops them and a rollback is a recreate. 0: stopped at once.
    keep_previous_s: Annotated[int, Field(ge=0)] = 0
    # rolling: how many workers of each role are out of the production router at once.
    max_unavailable: Annotated[int, Field(ge=1)] = 1


def load_rollout(variables: Mapping[str, Any]) -> RolloutSettings:
    """The rollout settings from Ansible variables; SpecError names each bad variable."""
    data = {key: variables[var] for key, var in VARS.items() if variables.get(var) is not None}
    try:
        return RolloutSettings.model_validate(data)
    except ValidationError as exc:
        raise SpecError([Problem(field=VARS.get(str(err["loc"][0]), str(err["loc"][0])),
                                 message=f"{err['msg']} (got {err.get('input')!r})",
                                 fix=_fix_for(str(err["loc"][0])))
                         for err in exc.errors()]) from None


def _fix_for(key: str) -> str:
    return {"strategy": "set dsv4_rollout_strategy to recreate, blue_green or rolling"}.get(
        key, f"set {VARS.get(key, key)} to a whole number of at least 1")
