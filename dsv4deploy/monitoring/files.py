"""The monitoring files of one deployment, laid out as Prometheus and Grafana read them.

Under the output folder: `prometheus.yml` (scrape jobs with file-based discovery, and the rule file),
`targets/<job>.json` (the discovered endpoints: rewrite these and Prometheus follows without a reload),
`rules/dsv4deploy.rules.yml` and `grafana/dsv4deploy.json`. Paths inside prometheus.yml are relative:
Prometheus resolves them against the folder of the configuration file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dsv4deploy.monitoring.dashboard import dashboard_json
from dsv4deploy.monitoring.rules import Thresholds, rule_file
from dsv4deploy.monitoring.targets import JOB_NODE, JOB_ROUTER, NODE_EXPORTER_PORT, deployment_label, scrape_targets
from dsv4deploy.spec import Deployment

CONFIG = "prometheus.yml"
RULES = "rules/dsv4deploy.rules.yml"
DASHBOARD = "grafana/dsv4deploy.json"


@dataclass(frozen=True)
class MonitoringSettings:
    """What the inventory does not say: scrape cadence, node_exporter's port, alert thresholds."""

    scrape_interval: str = "15s"
    node_exporter_port: int = NODE_EXPORTER_PORT
    thresholds: Thresholds = field(default_factory=Thresholds)


def targets_path(job: str) -> str:
    """The file_sd file of `job`, relative to the output folder."""
    return f"targets/{job}.json"


def monitoring_files(spec: Deployment,
                     settings: MonitoringSettings = MonitoringSettings()) -> tuple[dict[str, str], list[str]]:
    """Every file's content by its path relative to the output folder, and a note per endpoint left out."""
    deployment = deployment_label(spec)
    groups, notes = scrape_targets(spec, settings.node_exporter_port)
    if not settings.thresholds.verify_timer:
        groups.pop(JOB_NODE, None)  # node_exporter is scraped here only for the verify timer's textfile
    files = {targets_path(job): json.dumps(g, indent=2) + "\n" for job, g in groups.items()}
    config = {
        "global": {"scrape_interval": settings.scrape_interval, "evaluation_interval": settings.scrape_interval},
        "rule_files": [RULES],
        "scrape_configs": [_job(job) for job in groups],
    }
    files[CONFIG] = yaml.safe_dump(config, sort_keys=False)
    files[RULES] = yaml.safe_dump(rule_file(deployment, JOB_ROUTER in groups, settings.thresholds),
                                  sort_keys=False, width=120)
    files[DASHBOARD] = dashboard_json(deployment, settings.thresholds.verify_timer, JOB_ROUTER in groups)
    return files, notes


def _job(job: str) -> dict:
    entry: dict = {"job_name": job, "file_sd_configs": [{"files": [targets_path(job)]}]}
    if job == JOB_NODE:
        # The verify timer's file names its deployment itself; that label wins over the target's.
        entry["honor_labels"] = True
    return entry


def write_monitoring_files(files: dict[str, str], out_dir: Path) -> list[Path]:
    """Write `files` under `out_dir` (folders made as needed); the paths written."""
    written = []
    for rel, text in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
