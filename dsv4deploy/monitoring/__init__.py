"""Prometheus and Grafana for a deployment, generated from its spec (`dsv4deploy monitoring`).

`targets` gives the file-based discovery groups (each worker's /metrics, the router's metrics port, each
host's node_exporter with the verify timer's textfile metrics), `rules` the alert rules, `dashboard` the
Grafana dashboard (built with grafanalib) and `files` lays them out as Prometheus reads them.
"""

from dsv4deploy.monitoring.files import MonitoringSettings, monitoring_files, write_monitoring_files

__all__ = ["MonitoringSettings", "monitoring_files", "write_monitoring_files"]
