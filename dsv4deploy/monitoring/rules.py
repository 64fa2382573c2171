"""Alert rules for one deployment, as a Prometheus rule file (a dict that dumps to its YAML).

Every expression selects this deployment's series by the `deployment` label the scrape configuration
sets (and the verify timer writes), so two deployments' rules in one Prometheus never mix. The metric
names are sglang's own (its `--enable-metrics` collector) and the verify timer's textfile metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4deploy.monitoring.targets import JOB_ROUTER, JOB_WORKERS


@dataclass(frozen=True)
class Thresholds:
    """What counts as trouble: the operator's knobs, with defaults that page rarely."""

    # The verify timer's interval: its result is stale after three intervals without a new one.
    verify_interval_s: int = 300
    # sglang:token_usage is the share of the KV cache's token slots in use (0..1).
    kv_usage: float = 0.9
    # Aborted requests per finished request, over five minutes (a worker's, and the router's 5xx share).
    error_ratio: float = 0.05
    # How long a worker may fail its scrape before it is called down.
    down_for: str = "1m"
    # Whether the verify timer runs (dsv4.deploy.verify_timer): without it, its alerts would always fire.
    verify_timer: bool = True


@dataclass(frozen=True)
class Alert:
    """One alerting rule: what it measures, and the condition on that which fires it."""

    name: str
    measure: str
    condition: str
    for_: str
    severity: str
    summary: str
    description: str

    @property
    def expr(self) -> str:
        """The rule's PromQL expression."""
        return f"{self.measure} {self.condition}"

    def as_rule(self) -> dict:
        """The rule as Prometheus' rule file writes it."""
        rule: dict = {"alert": self.name, "expr": self.expr}
        if self.for_ != "0m":
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, "description": self.description}
        return rule


def alerts(deployment: str, has_router: bool, t: Thresholds = Thresholds()) -> list[Alert]:
    """The alerts of one deployment, in the order the rule file lists them."""
    sel = f'deployment="{deployment}"'
    out: list[Alert] = []
    if t.verify_timer:
        stale_s = 3 * t.verify_interval_s
        out += [
            Alert("DSV4GateFailed", f"dsv4deploy_gate_passed{{{sel}}}", "== 0", "0m", "critical",
                  "{{ $labels.deployment }}: verification gate {{ $labels.gate }} failed",
                  "The verify timer's last run failed the {{ $labels.gate }} probe against what serves. "
                  "Run `ansible-playbook dsv4.deploy.verify` for the full gates, then roll back if it fails."),
            Alert("DSV4VerificationStale",
                  f"time() - dsv4deploy_last_verification_timestamp_seconds{{{sel}}}",
                  f"> {stale_s} or absent(dsv4deploy_last_verification_timestamp_seconds{{{sel}}})", "5m", "warning",
                  f"{{{{ $labels.deployment }}}}: no verification in {stale_s} s",
                  "The verify timer has not written a result for three intervals (or node_exporter does not "
                  "export it): its unit failed, its host is down or the timer was removed. "
                  "See `systemctl status dsv4-verify-<deployment>` on its host."),
        ]
    out.append(Alert("DSV4WorkerDown", f'up{{job="{JOB_WORKERS}",{sel}}}', "== 0", t.down_for, "critical",
                     "{{ $labels.deployment }}: worker {{ $labels.worker }} on {{ $labels.host }} is down",
                     "Prometheus cannot read the worker's /metrics: the server exited, hangs or its host is "
                     "unreachable. `dsv4deploy status` says what serves there."))
    if has_router:
        out.append(Alert("DSV4RouterDown", f'up{{job="{JOB_ROUTER}",{sel}}}', "== 0", t.down_for, "critical",
                         "{{ $labels.deployment }}: router on {{ $labels.host }} is down",
                         "Prometheus cannot read the router's metrics port: no request reaches the workers."))
        router = f'job="{JOB_ROUTER}",{sel}'
        by = "sum by (deployment, host)"
        # `or ... * 0`: with no 5xx yet the numerator has no series; zero errors is a ratio of 0, not no data.
        failed = (f'({by} (rate(smg_http_responses_total{{{router},status_code=~"5.."}}[5m])) '
                  f"or {by} (rate(smg_http_responses_total{{{router}}}[5m])) * 0)")
        out.append(Alert("DSV4RouterErrorsHigh", f"{failed} / {by} (rate(smg_http_responses_total{{{router}}}[5m]))",
                         f"> {t.error_ratio}", "5m", "critical",
                         f"{{{{ $labels.deployment }}}}: over {t.error_ratio:.0%} of the router's responses are 5xx",
                         "Clients get server errors from the router (no healthy prefill or decode, a worker "
                         "refusing, a timeout). The workers' own panels say which; `dsv4deploy status` says "
                         "what serves."))
    out += [
        Alert("DSV4KVCacheHigh", f"sglang:token_usage{{{sel}}}", f"> {t.kv_usage}", "5m", "warning",
              f"{{{{ $labels.worker }}}}: KV cache over {t.kv_usage:.0%} full",
              "sglang:token_usage has stayed above the threshold for 5 minutes: requests queue or are "
              "retracted. Lower max_running_requests or add decode capacity."),
        Alert("DSV4ErrorRateHigh",
              f"sum by (deployment, host, worker) (rate(sglang:num_aborted_requests_total{{{sel}}}[5m])) / "
              f"sum by (deployment, host, worker) (rate(sglang:num_requests_total{{{sel}}}[5m]))",
              f"> {t.error_ratio}", "5m", "warning",
              f"{{{{ $labels.worker }}}}: over {t.error_ratio:.0%} of requests aborted",
              "Aborted requests per finished request over 5 minutes (+Inf when none finished). "
              "Read the worker's log for the cause."),
    ]
    return out


def rule_file(deployment: str, has_router: bool, t: Thresholds = Thresholds()) -> dict:
    """The rule file: one group named after the deployment."""
    return {"groups": [{"name": f"dsv4deploy-{deployment}",
                        "rules": [a.as_rule() for a in alerts(deployment, has_router, t)]}]}
