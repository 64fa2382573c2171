"""Verification gates run on the controller against live sglang servers and the router.

Each gate returns a :class:`GateResult`; none raises for a failing server. Bad arguments raise
ValueError. The order of a deploy: readiness, config, smoke, needle, soak, perf.
"""

from dsv4deploy.gates.config import ServerConfigInput, check_config, parse_logged_overrides
from dsv4deploy.gates.haystack import Haystack, build_haystack
from dsv4deploy.gates.needle import NeedleCell, recall_curve, run_needle
from dsv4deploy.gates.readiness import WorkerEndpoint, check_readiness
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, skipped
from dsv4deploy.gates.smoke import run_smoke
from dsv4deploy.gates.soak import SoakDesign, run_soak

__all__ = [
    "GateResult",
    "GateStatus",
    "Haystack",
    "NeedleCell",
    "Progress",
    "ServerConfigInput",
    "SoakDesign",
    "WorkerEndpoint",
    "build_haystack",
    "check_config",
    "check_readiness",
    "parse_logged_overrides",
    "recall_curve",
    "run_needle",
    "run_smoke",
    "run_soak",
    "skipped",
]
