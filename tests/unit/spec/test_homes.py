"""Paths root trusts (install_root, api_key.file, the verification's Python and textfile folder) are refused
at validate time when they lie inside a home, naming the field, the host, the path and the fix."""

from __future__ import annotations

import os
import pwd
from typing import Any

import pytest

from dsv4deploy.spec import SpecError, load_spec
from tests.unit.spec.test_hostile_spec import base

# (where the value goes, the variable, a path inside a home, the home named).
IN_HOMES = [
    ("host", "install_root", "/home/sglang/dsv4", "/home/sglang"),
    ("host", "install_root", "/var/lib/sglang/dsv4", "/var/lib/sglang"),
    ("common", "api_key", "/home/alice/keys/api_key", "/home/alice"),
    ("common", "api_key", "/root/api_key", "/root"),
    ("common", "api_key", "/var/lib/sglang/api_key", "/var/lib/sglang"),
    ("host", "dsv4_verify_timer_python", "/home/sglang/venv/bin/python", "/home/sglang"),
    ("host", "dsv4_verify_timer_python", "/var/lib/sglang/.venv/bin/python3", "/var/lib/sglang"),
    ("host", "dsv4_verify_timer_textfile_dir", "/home/sglang/textfile", "/home/sglang"),
    ("host", "dsv4_verify_timer_textfile_dir", "/root/node-exporter", "/root"),
]


def _set(common: dict[str, Any], hosts: dict[str, dict[str, Any]], where: str, key: str, path: str) -> str:
    if key == "api_key":
        common["api_key"] = {"file": path}
        return "api_key.file"
    (hosts["gpu1"] if where == "host" else common)[key] = path
    return key


@pytest.mark.parametrize(("where", "key", "path", "home"), IN_HOMES)
def test_a_path_inside_a_home_is_refused_naming_field_host_path_and_fix(where: str, key: str, path: str,
                                                                        home: str) -> None:
    # Before: only a home itself was refused (install_root /home/alice); /home/sglang/dsv4 validated, and the
    # service user could replace what root then ran, read or wrote.
    common, hosts = base()
    field = _set(common, hosts, where, key, path)
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    [problem] = [p for p in err.value.problems if "home folder" in p.message]
    assert (problem.field, problem.host) == (field, "gpu1")
    assert repr(path) in problem.message and home in problem.message
    assert "outside every home" in problem.fix


@pytest.mark.parametrize("root", ["/opt/dsv4deploy", "/srv/dsv4", "/tmp/pytest-of-root/pytest-1/test0/root",
                                  "/var/lib/dsv4deploy", "/homework/dsv4"])
def test_roots_outside_homes_and_sticky_tmp_roots_pass(root: str) -> None:
    common, hosts = base()
    hosts["gpu1"].update(install_root=root, dsv4_verify_timer_textfile_dir="/var/lib/prometheus/node-exporter",
                         dsv4_verify_timer_python="/opt/venv/bin/python")
    load_spec(common, hosts)


def test_a_host_whose_modules_run_as_the_service_user_keeps_its_home_paths() -> None:
    # The quickstart: a local host run by the user as itself, no become: no privilege to give away.
    me = pwd.getpwuid(os.geteuid()).pw_name
    common, hosts = base()
    hosts["gpu1"].update(ansible_connection="local", service_user=me, service_user_root_ok=True,
                         dsv4_verify_timer_python="/home/someone/venv/bin/python")
    common["api_key"] = {"file": "/home/someone/api_key"}
    load_spec(common, hosts)


def test_the_quickstart_run_by_root_from_roots_home_validates_and_another_service_user_there_does_not() -> None:
    # README's first command as root: the site, and so its install root, under /root; the modules run as root,
    # the service user. (Until this, anything under /root was refused whoever ran it: the quickstart failed.)
    common, hosts = base()
    hosts["gpu1"].update(ansible_connection="local", service_user="root", service_user_root_ok=True,
                         install_root="/root/dsv4-site/site/.state")
    if pwd.getpwuid(os.geteuid()).pw_name == "root":
        load_spec(common, hosts)
    hosts["gpu1"]["service_user"] = "sglang"
    hosts["gpu1"].pop("service_user_root_ok")
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    assert any(p.field == "install_root" and "/root" in p.message for p in err.value.problems), err.value.problems


def test_become_makes_the_modules_roots_and_the_home_paths_refused() -> None:
    common, hosts = base()
    hosts["gpu1"].update(ansible_user="sglang", install_root="/home/sglang/dsv4")
    load_spec(common, hosts)  # reached as sglang, no become: the modules run as the service user
    hosts["gpu1"]["ansible_become"] = "yes"
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    assert [p for p in err.value.problems if p.field == "install_root" and "/home/sglang" in p.message]


def test_a_remote_host_reached_as_another_user_than_the_service_user_is_checked() -> None:
    common, hosts = base()
    hosts["gpu1"].update(ansible_user="admin", ansible_become=True, install_root="/home/sglang/dsv4")
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    assert [p for p in err.value.problems if p.field == "install_root" and "/home/sglang" in p.message]


def test_a_home_itself_is_said_once() -> None:
    # install_root_problems already refuses /home/alice (a purge would remove the home): one problem, not two.
    common, hosts = base()
    hosts["gpu1"]["install_root"] = "/home/alice"
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    assert len([p for p in err.value.problems if p.field == "install_root"]) == 1


def test_validate_reads_the_verification_paths_from_the_inventory(tmp_path_factory: pytest.TempPathFactory,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # `dsv4deploy validate` sees the verification's settings (not spec keys) in group_vars, and -e.
    from dsv4deploy.cli import main

    site = tmp_path_factory.mktemp("s") / "site"
    assert main(["init", str(site), "--example", "pd-single-host"]) == 0
    (site / "group_vars" / "all" / "verify.yml").write_text(
        "dsv4_verify_timer_textfile_dir: /home/sglang/textfile\n")
    capsys.readouterr()
    assert main(["validate", "-i", str(site), "-e", "dsv4_verify_timer_python=/root/venv/bin/python"]) != 0
    out = capsys.readouterr()
    said = out.out + out.err
    assert "dsv4_verify_timer_textfile_dir (host gpu1): '/home/sglang/textfile'" in said
    assert "dsv4_verify_timer_python (host gpu1): '/root/venv/bin/python'" in said


def test_a_connection_variable_that_needs_play_time_facts_does_not_stop_validate(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    from dsv4deploy.cli import main

    site = tmp_path_factory.mktemp("s") / "site"
    assert main(["init", str(site), "--example", "pd-single-host"]) == 0
    with (site / "host_vars" / "gpu1.yml").open("a") as fh:
        fh.write('ansible_user: "{{ ansible_facts.env.SUDO_USER }}"\n')
    assert main(["validate", "-i", str(site)]) == 0
