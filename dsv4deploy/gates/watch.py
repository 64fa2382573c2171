"""Continuous verification: the bake's light probes against what serves, on a timer, written as
node_exporter textfile-collector metrics that a standard Prometheus scrapes without glue.

One run (``--once``, what a systemd timer's service runs) or a run every N seconds (``--every N``, a
supervisord program) reads its settings from a JSON file (:class:`WatchConfig`), runs the canary needle
and the tool-call probe through the client-facing endpoint, and writes, atomically (prometheus_client's
``write_to_textfile``: a temporary file beside it, then a rename), ``<textfile_dir>/dsv4deploy-<deployment>.prom``:

- ``dsv4deploy_gate_passed{deployment, gate}``: 1 or 0 for ``canary_needle`` and ``tool_calls``,
- ``dsv4deploy_release_info{deployment, release}``: 1, the release the install root's ``current`` names,
- ``dsv4deploy_last_verification_timestamp_seconds{deployment}``: when this run ended,
- ``dsv4deploy_corruption_rate{deployment}``: the tool-call probe's share of corrupted sessions,
- ``dsv4deploy_verification_seconds{deployment}``: how long the probes took.

With ``canary_questions`` or ``canary_prompts`` (opt-in) it also runs the quality canaries
(:mod:`dsv4deploy.gates.canary`): the accuracy canary against ``accuracy_expected`` minus ``accuracy_margin``, the
parity canary against the active release's own parity record in the install root's ``state.json`` (what its
deploy's parity gate recorded). Each that ran adds ``dsv4deploy_gate_passed{gate="accuracy_canary"}`` or
``{gate="parity_canary"}`` (0 when it failed or could not measure; an inconclusive one is not a failure); a
failed one fails the verification (exit 1 with ``--once``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from pydantic import BaseModel, ConfigDict, Field

from dsv4deploy.gates.bake import Analysis, Phase, run_probes
from dsv4deploy.gates.canary import CanaryPlan, canary_analyses
from dsv4deploy.gates.parity import PROMPT_COUNT
from dsv4deploy.gates.result import GateResult


class WatchConfig(BaseModel):
    """What the timer verifies and where it writes (the file the dsv4_verify_timer role renders)."""

    model_config = ConfigDict(extra="forbid")

    deployment: str = Field(min_length=1)
    endpoint: str = Field(min_length=1)
    model: str = Field(min_length=1)
    textfile_dir: str = Field(min_length=1)
    install_root: str = ""
    api_key_file: str = ""
    canary_tokens: int = Field(1000, ge=100)
    probe_sessions: int = Field(2, ge=1)
    deadline_s: float = Field(120, gt=0)
    # The quality canaries (opt-in, 0: none): questions of the built-in set, prompts of the parity fixed set.
    canary_questions: int = Field(0, ge=0, le=64)
    canary_prompts: int = Field(0, ge=0, le=PROMPT_COUNT)
    # The accuracy canary's expected score (the model profile's for the built-in set; None: not run) and margin.
    accuracy_expected: float | None = Field(None, gt=0, le=1)
    accuracy_margin: float = Field(0.05, gt=0, lt=1)
    # The parity canary's tolerance (None: the one the record was taken with).
    parity_tolerance: float | None = Field(None, ge=0)

    def textfile(self) -> Path:
        """The ``.prom`` file this deployment's verification writes."""
        return Path(self.textfile_dir) / f"dsv4deploy-{self.deployment}.prom"


def active_release(install_root: str) -> str:
    """The release the install root's ``current`` pointer names ('' when there is none)."""
    link = Path(install_root) / "current" if install_root else None
    return os.path.basename(os.readlink(link)) if link is not None and link.is_symlink() else ""


def parity_record(install_root: str, release: str) -> dict:
    """The parity record the deploy of `release` kept in the install root's state.json ({} when none)."""
    try:
        state = json.loads((Path(install_root) / "state.json").read_text()) if install_root and release else {}
    except (OSError, ValueError):
        return {}
    record = (state.get("parity") or {}).get(release)
    return record if isinstance(record, dict) else {}


def canary_plan(config: WatchConfig, release: str) -> CanaryPlan:
    """The canaries this verification runs: the active release compared with its own parity record."""
    return CanaryPlan(questions=config.canary_questions, prompts=config.canary_prompts,
                      expected=config.accuracy_expected, margin=config.accuracy_margin,
                      parity_record=parity_record(config.install_root, release) or None,
                      tolerance=config.parity_tolerance, deadline_s=config.deadline_s)


