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

Strategy = Literal["recreate", "blue_green", "blue_green_hosts", "rolling"]
VARS = {
    "strategy": "dsv4_rollout_strategy",
    "gpu_offset": "dsv4_rollout_blue_green_gpu_offset",
    "port_offset": "dsv4_rollout_blue_green_port_offset",
    "keep_previous_s": "dsv4_rollout_keep_previous_s",
    "max_unavailable": MAX_UNAVAILABLE_VAR,
    "hosts": "dsv4_rollout_blue_green_hosts",
}
# The strategies that never read the host pairing: naming it for them is a mistake, not a choice. recreate may
# meet one (an operator's -e dsv4_rollout_strategy=recreate over an inventory that pairs its hosts).
IGNORES_HOSTS = ("blue_green", "rolling")


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
    # blue_green_hosts: {serving host: other host}, the host each serving host's workers move to.
    hosts: dict[Annotated[str, Field(min_length=1)], Annotated[str, Field(min_length=1)]] = Field(
        default_factory=dict)


def load_rollout(variables: Mapping[str, Any]) -> RolloutSettings:
    """The rollout settings from Ansible variables; SpecError names each bad variable."""
    data = {key: variables[var] for key, var in VARS.items() if variables.get(var) is not None}
    try:
        settings = RolloutSettings.model_validate(data)
    except ValidationError as exc:
        raise SpecError([Problem(field=VARS.get(str(err["loc"][0]), str(err["loc"][0])),
                                 message=f"{err['msg']} (got {err.get('input')!r})",
                                 fix=_fix_for(str(err["loc"][0])))
                         for err in exc.errors()]) from None
    problems = hosts_problems(settings)
    if problems:
        raise SpecError(problems)
    return settings


def hosts_problems(settings: RolloutSettings) -> list[Problem]:
    """Why the host pairing cannot be what the strategy reads (the inventory's side is the strategy's check)."""
    var = VARS["hosts"]
    if settings.strategy == "blue_green_hosts" and not settings.hosts:
        return [Problem(field=var, message="is not set, and blue_green_hosts starts the new release on the other "
                                           "host named for each host a serving worker runs on",
                        fix=f"set {var} to {{serving host: other host}}, e.g. {{prefill1: prefill2, decode1: "
                            "decode2}")]
    if settings.strategy in IGNORES_HOSTS and settings.hosts:
        return [Problem(field=var, message=f"is set, but dsv4_rollout_strategy {settings.strategy} starts the new "
                                           "release on the serving hosts and never reads it",
                        fix=f"set dsv4_rollout_strategy: blue_green_hosts to start it on the hosts {var} names, "
                            "or remove it")]
    return [Problem(field=f"{var}.{host}", host=host, message="names the host itself as its other host",
                    fix="name a host the serving release does not use")
            for host, other in sorted(settings.hosts.items()) if host == other]


def _fix_for(key: str) -> str:
    return {"strategy": "set dsv4_rollout_strategy to recreate, blue_green, blue_green_hosts or rolling",
            "hosts": f"set {VARS['hosts']} to {{serving host: other host}}, each a host name of the inventory"}.get(
        key, f"set {VARS.get(key, key)} to a whole number of at least 1")


def bake_problems(settings: RolloutSettings, bake_s: float) -> list[Problem]:
    """Why the bake cannot judge what serves after this strategy's switch: blue_green keeping the previous release
    warm serves the new one from the other slot, while the bake reads the servers at home (the warm previous
    release's), so it would judge the wrong release."""
    if settings.strategy == "blue_green" and settings.keep_previous_s > 0 and bake_s > 0:
        return [Problem(field="dsv4_bake_s", message=f"{bake_s:g} with dsv4_rollout_keep_previous_s "
                        f"{settings.keep_previous_s}: blue_green then serves the new release from the other slot "
                        "while the bake would read the servers at home, the previous release kept warm",
                        fix="set dsv4_bake_s: 0 (the keep window is the way back), or "
                            "dsv4_rollout_keep_previous_s: 0 to bake the new release at home")]
    return []
