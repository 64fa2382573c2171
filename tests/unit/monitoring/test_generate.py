"""`dsv4deploy monitoring` from real inventories: where each endpoint is scraped, the alerts, the dashboard."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from dsv4deploy import cli
from dsv4deploy.monitoring.dashboard import dashboard_queries

REPO = Path(__file__).resolve().parents[3]
LOCAL = str(REPO / "inventory" / "local")
THREE_HOSTS = str(REPO / "inventory" / "examples" / "1p1d-three-hosts")


def generate(capsys: pytest.CaptureFixture[str], out: Path, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["monitoring", "--out", str(out), *argv])
    got, err = capsys.readouterr()
    return code, got, err


def read_json(path: Path) -> list | dict:
    return json.loads(path.read_text())


def test_local_deployment_targets_each_endpoint_with_its_labels(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = generate(capsys, tmp_path, "-i", LOCAL)
    assert (code, err) == (0, "")
    assert sorted(Path(p).relative_to(tmp_path).as_posix() for p in out.split()) == [
        "grafana/dsv4deploy.json", "prometheus.yml", "rules/dsv4deploy.rules.yml",
        "targets/dsv4deploy-node.json", "targets/dsv4deploy-router.json", "targets/dsv4deploy-workers.json"]
    workers = read_json(tmp_path / "targets/dsv4deploy-workers.json")
    # The local inventory's worker ports and the router's metrics port, as `dsv4deploy plan` renders them.
    assert [(g["targets"], g["labels"]["role"], g["labels"]["worker"]) for g in workers] == [
        (["127.0.0.1:31001"], "prefill", "sglang-dsv4-prefill"), (["127.0.0.1:31002"], "decode", "sglang-dsv4-decode")]
    assert {g["labels"]["deployment"] for g in workers} == {"local"}
    router = read_json(tmp_path / "targets/dsv4deploy-router.json")
    assert router == [{"targets": ["127.0.0.1:31990"],
                       "labels": {"deployment": "local", "host": "local", "role": "router"}}]
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert config["rule_files"] == ["rules/dsv4deploy.rules.yml"]
    assert {j["job_name"]: j["file_sd_configs"][0]["files"] for j in config["scrape_configs"]} == {
        "dsv4deploy-workers": ["targets/dsv4deploy-workers.json"],
        "dsv4deploy-router": ["targets/dsv4deploy-router.json"],
        "dsv4deploy-node": ["targets/dsv4deploy-node.json"]}


def test_workers_on_other_hosts_are_scraped_at_their_address_and_a_loopback_router_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = generate(capsys, tmp_path, "-i", THREE_HOSTS)
    assert code == 0
    workers = read_json(tmp_path / "targets/dsv4deploy-workers.json")
    assert [(g["targets"][0], g["labels"]["host"]) for g in workers] == [
        ("10.0.0.21:30001", "prefill1"), ("10.0.0.22:30002", "decode1")]
    nodes = read_json(tmp_path / "targets/dsv4deploy-node.json")
    assert [g["targets"][0] for g in nodes] == ["10.0.0.20:9100", "10.0.0.21:9100", "10.0.0.22:9100"]
    # The router's metrics stay on its loopback: not a target another host's Prometheus could reach.
    assert not (tmp_path / "targets/dsv4deploy-router.json").exists()
    assert "router on router1: listens on 127.0.0.1 only" in err
    assert "Fix: set router.prometheus_listen to 0.0.0.0" in err
    rules = yaml.safe_load((tmp_path / "rules/dsv4deploy.rules.yml").read_text())
    assert "DSV4RouterDown" not in [r["alert"] for r in rules["groups"][0]["rules"]]
    code, _, err = generate(capsys, tmp_path / "open", "-i", THREE_HOSTS, "-e", '{"router": {"host": "router1", '
                            '"port": 30000, "prometheus_listen": "0.0.0.0"}}')
    assert (code, err) == (0, "")
    assert read_json(tmp_path / "open/targets/dsv4deploy-router.json")[0]["targets"] == ["10.0.0.20:29000"]


def test_alerts_cover_gates_verification_workers_kv_and_errors(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    generate(capsys, tmp_path, "-i", LOCAL, "--verify-interval-s", "60", "--kv-usage", "0.8")
    rules = {r["alert"]: r for r in yaml.safe_load((tmp_path / "rules/dsv4deploy.rules.yml").read_text())
             ["groups"][0]["rules"]}
    assert list(rules) == ["DSV4GateFailed", "DSV4VerificationStale", "DSV4WorkerDown", "DSV4RouterDown",
                           "DSV4RouterErrorsHigh", "DSV4KVCacheHigh", "DSV4ErrorRateHigh"]
    assert rules["DSV4GateFailed"]["expr"] == 'dsv4deploy_gate_passed{deployment="local"} == 0'
    assert "> 180 or absent(" in rules["DSV4VerificationStale"]["expr"]
    assert rules["DSV4KVCacheHigh"]["expr"] == 'sglang:token_usage{deployment="local"} > 0.8'
    assert rules["DSV4WorkerDown"]["expr"] == 'up{job="dsv4deploy-workers",deployment="local"} == 0'
    assert all(r["labels"]["severity"] in ("critical", "warning") and r["annotations"]["summary"]
               for r in rules.values())


def test_without_the_verify_timer_its_alerts_panels_and_node_job_are_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate(capsys, tmp_path, "-i", LOCAL, "--no-verify-timer")
    text = (tmp_path / "rules/dsv4deploy.rules.yml").read_text() + (tmp_path / "grafana/dsv4deploy.json").read_text()
    assert "dsv4deploy_" not in text.replace("dsv4deploy-", "").replace('"dsv4deploy"', "")
    assert not (tmp_path / "targets/dsv4deploy-node.json").exists()


def test_dashboard_is_grafana_json_with_every_panel_querying_this_deployment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate(capsys, tmp_path, "-i", LOCAL)
    dashboard = read_json(tmp_path / "grafana/dsv4deploy.json")
    assert dashboard["uid"] == "dsv4deploy-local"
    assert [v["type"] for v in dashboard["templating"]["list"]] == ["datasource"]
    panels = dashboard["panels"]
    assert len(panels) == 15 and len({p["id"] for p in panels}) == 15
    assert all(p["type"] == "timeseries" and p["datasource"] == "${datasource}" for p in panels)
    queries = dashboard_queries(dashboard)
    assert len(queries) == 20 and all('deployment="local"' in q for q in queries)
    # The router's own panels (PD): its series by the router job, not the workers'.
    router = [q for q in queries if "smg_" in q]
    assert len(router) == 5 and all('job="dsv4deploy-router"' in q for q in router)
    # No two panels on one spot of the grid.
    assert len({(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels}) == len(panels)


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--kv-usage", "90", "90 is not in (0, 1]"),
    ("--verify-interval-s", "0", "0 is not a positive number of seconds"),
])
def test_bad_thresholds_are_refused_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    flag: str, value: str, says: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["monitoring", "-i", LOCAL, "--out", str(tmp_path), flag, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and flag in err and says in err
    assert not list(tmp_path.iterdir())


def test_combined_server_has_no_router_job_and_no_router_alert(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = generate(capsys, tmp_path, "-i", LOCAL, "-e", "topology=combined")
    assert (code, err) == (0, "")
    assert read_json(tmp_path / "targets/dsv4deploy-workers.json") == [
        {"targets": ["127.0.0.1:31000"],
         "labels": {"deployment": "local", "host": "local", "role": "combined", "worker": "sglang-dsv4"}}]
    assert not (tmp_path / "targets/dsv4deploy-router.json").exists()
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert [j["job_name"] for j in config["scrape_configs"]] == ["dsv4deploy-workers", "dsv4deploy-node"]
    rules = yaml.safe_load((tmp_path / "rules/dsv4deploy.rules.yml").read_text())["groups"][0]["rules"]
    assert "DSV4RouterDown" not in [r["alert"] for r in rules] and len(rules) == 5
    # Nor router panels: a combined server has no router to query.
    assert "smg_" not in (tmp_path / "grafana/dsv4deploy.json").read_text()


def test_an_output_folder_inside_the_inventory_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "inv"
    shutil.copytree(LOCAL, inventory)
    before = sorted(p.relative_to(inventory) for p in inventory.rglob("*"))
    code, _, err = generate(capsys, inventory / "mon", "-i", str(inventory))
    assert code == 2
    assert f"--out {inventory / 'mon'} is inside the inventory folder {inventory}" in err
    assert f"fix: write them outside it, e.g. --out {tmp_path / 'monitoring'}" in err
    assert sorted(p.relative_to(inventory) for p in inventory.rglob("*")) == before


def used_sglang_metrics(out: Path) -> set[str]:
    """Every sglang metric the generated rules and dashboard query (histograms by their family name)."""
    text = (out / "rules/dsv4deploy.rules.yml").read_text() + "\n".join(
        dashboard_queries(read_json(out / "grafana/dsv4deploy.json")))
    return {re.sub(r"_bucket$", "", m) for m in re.findall(r"sglang:[a-z0-9_]+", text)}


def test_every_sglang_metric_queried_is_one_the_simulated_server_exports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dsv4deploy.sim.metrics import COUNTERS, GAUGES, HISTOGRAMS

    generate(capsys, tmp_path, "-i", LOCAL)
    used = used_sglang_metrics(tmp_path)
    assert len(used) == 9
    assert used <= {*COUNTERS, *GAUGES, *HISTOGRAMS}, used - {*COUNTERS, *GAUGES, *HISTOGRAMS}
