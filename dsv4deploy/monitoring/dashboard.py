"""The Grafana dashboard of one deployment, built with grafanalib (not hand-written JSON).

Panels read the same series the alert rules do: scrape health, the verify timer's verdicts, each
worker's sglang metrics (requests, aborts, KV usage, queue, throughput, latency quantiles) and, in PD, the
router's own (responses by status, latency as clients see it, requests by endpoint). Both router
implementations (sglang-router and smg) export the same `smg_*` series on their metrics port.
"""

from __future__ import annotations

import json

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from dsv4deploy.monitoring.targets import JOB_ROUTER, JOB_WORKERS

DATASOURCE = "${datasource}"
WIDTH, HEIGHT = 12, 8  # two panels a row


# The router's client-facing paths: its latency panel leaves out health probes and /metrics scrapes.
ROUTER_SERVING_PATHS = "/v1/.*|/generate"


def _quantile(q: float, metric: str, sel: str, by: str = "worker") -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{sel}}}[5m])))"


def router_panel_specs(deployment: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """The router's panels: what clients get from it, as its own metrics port reports."""
    sel = f'job="{JOB_ROUTER}",deployment="{deployment}"'
    served = f'{sel},path=~"{ROUTER_SERVING_PATHS}"'
    return [
        ("Router responses per second by status", "reqps",
         [("{{status_code}} {{error_code}}",
           f"sum by (status_code, error_code) (rate(smg_http_responses_total{{{sel}}}[5m]))")]),
        ("Router request latency (serving paths)", "s",
         [(f"p{round(q * 100)} {{{{host}}}}", _quantile(q, "smg_http_request_duration_seconds", served, "host"))
          for q in (0.5, 0.99)]),
        ("Router requests per second by endpoint", "reqps",
         [("{{endpoint}} {{backend_type}}",
           f"sum by (endpoint, backend_type) (rate(smg_router_requests_total{{{sel}}}[5m]))")]),
        ("Router open client connections", "none", [("{{host}}", f"smg_http_connections_active{{{sel}}}")]),
    ]


def panel_specs(deployment: str, verify_timer: bool = True,
                router: bool = False) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(title, unit, [(legend, PromQL)]) of every time series panel, in order; the router's last."""
    sel = f'deployment="{deployment}"'
    specs: list[tuple[str, str, list[tuple[str, str]]]] = [
        ("Scrape targets up", "none", [("{{job}} {{host}} {{worker}}", f"up{{{sel}}}")]),
    ]
    if verify_timer:
        specs += [
            ("Verification gates (1 passed, 0 failed)", "none",
             [("{{gate}}", f"dsv4deploy_gate_passed{{{sel}}}")]),
            ("Seconds since the last verification", "s",
             [("age", f"time() - dsv4deploy_last_verification_timestamp_seconds{{{sel}}}")]),
        ]
    specs += [
        ("Requests finished per second", "reqps",
         [("{{worker}}", f"sum by (worker) (rate(sglang:num_requests_total{{{sel}}}[5m]))")]),
        ("Aborted requests per second", "reqps",
         [("{{worker}}", f"sum by (worker) (rate(sglang:num_aborted_requests_total{{{sel}}}[5m]))")]),
        ("KV cache token usage", "percentunit", [("{{worker}}", f"sglang:token_usage{{{sel}}}")]),
        ("Running and queued requests", "none",
         [("running {{worker}}", f"sglang:num_running_reqs{{{sel}}}"),
          ("queued {{worker}}", f"sglang:num_queue_reqs{{{sel}}}")]),
        ("Generation throughput", "none", [("{{worker}} tok/s", f"sglang:gen_throughput{{{sel}}}")]),
        ("Time to first token", "s",
         [(f"p{round(q * 100)} {{{{worker}}}}", _quantile(q, "sglang:time_to_first_token_seconds", sel))
          for q in (0.5, 0.99)]),
        ("Inter-token latency", "s",
         [(f"p{round(q * 100)} {{{{worker}}}}", _quantile(q, "sglang:inter_token_latency_seconds", sel))
          for q in (0.5, 0.99)]),
        ("End-to-end request latency", "s",
         [(f"p{round(q * 100)} {{{{worker}}}}", _quantile(q, "sglang:e2e_request_latency_seconds", sel))
          for q in (0.5, 0.99)]),
    ]
    if router:
        specs += router_panel_specs(deployment)
    return specs


def build_dashboard(deployment: str, verify_timer: bool = True, router: bool = False) -> g.Dashboard:
    """The dashboard: one time series panel per entry of `panel_specs`, two a row."""
    panels = []
    for i, (title, unit, queries) in enumerate(panel_specs(deployment, verify_timer, router)):
        panels.append(g.TimeSeries(
            title=title, dataSource=DATASOURCE, unit=unit,
            targets=[g.Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + j), datasource=DATASOURCE)
                     for j, (legend, expr) in enumerate(queries)],
            gridPos=g.GridPos(h=HEIGHT, w=WIDTH, x=(i % 2) * WIDTH, y=(i // 2) * HEIGHT),
        ))
    datasource = g.Template(name="datasource", label="Prometheus", query="prometheus", type="datasource",
                            default="Prometheus")
    return g.Dashboard(
        title=f"dsv4deploy {deployment}", uid=f"dsv4deploy-{deployment}"[:40],
        description=f"DeepSeek-V4-Flash on SGLang, deployment {deployment} (job {JOB_WORKERS} and its router)",
        tags=["dsv4deploy", "sglang"], timezone="utc", refresh="30s",
        templating=g.Templating(list=[datasource]), panels=panels,
    ).auto_panel_ids()


def dashboard_json(deployment: str, verify_timer: bool = True, router: bool = False) -> str:
    """The dashboard as Grafana imports it (JSON text); `router` adds the router's panels (PD)."""
    return json.dumps(build_dashboard(deployment, verify_timer, router).to_json_data(), cls=DashboardEncoder,
                      sort_keys=True, indent=2) + "\n"


def dashboard_queries(dashboard: dict) -> list[str]:
    """Every PromQL expression of a dashboard's panels (as Grafana would send them)."""
    return [t["expr"] for p in dashboard.get("panels", []) for t in p.get("targets", []) if t.get("expr")]
