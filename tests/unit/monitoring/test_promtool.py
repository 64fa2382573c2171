"""The generated monitoring files as Prometheus' own promtool reads them: valid configuration and rules,
and each alert firing on the series it is for and silent on healthy ones (`promtool test rules`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dsv4deploy import cli

REPO = Path(__file__).resolve().parents[3]
LOCAL = str(REPO / "inventory" / "local")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus; "
                                "scripts/setup.sh tool installs it as root)")

WORKER = {"job": "dsv4deploy-workers", "deployment": "local", "host": "local", "role": "decode",
          "worker": "sglang-dsv4-decode", "instance": "127.0.0.1:31002"}
HEALTHY = {**WORKER, "role": "prefill", "worker": "sglang-dsv4-prefill", "instance": "127.0.0.1:31001"}
ROUTER = {"job": "dsv4deploy-router", "deployment": "local", "host": "local", "role": "router",
          "instance": "127.0.0.1:31990"}


def promtool(*args: str, cwd: Path) -> str:
    proc = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("monitoring")
    assert cli.main(["monitoring", "-i", LOCAL, "--out", str(path), "--verify-interval-s", "300"]) == 0
    return path


def series(name: str, labels: dict[str, str], values: str) -> dict:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": values}


def expected(rules: dict[str, dict], alert: str, labels: dict[str, str]) -> dict:
    """The alert as Prometheus fires it: its labels and its annotations with $labels expanded."""
    rule = rules[alert]
    expand = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), v)
              for k, v in rule["annotations"].items()}
    return {"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": expand}


def test_config_and_rules_pass_promtool_check(out: Path) -> None:
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml", cwd=out)
    assert "SUCCESS: 7 rules found" in promtool("check", "rules", "rules/dsv4deploy.rules.yml", cwd=out)


def test_each_alert_fires_on_its_trouble_and_not_on_a_healthy_fleet(out: Path) -> None:
    rules = {r["alert"]: r for r in yaml.safe_load((out / "rules/dsv4deploy.rules.yml").read_text())
             ["groups"][0]["rules"]}
    dep = {"deployment": "local"}
    gate_ok, gate_bad = {**dep, "gate": "canary_needle"}, {**dep, "gate": "tool_calls"}
    inputs = [
        # The decode's scrape fails from minute 2 on; the prefill stays up.
        series("up", WORKER, "1 1 0x30"), series("up", HEALTHY, "1x32"),
        series("up", ROUTER, "1x32"),
        series("dsv4deploy_gate_passed", gate_ok, "1x32"), series("dsv4deploy_gate_passed", gate_bad, "1 0x31"),
        # The last verification is stuck at t=0: stale (over 900 s) from minute 16, firing 5 minutes later.
        series("dsv4deploy_last_verification_timestamp_seconds", dep, "0x32"),
        series("sglang:token_usage", WORKER, "0.95x32"), series("sglang:token_usage", HEALTHY, "0.5x32"),
        # The decode aborts one request in ten (over 5 %), the prefill none.
        series("sglang:num_requests_total", WORKER, "0+60x32"), series("sglang:num_requests_total", HEALTHY, "0+60x32"),
        series("sglang:num_aborted_requests_total", WORKER, "0+6x32"),
        series("sglang:num_aborted_requests_total", HEALTHY, "0x32"),
        # The router answers 200 throughout, and 503 to one request in five from minute 2 on.
        series("smg_http_responses_total", {**ROUTER, "status_code": "200", "error_code": ""}, "0+40x32"),
        series("smg_http_responses_total", {**ROUTER, "status_code": "503", "error_code": "server_selection_failed"},
               "0 0 0+10x30"),
    ]
    # The error ratio is summed by (deployment, host, worker): those labels only.
    by_worker = {k: WORKER[k] for k in ("deployment", "host", "worker")}
    tests = [{
        "interval": "1m", "input_series": inputs,
        "alert_rule_test": [
            # At minute 1 nothing has gone wrong for long enough: no alert at all.
            *({"eval_time": "1m", "alertname": name, "exp_alerts": []} for name in rules if name != "DSV4GateFailed"),
            {"eval_time": "1m", "alertname": "DSV4GateFailed",
             "exp_alerts": [expected(rules, "DSV4GateFailed", gate_bad)]},
            {"eval_time": "10m", "alertname": "DSV4WorkerDown",
             "exp_alerts": [expected(rules, "DSV4WorkerDown", WORKER)]},
            {"eval_time": "10m", "alertname": "DSV4RouterDown", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "DSV4RouterErrorsHigh",
             "exp_alerts": [expected(rules, "DSV4RouterErrorsHigh", {"deployment": "local", "host": "local"})]},
            {"eval_time": "10m", "alertname": "DSV4KVCacheHigh",
             "exp_alerts": [expected(rules, "DSV4KVCacheHigh", WORKER)]},
            {"eval_time": "10m", "alertname": "DSV4ErrorRateHigh",
             "exp_alerts": [expected(rules, "DSV4ErrorRateHigh", by_worker)]},
            {"eval_time": "18m", "alertname": "DSV4VerificationStale", "exp_alerts": []},
            {"eval_time": "25m", "alertname": "DSV4VerificationStale",
             "exp_alerts": [expected(rules, "DSV4VerificationStale", dep)]},
        ],
    }]
    test_file = out / "rules_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": ["rules/dsv4deploy.rules.yml"], "evaluation_interval": "1m",
                                         "tests": tests}, sort_keys=False))
    assert "SUCCESS" in promtool("test", "rules", test_file.name, cwd=out)
