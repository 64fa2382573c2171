"""Misspelt inventory variables: refused with "did you mean", naming where they are set.

Through the real CLI on a copy of a real inventory: `dsv4deploy validate` and `plan` read it with Ansible's
own inventory objects, as the playbooks' plan step does (tests/integration/test_hostile_deploy.py runs
the same names through deploy.yml).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dsv4deploy import cli
from dsv4deploy.inventory import varnames

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "inventory" / "examples" / "pd-single-host"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A copy of the pd-single-host example (group_vars/all/deployment.yml, host gpu1)."""
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest)
    return dest


def validate(capsys: pytest.CaptureFixture[str], site: Path, *extra: str, command: str = "validate") -> tuple[int, str]:
    code = cli.main([command, "-i", str(site), *(a for e in extra for a in ("-e", e))])
    out, err = capsys.readouterr()
    return code, out + err


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_issues_index_top_k_in_group_vars_is_refused_naming_the_file(capsys, site: Path) -> None:
    typo = write(site / "group_vars" / "all" / "experiment.yml", {"index_top_k": 1024})
    code, text = validate(capsys, site)
    assert code == 2
    assert (f"index_top_k: is not a variable dsv4deploy reads (set in {typo}); fix: did you mean index_topk? "
            "rename it to index_topk, or, if it is the inventory's own variable, list it in dsv4_allow_vars") in text
    # plan refuses it too, before showing anything rendered
    code, text = validate(capsys, site, command="plan")
    assert code == 2 and "did you mean index_topk?" in text and "files that would be rendered" not in text


@pytest.mark.parametrize(("name", "meant"), [
    ("sever_env", "server_env"), ("sglang_versoin", "sglang_version"), ("index_topk_decode", "index_topk"),
    ("Index_TopK", "index_topk"), ("drain_deadline", "drain_deadline_s"), ("server_env_extras", "server_env_extra"),
    ("api_keys", "api_key"), ("dsv4_report_dirs", "dsv4_report_dir"),
])
def test_near_misses_from_extra_vars_name_the_variable_they_mean(capsys, site: Path, name: str, meant: str) -> None:
    code, text = validate(capsys, site, f"{name}=1")
    assert code == 2
    assert f"{name}: is not a variable dsv4deploy reads (set in -e); fix: did you mean {meant}?" in text


def test_a_misspelt_host_variable_names_its_host_vars_file(capsys, site: Path) -> None:
    typo = write(site / "host_vars" / "gpu1.yml", {"sglang_versoin": "0.5.18"})
    code, text = validate(capsys, site)
    assert code == 2
    assert f"sglang_versoin: is not a variable dsv4deploy reads (set in {typo}); fix: did you mean sglang_version?" \
        in text


def test_inline_inventory_variables_name_the_group(capsys, site: Path) -> None:
    hosts = yaml.safe_load((site / "hosts.yml").read_text())
    group = next(iter(hosts["all"]["children"]))
    hosts["all"]["children"][group]["vars"] = {"install_rot": "/opt/x"}
    (site / "hosts.yml").write_text(yaml.safe_dump(hosts))
    code, text = validate(capsys, site)
    assert code == 2
    assert f"install_rot: is not a variable dsv4deploy reads (set in group {group} in the inventory file); " \
           "fix: did you mean install_root?" in text


def test_the_allow_list_keeps_the_inventorys_own_names(capsys, site: Path) -> None:
    mine = site / "group_vars" / "all" / "mine.yml"
    write(mine, {"index_top_k": "a note of ours", "dsv4_allow_vars": ["index_top_k"]})
    assert validate(capsys, site)[0] == 0
    write(site / "group_vars" / "all" / "mine.yml", {"dsv4_allow_vars": "index_top_k"})
    code, text = validate(capsys, site)
    assert code == 2
    assert "dsv4_allow_vars: must be a list of variable names (got 'index_top_k'); fix: write dsv4_allow_vars: " \
           "[name, ...]" in text


@pytest.mark.parametrize("name", [
    "ansible_user", "ansible_python_interpreter", "inventory_hostname_short", "region", "model_dir", "my_app_port",
    "dsv4_python", "sim_faults", "datacenter", "environment",
])
def test_ansibles_own_and_unrelated_variables_stay_untouched(capsys, site: Path, name: str) -> None:
    write(site / "group_vars" / "all" / "other.yml", {name: "x"})
    code, text = validate(capsys, site)
    assert code == 0, text


def test_known_names_come_from_the_spec_and_the_playbook_inputs() -> None:
    known = varnames.known_names()
    # the spec model, the gates' settings, role argument specs and defaults, plays' vars
    for name in ("index_topk", "server_env", "server_env_extra", "install_root", "needle_lengths",
                 "dsv4_release_keep", "dsv4_gates_names", "isolate_gpus", "release", "purge", "service_user_create"):
        assert name in known, name


def test_role_input_aliases_are_known(tmp_path: Path) -> None:
    # Where the code defines inputs: an argument spec's option and its (deprecated) aliases.
    spec = tmp_path / "roles" / "r" / "meta" / "argument_specs.yml"
    write(spec, {"argument_specs": {"main": {"options": {"r_keep": {"type": "int", "aliases": ["keep_releases"]}}}}})
    assert {"r_keep", "keep_releases"} <= varnames.playbook_inputs(tmp_path)


def test_distance_counts_a_swap_as_one_edit() -> None:
    assert varnames.distance("sglang_versoin", "sglang_version") == 1
    assert varnames.distance("sever_env", "server_env") == 1
    assert varnames.distance("abc", "abc") == 0


def test_inputs_declared_in_dsv4deploy_names_are_known(monkeypatch: pytest.MonkeyPatch) -> None:
    # The playbook inputs' own list (new role-prefixed names and their deprecated aliases) feeds the check.
    import sys
    import types

    module = types.ModuleType("dsv4deploy.inventory.names")
    module.known_names = lambda: {"dsv4_rollback_release", "release"}
    monkeypatch.setitem(sys.modules, "dsv4deploy.inventory.names", module)
    varnames.known_names.cache_clear()
    try:
        assert {"dsv4_rollback_release", "release"} <= varnames.known_names()
        (problem,) = varnames.misspelt({"dsv4_rollback_relase": ["-e"]})
        assert "did you mean dsv4_rollback_release?" in str(problem)
    finally:
        varnames.known_names.cache_clear()
