"""The strategy contract: how a release replaces the serving one (`dsv4_rollout_strategy`), chosen in one place.

- ``recreate`` (the default): the serving release stops, then the new one starts and is gated. An outage
  of the load time plus the gates.
- ``blue_green`` (`blue_green`): the new release starts beside the serving one, is gated behind a preview
  router, and the production router switches workers to it.
- ``blue_green_hosts`` (`other_hosts`): as blue_green, but the new release starts on another set of hosts
  (`dsv4_rollout_blue_green_hosts`, {serving host: other host}) on the spec's own GPUs and ports; the next
  deploy goes back the other way.
- ``rolling`` (`rolling_strategy`, the steps in `rolling`): xPyD over hosts, a few workers of each role at a
  time, prefill and decode in step.

Each strategy module gives its part of the plan's ``rollout`` with ``plan(spec, settings)`` and refuses, with
SpecError, a deployment it cannot roll out without an outage; the settings are `settings`', the pieces
blue_green and a roll's surge share `slot`'s. The Ansible side mirrors it: one role per strategy
(roles/dsv4_blue_green, roles/dsv4_rolling; recreate in roles/dsv4_rollout), dispatched by dsv4_rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsv4deploy.rollout import blue_green, other_hosts, rolling_strategy
from dsv4deploy.rollout.settings import RolloutSettings
from dsv4deploy.spec import Deployment, Problem, SpecError


def _recreate(spec: Deployment, settings: RolloutSettings) -> dict[str, Any]:
    """recreate's part: nothing to fit, an outage to name."""
    return {"why": "recreate (the default): the serving release stops before the new one starts; "
                   "clients see an outage of the load time and the gates"}


STRATEGIES: dict[str, Callable[[Deployment, RolloutSettings], dict[str, Any]]] = {
    "recreate": _recreate,
    "blue_green": blue_green.plan,
    "blue_green_hosts": other_hosts.plan,
    "rolling": rolling_strategy.plan,
}


def rollout_plan(spec: Deployment, settings: RolloutSettings) -> dict[str, Any]:
    """The plan's `rollout` part: the strategy that applies and why; SpecError when the strategy cannot roll
    this deployment out without an outage (blue_green does not fit, a roll would leave the router without a
    worker of a role)."""
    if spec.engine is not None and settings.strategy != "recreate":
        # The other slot's release would run a venv under its own install root, which preflight does not build.
        raise SpecError([Problem(field="engine", message=f"is installed for the serving slot only, so the "
                                                         f"{settings.strategy} strategy cannot run it yet",
                                 fix="deploy with -e dsv4_rollout_strategy=recreate, or unset engine")])
    base = {"strategy": settings.strategy, "keep_previous_s": settings.keep_previous_s}
    return {**base, **STRATEGIES[settings.strategy](spec, settings)}
