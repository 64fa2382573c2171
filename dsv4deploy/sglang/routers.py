"""The PD routers the tool can run: sglang-router and its successor, the Shepherd Model Gateway (smg).

Each has its own launcher, Python environment and flag table. Every flag here was read from the
wheel's own `router_args.py` (sglang-router 0.3.2, smg 1.13.0) and is checked with its real parser by
tests/contract. The two spell the settings we render the same way; what differs is what else they
accept (smg drops `--mini-lb`) and how they behave at shutdown.

Both stop taking new connections on SIGTERM and let in-flight requests finish within
`--shutdown-grace-period-secs` before exiting (seen on both wheels): that is what a switchover's
drain relies on. smg also answers `/readiness` 503 `{"reason": "draining"}` for a few seconds first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

RouterName = Literal["sglang-router", "smg"]

# Logical router setting -> flag, as both wheels spell it.
COMMON_ROUTER_FLAGS: Mapping[str, str] = {
    "pd_disaggregation": "--pd-disaggregation",
    "prefill": "--prefill",
    "decode": "--decode",
    "host": "--host",
    "port": "--port",
    "policy": "--policy",
    "prefill_policy": "--prefill-policy",
    "decode_policy": "--decode-policy",
    "retry_max_retries": "--retry-max-retries",
    "retry_initial_backoff_ms": "--retry-initial-backoff-ms",
    "retry_max_backoff_ms": "--retry-max-backoff-ms",
    "disable_retries": "--disable-retries",
    "cb_failure_threshold": "--cb-failure-threshold",
    "cb_timeout_duration_secs": "--cb-timeout-duration-secs",
    "disable_circuit_breaker": "--disable-circuit-breaker",
    "health_check_endpoint": "--health-check-endpoint",
    "health_check_interval_secs": "--health-check-interval-secs",
    "health_failure_threshold": "--health-failure-threshold",
    "health_check_timeout_secs": "--health-check-timeout-secs",
    "worker_startup_timeout_secs": "--worker-startup-timeout-secs",
    "worker_startup_check_interval": "--worker-startup-check-interval",
    "shutdown_grace_period_secs": "--shutdown-grace-period-secs",
    "prometheus_port": "--prometheus-port",
    "prometheus_host": "--prometheus-host",
    "api_key": "--api-key",
}


@dataclass(frozen=True)
class RouterImplementation:
    """One router: how it is launched, which flags it takes, how it behaves."""

    name: RouterName
    # The PyPI package and the version the flag table was read from.
    package: str
    version: str
    # The default launcher (a spec's router_launcher replaces it), without flags.
    launcher: tuple[str, ...]
    # Flags this router refuses (never rendered; refused in router.extra_args).
    forbidden: tuple[str, ...] = ()
    flags: Mapping[str, str] = field(default_factory=lambda: dict(COMMON_ROUTER_FLAGS))
    # Metrics port when --prometheus-port is not given (it then listens on 0.0.0.0).
    default_prometheus_port: int = 29000
    # Its worker API (plugins/module_utils/router_workers.py api_for, by version): uuid (sglang-router >= 0.3,
    # smg), url (0.2.2-0.2.x) or legacy (<= 0.2.1, which cannot add PD workers at run time).
    worker_api: Literal["uuid", "url", "legacy"] = "uuid"
    # The choices of --policy (and --decode-policy); --prefill-policy also takes PREFILL_ONLY_POLICIES.
    policies: tuple[str, ...] = ()

    def flag(self, setting: str) -> str:
        """The flag for a logical setting (KeyError for one this router does not take)."""
        return self.flags[setting]

    @property
    def takes_workers_at_run_time(self) -> bool:
        """Whether PD workers can be added to it while it runs (so it can start before they are ready)."""
        return self.worker_api != "legacy"

    @property
    def title(self) -> str:
        """Name and version, as shown in unit descriptions and reports."""
        return f"{self.name} {self.version}"


# Read from each router's own parser (RouterArgs.add_cli_args: the choices of --policy).
_SGLANG_ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
_SMG_POLICIES = (*_SGLANG_ROUTER_POLICIES, "passthrough", "least_load", "consistent_hashing", "prefix_hash")
PREFILL_ONLY_POLICIES = ("bucket",)

IMPLEMENTATIONS: Mapping[str, RouterImplementation] = {
    # sglang's own PD docs still launch this one, so it stays the default.
    "sglang-router": RouterImplementation(
        "sglang-router", "sglang-router", "0.3.2", ("python3", "-m", "sglang_router.launch_router"),
        policies=_SGLANG_ROUTER_POLICIES),
    # Its successor; the 0.3.2 wheel also installs an `smg` command, so it needs its own environment.
    "smg": RouterImplementation(
        "smg", "smg", "1.13.0", ("python3", "-m", "smg.launch_router"), forbidden=("--mini-lb",),
        policies=_SMG_POLICIES),
}
DEFAULT_ROUTER: RouterName = "sglang-router"


def implementation(name: str) -> RouterImplementation:
    """The router called `name`; KeyError names the ones we know."""
    try:
        return IMPLEMENTATIONS[name]
    except KeyError:
        raise KeyError(f"unknown router implementation {name!r}; known: {', '.join(IMPLEMENTATIONS)}") from None


def rendered_flags() -> tuple[str, ...]:
    """Every flag the tool renders for some router (extra_args must not repeat them)."""
    return tuple(sorted({f for impl in IMPLEMENTATIONS.values() for f in impl.flags.values()}))
