"""What an operator adapting `init --example pd-single-host` to their own box runs into: the group the
playbooks target, leftover and misspelt host_vars, YAML errors, `render --out` inside the inventory, and the
command `init` suggests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dsv4deploy import cli
from dsv4deploy.inventory.checks import PLAY_GROUP

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "inventory" / "examples" / "pd-single-host"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE, tmp_path / "site")
    return tmp_path / "site"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# The play every playbook imports first: it runs on the controller and fails when the group has no host.
HOSTS_CHECK = "hosts_matched.yml"


def test_every_playbook_targets_the_group_validate_checks():
    for play_file in sorted((REPO / "playbooks").glob("*.yml")):
        plays = yaml.safe_load(play_file.read_text())
        if play_file.name == HOSTS_CHECK:
            assert [p["hosts"] for p in plays] == ["localhost"]
            assert f"groups['{PLAY_GROUP}']" in plays[0]["tasks"][0]["ansible.builtin.assert"]["that"]
            continue
        # First the check that the inventory has hosts in the group (else Ansible skips every play, exit 0).
        assert plays[0].get("ansible.builtin.import_playbook") == HOSTS_CHECK, play_file.name
        for play in plays:
            if "hosts" in play:
                assert play["hosts"] == PLAY_GROUP, play_file.name


def test_hosts_outside_the_group_the_playbooks_target_are_refused_naming_it(capsys, site):
    (site / "hosts.yml").write_text((site / "hosts.yml").read_text().replace("    dsv4:", "    mygpus:"))
    code, _, err = run(capsys, "validate", "-i", str(site))
    assert code == 2
    assert ("hosts.yml: host gpu1 is not in the group dsv4, which every playbook targets (hosts: dsv4): the deploy "
            "would run on no host; fix: put the hosts under all.children.dsv4.hosts in hosts.yml") in err


def test_a_child_group_of_dsv4_is_fine(capsys, site):
    (site / "hosts.yml").write_text("all:\n  children:\n    dsv4:\n      children:\n        mygpus:\n"
                                    "          hosts:\n            gpu1:\n              ansible_host: 10.0.0.11\n")
    assert run(capsys, "validate", "-i", str(site))[0] == 0


@pytest.mark.parametrize(("written", "meant"), [
    ("gpu_memory: 141", "gpu_memory_gib"),
    ("gpu_mem_gib: 141", "gpu_memory_gib"),
    ("listen_address: 0.0.0.0", "listen"),
])
def test_misspelt_host_vars_are_refused_with_the_name_meant(capsys, site, written, meant):
    with (site / "host_vars" / "gpu1.yml").open("a") as fh:
        fh.write(written + "\n")
    code, _, err = run(capsys, "validate", "-i", str(site))
    name = written.split(":")[0]
    assert code == 2
    assert f"{name}: is not a variable dsv4deploy reads (set in {site}/host_vars/gpu1.yml); fix: did you mean " \
           f"{meant}?" in err


def test_a_host_vars_file_for_a_host_not_in_the_inventory_is_named(capsys, site):
    shutil.copy(site / "host_vars" / "gpu1.yml", site / "host_vars" / "gpu2.yml")
    code, _, err = run(capsys, "validate", "-i", str(site))
    assert code == 2
    assert f"{site}/host_vars/gpu2.yml: is for host gpu2, which is not in the inventory (its hosts: gpu1)" in err


def test_render_into_the_inventory_folder_is_refused_and_writes_nothing(capsys, site):
    code, _, err = run(capsys, "render", "-i", str(site), "--out", str(site / "rendered"))
    assert code == 2 and "is inside the inventory folder" in err and "dynamic inventory" in err
    assert not (site / "rendered").exists()


def test_inits_next_line_overrides_nothing_the_user_sets(capsys, tmp_path):
    code, _, err = run(capsys, "init", str(tmp_path / "s"), "--example", "pd-single-host")
    assert code == 0
    [line] = [x for x in err.splitlines() if x.startswith("next:")]
    assert "index_topk" not in line and "-e topology" not in line and "an -e you add overrides them" in line


def test_the_variable_api_key_vault_var_names_is_never_a_typo(capsys, site):
    with (site / "group_vars" / "all" / "deployment.yml").open("a") as fh:
        fh.write("api_key: {vault_var: dsv4_api_key}\ndsv4_api_key: sk-test\n")
    _code, _, err = run(capsys, "validate", "-i", str(site))
    assert "dsv4_api_key: is not a variable" not in err, err


@pytest.mark.parametrize(("name", "value", "lists"), [
    ("mem_fraction_static", 0.85, "prefill[*] or decode[*] or combined"),
    ("tp_size", 8, "prefill[*] or decode[*] or combined"),
    ("gpus", [0, 1], "prefill[*] or decode[*] or combined"),
    ("bootstrap_port", 8999, "prefill[*]"),
])
def test_a_workers_setting_at_the_top_level_is_refused_naming_where_it_belongs(capsys, site, name, value, lists):
    path = site / "group_vars" / "all" / "deployment.yml"
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, name: value}, sort_keys=False))
    code, _, err = run(capsys, "validate", "-i", str(site))
    assert code == 2, err
    assert (f"{name}: is a worker's setting, set at the top level (in {path}), where nothing reads it; fix: set it "
            f"in each worker that needs it: {lists} (e.g. prefill: [{{host: ..., {name}: ...}}])") in err, err
    assert "did you mean" not in err  # said once, with where it belongs


def test_a_workers_setting_the_inventory_keeps_on_purpose_is_allowed(capsys, site):
    path = site / "group_vars" / "all" / "deployment.yml"
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "tp_size": 8, "dsv4_allow_vars": ["tp_size"]}, sort_keys=False))
    assert run(capsys, "validate", "-i", str(site))[0] == 0
