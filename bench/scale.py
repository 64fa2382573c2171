"""N simulated hosts on this machine for the scale figure: one PD pair per host, one router.

Host i is `hNN`, reached through the local connection at its own loopback address 127.0.0.(11+i),
where its servers listen; it has its own install root (supervisord, releases, logs) and its own 8
simulated GPUs (indices 8i..8i+7 of one GPU ledger, so every host's nvidia-smi stand-in is the
same command). The deployment is NxP NxD behind one router on h00: the per-host work is that of
the one-host case, so a tool that runs hosts in parallel takes about as long for N as for 1.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from bench.world import NEEDLE
from tests.integration.simhost import REPO, SimHost, free_port_block


def scale_host(root: Path, hosts: int, load_s: float) -> SimHost:
    """An inventory of `hosts` simulated hosts under `root` (a SimHost whose install root is h00's)."""
    base = free_port_block(3 * hosts + 2)
    inv = root / "inventory"
    src = REPO / "inventory" / "local" / "group_vars" / "all"
    group = inv / "group_vars" / "all"
    group.mkdir(parents=True)
    # deployment.yml's model path and chat template are the stand-in checkpoint beside the inventory.
    shutil.copytree(REPO / "inventory" / "local" / ".model", inv / ".model")
    for path in src.glob("*.yml"):
        if path.name != "deployment.yml":
            shutil.copy(path, group / path.name)
    local = yaml.safe_load((src / "deployment.yml").read_text())
    names = [f"h{i:02d}" for i in range(hosts)]
    addr = {n: f"127.0.0.{11 + i}" for i, n in enumerate(names)}
    prefills, decodes = [], []
    for i, name in enumerate(names):
        gpus = list(range(8 * i, 8 * i + 8))
        prefills.append({**local["prefill"][0], "host": name, "gpus": gpus[:4], "port": base + 3 * i,
                         "bootstrap_port": base + 3 * i + 2})
        decodes.append({**local["decode"][0], "host": name, "gpus": gpus[4:], "port": base + 3 * i + 1})
    dep = {k: v for k, v in local.items() if k not in ("prefill", "decode", "combined", "router", "install_root")}
    dep.update(prefill=prefills, decode=decodes, gpu_count=8 * hosts,
               router={"host": names[0], "port": base + 3 * hosts, "listen": addr[names[0]],
                       "prometheus_port": base + 3 * hosts + 1})
    (group / "deployment.yml").write_text(yaml.safe_dump(dep, sort_keys=False))
    sim = yaml.safe_load((src / "sim.yml").read_text())
    key_file = root / "api_key"
    key_file.write_text("sk-bench-scale\n")
    key_file.chmod(0o600)
    (group / "zz_bench.yml").write_text(yaml.safe_dump({
        "server_env": {**sim["server_env"], "DSV4_SIM_STARTUP_S": f"{load_s:g}"},
        "dsv4_sim_state_dir": str(root / "sim-gpus"),
        # The shared ledger's nvidia-smi stand-in shows all 8N GPUs; each host uses only its own 8.
        "gpu_query_command": ["env", "DSV4_SIM_STATE_DIR={{ dsv4_sim_state_dir }}",
                              "DSV4_SIM_GPU_COUNT={{ gpu_count }}", "{{ dsv4_python }}", "-m", "dsv4deploy.sim.smi"],
        "dsv4_repo_root": str(REPO),
        "api_key": {"file": str(key_file)},
        **NEEDLE,
    }))
    local_hosts = yaml.safe_load((REPO / "inventory" / "local" / "hosts.yml").read_text())["all"]["children"]["dsv4"]
    hosts_yml = {"all": {"children": {"dsv4": {"hosts": {
        n: {"ansible_connection": "local", "ansible_host": addr[n],
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "install_root": str(root / n), "listen": addr[n]} for n in names},
        # The embedded host's group variables (e.g. where smg lives), with this inventory's state root.
        "vars": {**local_hosts.get("vars", {}), "dsv4_local_root": str(root)}}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts_yml, sort_keys=False))
    return SimHost(root=root, base_port=base + 3 * hosts)


def install_roots(host: SimHost) -> list[Path]:
    """Every host's install root of a scale inventory."""
    return sorted(p for p in host.root.iterdir() if p.is_dir() and p.name.startswith("h") and p.name[1:].isdigit())
