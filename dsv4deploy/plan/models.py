"""The plan's types: what the playbooks carry between tasks, checked when it is made.

`Plan` is what `dsv4deploy.plan.make_plan` returns (as JSON-able data, for Ansible); `HostPlan` is a
host's part of it; `GateTargets` is the part the gates read, and all they are given. A plan that
does not fit these types is a bug here, caught before any host is touched. The JSON schema of
`Plan` is kept as a snapshot (tests/golden/plan-schema.json): a change to the plan's shape shows
in review.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Worker(_Strict):
    """A worker the gates check: its URL, where its host is reached, its key file, its sglang version, its
    bootstrap port (a prefill)."""

    name: str
    role: Literal["prefill", "decode", "combined"]
    host: str
    url: str
    host_address: str
    api_key_file: str | None
    sglang_version: str | None
    # A prefill's bootstrap port (the router hands it to decode; the readiness wait registers it so).
    bootstrap_port: int | None = None


class GateTargets(_Strict):
    """What the gates talk to: endpoint, router, workers and the overrides each must show."""

    topology: Literal["pd", "combined"]
    router: Literal["sglang-router", "smg"] | None
    served_model_name: str
    # Whether smoke also wants the answer to say OK (the model profile's smoke_expects_ok).
    smoke_expects_ok: bool = True
    # The model profile's reference task scores ({task: {score, source}}), which the accuracy gate judges by.
    reference_scores: dict[str, dict[str, Any]] = {}
    endpoint: str
    router_url: str | None
    # The router's Prometheus listener, as the controller reaches it (the bake reads its error counters).
    router_metrics_url: str | None = None
    router_breaker_s: int | None
    endpoint_host: str
    router_service: str | None
    # Whether the router takes PD workers at run time (its worker API): then it is started with its workers
    # and the readiness wait registers each as it answers /health, instead of starting it once all do.
    router_takes_workers: bool = False
    workers: list[Worker]
    expected_overrides: dict[str, dict[str, Any]]
    expected_settings: dict[str, dict[str, Any]]
    hosts_in_use: list[str]
    gpu_query_command: list[str]
    # The model profile's start-up window and fatal log lines (profiles.yml): the readiness gate's default
    # deadline (a gate setting readiness_deadline_s wins), and the lines that fail it at once.
    readiness_deadline_s: float | None = None
    fatal_log_patterns: list[str] = []
    # Ranks >= 1 of multi-node servers (name, host, rank0, rank0_url): not gated themselves (a dummy /health);
    # the readiness wait on their host watches them until their rank 0 answers.
    ranks: list[dict[str, Any]] = []
    # PD workers whose spec names a transport (rdma, tcp): the config gate reads mooncake's choice in their logs.
    expected_transports: dict[str, str] = {}


class HostPlan(_Strict):
    """One play host's part: its files, services, GPUs, ports, install root and what preflight checks."""

    files: dict[str, str]
    content_hash: str
    services: list[str]
    gpus: list[int]
    ports: list[int]
    # Port (as text) -> the address its server binds; ports not named count as bound to every address.
    port_addresses: dict[str, str] = {}
    install_root: str
    service_manager: Literal["systemd", "supervisor"]
    service_user: str
    access: list[dict[str, Any]]
    # The rendered command lines preflight parses with the host's own parsers (dsv4deploy.plan.host_parsers).
    parsers: list[dict[str, Any]] = []
    # The engine this host's release installs and runs (dsv4deploy.spec.engine.record); {} without `engine:`.
    engine: dict[str, Any] = {}
    # The cross-host paths preflight proves (dsv4_reach): {listen: [{address, port}], connect: [Path, ...]}.
    reach: dict[str, list[dict[str, Any]]] = {}


class RolloutPlan(_Strict):
    """How the release replaces the serving one (dsv4deploy.rollout.strategy): the strategy and why it applies."""

    strategy: Literal["recreate", "blue_green", "blue_green_hosts", "rolling"] = "recreate"
    why: str = "recreate (the default)"
    keep_previous_s: int = 0
    # blue_green: where each worker of the other slot runs (field path -> host, gpus, port, bootstrap_port).
    beside: dict[str, dict[str, Any]] = {}
    # blue_green_hosts: {serving host: other host}, the way back (the next deploy's pairing), and where each
    # worker runs on the other hosts (field path -> host, nodes).
    pairs: dict[str, str] = {}
    back: dict[str, str] = {}
    other: dict[str, dict[str, Any]] = {}
    # ... and which way this deploy goes (serving host -> new host), the hosts serving now.
    going: dict[str, str] = {}
    serving: list[str] = []
    preview_router_port: int | None = None
    port_offset: int | None = None
    # rolling: workers of each role out of the router at once, and the steps (dsv4deploy.rollout.rolling.RollStep).
    max_unavailable: int | None = None
    steps: list[dict[str, Any]] = []
    # rolling by surge: where each lone worker's new one starts beside it (path -> host, gpus, port, bootstrap_port).
    surge: dict[str, dict[str, Any]] = {}
    # blue_green, rolling: the production router's own changed settings, {fields, line} (a short outage;
    # dsv4deploy.rollout.router_change, filled in by the playbook from the serving release's spec.json).
    router_change: dict[str, Any] = {}


class Plan(GateTargets):
    """The whole plan of one deploy: its release id, the gate targets, every play host's part."""

    release_id: str
    hosts: dict[str, HostPlan]
    memory: list[dict[str, Any]]
    spec: dict[str, Any]
    rollout: RolloutPlan = RolloutPlan()


GATE_TARGET_KEYS = tuple(GateTargets.model_fields)


def gate_targets_of(plan: dict[str, Any]) -> dict[str, Any]:
    """Only the gate targets of a plan (or of an installed release's view): no host's files, no spec."""
    return GateTargets.model_validate({k: plan[k] for k in GATE_TARGET_KEYS if k in plan}).model_dump(mode="json")
