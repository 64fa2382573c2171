"""dsv4deploy.inventory: variables resolved and templated by Ansible itself, as the playbooks see them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from dsv4deploy.inventory import InventoryError, load_inventory_vars, spec_from_inventory

REPO = Path(__file__).resolve().parents[3]
LOCAL = str(REPO / "inventory" / "local")


def write_inventory(root: Path, group_vars: dict, host_vars: dict[str, dict] | None = None) -> str:
    """A two-host inventory under `root` (gpu1, gpu2 in group dsv4)."""
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "host_vars").mkdir()
    hosts = {"all": {"children": {"dsv4": {"hosts": {"gpu1": {"ansible_host": "10.0.0.1"},
                                                       "gpu2": {"ansible_host": "10.0.0.2"}}}}}}
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (root / "group_vars" / "all" / "deployment.yml").write_text(yaml.safe_dump(group_vars))
    for host, data in (host_vars or {}).items():
        (root / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(data))
    return str(root)


TWO_HOSTS = {
    "topology": "pd",
    "model": {"path": "/models/m", "served_name": "m"},
    "gpu_memory_gib": 96,
    "prefill": {"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30001, "mem_fraction_static": 0.8},
    "decode": {"host": "gpu2", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30002, "mem_fraction_static": 0.8},
    "router": {"host": "gpu2", "port": 30000},
    "install_root": "/opt/{{ service_user }}-deploy",
    "service_user": "sglang",
    "api_key": {"file": "/etc/dsv4deploy/api_key"},
}


def test_local_inventory_is_templated_like_ansible() -> None:
    common, hostvars = load_inventory_vars([LOCAL], [])
    # ansible_playbook_python is what Ansible sets: this interpreter.
    assert common["server_launcher"] == [sys.executable, "-m", "dsv4deploy.sim.server"]
    assert common["server_env"]["DSV4_SIM_STATE_DIR"] == str((REPO / ".state" / "local" / "sim-gpus").resolve())
    assert common["decode"][0]["env"]["DSV4_SIM_FAULTS"] == ""  # sim_faults_by_role.decode | default(sim_faults)
    assert hostvars["local"]["ansible_host"] == "127.0.0.1"
    assert Path(hostvars["local"]["install_root"]).resolve() == (REPO / ".state" / "local").resolve()


def test_values_come_back_as_builtin_types() -> None:
    common, _ = load_inventory_vars([LOCAL], [])
    assert type(common["topology"]) is str
    assert type(common["decode"]) is list and type(common["decode"][0]) is dict
    assert type(common["decode"][0]["tp_size"]) is int
    assert type(common["server_env"]["DSV4_SIM_GPU_COUNT"]) is int
    json.dumps(common)  # nothing Ansible-specific left


def test_extra_vars_key_value_json_and_file(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yml"
    faults.write_text("sim_faults: crash_at_start\n")
    common, _ = load_inventory_vars([LOCAL], [
        "topology=combined index_topk=512",
        '{"sim_faults_by_role": {"decode": "ignore_override"}}',
        f"@{faults}",
    ])
    assert common["topology"] == "combined"
    assert common["index_topk"] == "512"  # key=value gives strings, as in ansible-playbook; the spec coerces
    assert common["decode"][0]["env"]["DSV4_SIM_FAULTS"] == "ignore_override"
    assert common["prefill"][0]["env"]["DSV4_SIM_FAULTS"] == "crash_at_start"


def test_extra_vars_are_templated_as_ansible_playbook_does() -> None:
    _, hostvars = load_inventory_vars([LOCAL], ["service_user={{ 'svc' ~ 1 }}"])
    assert hostvars["local"]["service_user"] == "svc1"


def test_spec_from_local_inventory_with_overrides() -> None:
    spec = spec_from_inventory([LOCAL], ["topology=combined", "index_topk=512"])
    assert spec.topology == "combined"
    assert spec.index_topk == 512
    assert spec.hosts["local"].service_manager == "supervisor"


def test_group_vars_host_vars_and_precedence(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, TWO_HOSTS, {"gpu1": {"listen": "0.0.0.0"},
                                                      "gpu2": {"gpu_memory_gib": 141, "listen": "0.0.0.0"}})
    spec = spec_from_inventory([inventory], [])
    assert spec.hosts["gpu1"].gpu_memory_gib == 96
    assert spec.hosts["gpu2"].gpu_memory_gib == 141
    assert spec.hosts["gpu2"].listen == "0.0.0.0"
    assert spec.hosts["gpu2"].address == "10.0.0.2"
    assert spec.hosts["gpu1"].install_root == "/opt/sglang-deploy"
    # -e beats host_vars, as in Ansible.
    assert spec_from_inventory([inventory], ["gpu_memory_gib=80"]).hosts["gpu2"].gpu_memory_gib == 80


def test_undefined_variable_is_a_clean_message(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, {**TWO_HOSTS, "install_root": "{{ nowhere_defined }}/x"})
    with pytest.raises(InventoryError) as err:
        load_inventory_vars([inventory], [])
    assert str(err.value) == ("install_root (host gpu1): 'nowhere_defined' is undefined; fix: define the variable "
                              "(inventory or -e) or correct the template")


def test_missing_inventory() -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory_vars(["/nonexistent/inventory"], [])
    assert str(err.value) == ("inventory /nonexistent/inventory: no such file or directory; fix: pass -i with the "
                              "folder or file of your inventory (e.g. one written by `dsv4deploy init DIR`)")


def test_bad_extra_vars() -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory_vars([LOCAL], ['{"topology": "pd"'])
    assert str(err.value).startswith(f"inventory {LOCAL}: YAML parsing failed")
    with pytest.raises(InventoryError) as err:
        load_inventory_vars([LOCAL], ["./vars.yml"])
    assert str(err.value) == f"inventory {LOCAL}: Please prepend extra_vars filename './vars.yml' with '@'"


def test_broken_group_vars(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, TWO_HOSTS)
    (tmp_path / "group_vars" / "all" / "broken.yml").write_text("topology: [\n")
    with pytest.raises(InventoryError) as err:
        load_inventory_vars([inventory], [])
    # Named by file, line and column (tests/unit/inventory/test_yaml_errors.py), not Ansible's bare message.
    assert str(err.value).startswith(f"{tmp_path / 'group_vars' / 'all' / 'broken.yml'}:2:1: not valid YAML")


def test_inventory_without_hosts(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  hosts: {}\n")
    with pytest.raises(InventoryError) as err:
        load_inventory_vars([str(tmp_path)], [])
    assert str(err.value) == (f"inventory {tmp_path} defines no hosts (or Ansible could not parse it: "
                              "see its warnings above)")