def canary_failed(analysis: Analysis) -> bool:
    """A canary that failed or could not measure (inconclusive is neither)."""
    return analysis.phase in (Phase.FAILED, Phase.ERROR)


def write_metrics(path: Path, deployment: str, release: str, needle: GateResult, tools: GateResult,
                  seconds: float, now: float | None = None, canaries: list[Analysis] | None = None) -> None:
    """Write one verification's metrics to `path` atomically (a half-written file is never scraped)."""
    registry = CollectorRegistry()
    passed = Gauge("dsv4deploy_gate_passed", "1 when the light probe passed in the last verification",
                   ["deployment", "gate"], registry=registry)
    passed.labels(deployment, "canary_needle").set(1 if needle.passed else 0)
    passed.labels(deployment, "tool_calls").set(1 if tools.passed else 0)
    for canary in canaries or []:
        passed.labels(deployment, canary.name.replace(" ", "_")).set(0 if canary_failed(canary) else 1)
    Gauge("dsv4deploy_release_info", "The release serving at the last verification",
          ["deployment", "release"], registry=registry).labels(deployment, release or "none").set(1)
    Gauge("dsv4deploy_last_verification_timestamp_seconds", "When the last verification ended (Unix time)",
          ["deployment"], registry=registry).labels(deployment).set(time.time() if now is None else now)
    rate = tools.evidence.get("corruption_rate")
    Gauge("dsv4deploy_corruption_rate", "Share of the tool-call probe's sessions with a corrupted tool call",
          ["deployment"], registry=registry).labels(deployment).set(float(rate) if rate is not None else float("nan"))
    Gauge("dsv4deploy_verification_seconds", "How long the last verification's probes took",
          ["deployment"], registry=registry).labels(deployment).set(round(seconds, 3))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry)
    # node_exporter runs as another user: readable by all, whatever umask the service manager gave (027 under
    # supervisord would make it 0640, and the staleness alert would never fire on a missing series).
    os.chmod(path, 0o644)


def verify_once(config: WatchConfig, index: int = 0) -> tuple[GateResult, GateResult, list[Analysis], list[str]]:
    """Run the probes (and the canaries asked for; `index` picks their questions) once and write the metrics;
    returns the two probes' results, the canaries' analyses and why a canary asked for did not run."""
    api_key = Path(config.api_key_file).read_text().strip() if config.api_key_file else None
    started = time.monotonic()
    release = active_release(config.install_root)
    needle, tools = run_probes(config.endpoint, config.model, canary_tokens=config.canary_tokens,
                               probe_sessions=config.probe_sessions, deadline_s=config.deadline_s,
                               seed=int(time.time()) % 1000, api_key=api_key)
    plan = canary_plan(config, release)
    canaries = canary_analyses(config.endpoint, config.model, plan, index, api_key)
    write_metrics(config.textfile(), config.deployment, release, needle, tools, time.monotonic() - started,
                  canaries=canaries)
    return needle, tools, canaries, plan.notes()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsv4deploy.watch --config FILE (--once | --every SECONDS)``."""
    parser = argparse.ArgumentParser(prog="python -m dsv4deploy.watch", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the JSON settings file (WatchConfig)")
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--once", action="store_true", help="verify once (a systemd timer's service)")
    when.add_argument("--every", type=float, metavar="SECONDS", help="verify every SECONDS, forever")
    args = parser.parse_args(argv)
    try:
        config = WatchConfig.model_validate(json.loads(Path(args.config).read_text()))
    except (OSError, ValueError) as exc:
        print(f"dsv4deploy.watch: cannot use {args.config}: {exc}", file=sys.stderr)
        return 2
    for index in itertools.count():
        needle, tools, canaries, notes = verify_once(config, index)
        lines = [f"canary needle: {needle.status}: {needle.summary}", f"tool calls: {tools.status}: {tools.summary}",
                 *(f"{c.name}: {c.phase}: {c.detail}" for c in canaries), *notes, f"wrote {config.textfile()}"]
        print("\n".join(lines), flush=True)
        if args.once:
            return 0 if needle.passed and tools.passed and not any(map(canary_failed, canaries)) else 1
        time.sleep(max(1.0, args.every))
    return 0  # not reached: the loop above runs until --once returns or the process is stopped


if __name__ == "__main__":
    raise SystemExit(main())
