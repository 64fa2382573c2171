"""What an installed release says about itself, and where stop/rollback/verify find it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dsv4deploy.plan import installed, render
from dsv4deploy.spec import SpecError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "golden"))
from fixture_specs import combined_spec, pd_spec, xpyd_spec


def test_the_services_record_lists_each_service_in_drain_order() -> None:
    files = render.render_release(pd_spec(), "gpu1")
    record = json.loads(files["services.json"])
    assert [(s["name"], s["role"], s["drain_rank"]) for s in record["services"]] == [
        ("sglang-dsv4-router", "router", 0), ("sglang-dsv4-decode", "decode", 1),
        ("sglang-dsv4-prefill", "prefill", 2)]
    assert record["services"][0]["endpoint"] == "http://10.0.0.11:8000"
    assert "services.json" in json.loads(files["manifest.json"])["files"], "the record is part of the release"


def test_the_view_of_a_release_comes_from_its_own_records_not_the_inventory() -> None:
    spec = pd_spec()
    files = render.render_release(spec, "gpu1")
    view = installed.release_view("r1", {"gpu1": files["spec.json"], "other": ""},
                                  {"gpu1": files["services.json"]}, {"gpu1": "/srv/dsv4", "other": "/srv/dsv4"},
                                  ["gpu1", "other"])
    assert view["release_id"] == "r1" and view["installed_on"] == ["gpu1"]
    assert view["endpoint"] == "http://10.0.0.11:8000" and view["router_url"] == view["endpoint"]
    assert view["hosts"]["gpu1"] == {"services": ["sglang-dsv4-router", "sglang-dsv4-decode", "sglang-dsv4-prefill"],
                                     "gpus": list(range(8)), "ports": [8000, 8998, 29000, 30001, 30002],
                                     "install_root": "/srv/dsv4", "service_manager": "systemd", "files": {}}
    # A host without the release runs nothing of it.
    assert view["hosts"]["other"]["services"] == [] and view["hosts"]["other"]["service_manager"] == ""


def test_a_release_from_before_the_services_record_is_read_from_its_spec() -> None:
    spec = combined_spec("supervisor")
    files = render.render_release(spec, "gpu1")
    view = installed.release_view("old", {"gpu1": files["spec.json"]}, {"gpu1": ""}, {"gpu1": "/opt/x1"}, ["gpu1"])
    assert view["hosts"]["gpu1"]["services"] == ["sglang-dsv4"]
    assert view["hosts"]["gpu1"]["service_manager"] == "supervisor" and view["hosts"]["gpu1"]["gpus"] == [0, 1, 2, 3]


def test_a_spread_release_gives_each_host_its_own_services() -> None:
    spec = xpyd_spec()
    hosts = spec.hosts_in_use()
    files = {h: render.render_release(spec, h) for h in hosts}
    view = installed.release_view("r", {h: f["spec.json"] for h, f in files.items()},
                                  {h: f["services.json"] for h, f in files.items()}, dict.fromkeys(hosts, "/opt/d1"),
                                  hosts)
    names = [n for h in hosts for n in view["hosts"][h]["services"]]
    assert sorted(names) == sorted([*(w["name"] for w in view["workers"]), "sglang-dsv4-router"])


def test_nothing_installed_gives_a_view_with_no_service_and_no_target() -> None:
    view = installed.release_view("", {}, {}, {"gpu1": "/opt/dsv4deploy"}, ["gpu1"])
    assert view["installed_on"] == [] and "endpoint" not in view
    assert view["hosts"]["gpu1"]["install_root"] == "/opt/dsv4deploy" and view["hosts"]["gpu1"]["services"] == []


def test_locate_reads_only_the_install_root_and_checks_it_like_a_deploy() -> None:
    assert installed.locate({"a": None, "b": "/srv/dsv4"}) == {"a": "/opt/dsv4deploy", "b": "/srv/dsv4"}
    with pytest.raises(SpecError) as err:
        installed.locate({"a": "/etc", "b": "relative/path", "c": 5})
    text = str(err.value)
    assert "install_root (host a)" in text and "system directory" in text
    assert "install_root (host b)" in text and "install_root (host c)" in text and "fix:" in text
