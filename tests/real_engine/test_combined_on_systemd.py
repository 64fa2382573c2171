"""The real sglang 0.5.23 (CPU, the hand-built test model) on a real systemd host of the nspawn kit, over ssh.

One throwaway Debian host (tests/systemd/hostkit.py: its own network namespace, which the real
server needs, as gloo binds every interface) gets the tier's inventory with ``service_manager:
systemd``: the combined server is promoted by readiness, config (the override in the real start log,
here the journal, and effective per the real ``/server_info``) and smoke; a release the model rejects
fails readiness at once with the real traceback and the host is rolled back, the previous release
verified serving; stop leaves no process of the service user, the scheduler and detokenizer included.

What the host sees of this machine is a test-kit concern, never the tool's: the units run as the
service user ``sglang``, who cannot enter /root, and with a private /tmp. So the real-engine venv's
packages and its base interpreter are bound read-only under /opt, with a ``pyvenv.cfg`` and
``bin/python`` that point at the bound interpreter (its libpython is found through
``LD_LIBRARY_PATH``: the pyenv build's RUNPATH names /root); the model folder and the kernel
stand-in are copied into the host's own layer. The inventory names those paths.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.real_engine.enginehost import STAND_IN, TIER, engine_python
from tests.systemd import checks
from tests.systemd import hostkit as kit
from tests.systemd import rootfs as rootfs_mod
from tests.systemd.checks import INSTALL_ROOT, output

pytestmark = pytest.mark.real_engine

UNIT = "sglang-dsv4"
HOST = "gpu1"
PORT = 32000
API_KEY = "sk-engine-systemd-7c1d9e"
KEY_FILE = "/etc/dsv4deploy/api_key"
# Where the host sees this machine's engine (bound read-only) and the files copied into its layer.
VENV = "/opt/engine-venv"
BASE = "/opt/engine-python"
MODEL = "/opt/tiny-llama"
STAND_IN_DIR = "/opt/engine-stand-in"


def _base_interpreter() -> tuple[Path, str]:
    """The engine venv's base interpreter prefix on this machine and its executable's name (pyvenv.cfg)."""
    cfg = dict(line.split(" = ", 1) for line in (engine_python().parents[1] / "pyvenv.cfg").read_text().splitlines()
               if " = " in line)
    return Path(cfg["home"]).parent, Path(cfg.get("executable", "python3")).name


def _bind_engine(host: kit.Host, tiny_model: Path) -> None:
    """The venv's bin/python and pyvenv.cfg pointing at the bound base interpreter; model and stand-in copied."""
    venv = host.merged / VENV.lstrip("/")
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    _, executable = _base_interpreter()
    (venv / "bin" / "python").symlink_to(f"{BASE}/bin/{executable}")
    (venv / "lib64").symlink_to("lib")
    version = (engine_python().parents[1] / "pyvenv.cfg").read_text().split("version = ", 1)[1].split()[0]
    (venv / "pyvenv.cfg").write_text(f"home = {BASE}/bin\ninclude-system-site-packages = false\nversion = {version}\n")
    shutil.copytree(tiny_model, host.merged / MODEL.lstrip("/"))
    shutil.copytree(STAND_IN, host.merged / STAND_IN_DIR.lstrip("/"), ignore=shutil.ignore_patterns("__pycache__"))
    # Readable by the service user (the copies keep the 0700 of pytest's temporary folders).
    for top in (venv, host.merged / MODEL.lstrip("/"), host.merged / STAND_IN_DIR.lstrip("/")):
        for path in [top, *top.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
    host.write_file(KEY_FILE, API_KEY + "\n", owner="sglang", mode="0400")


@pytest.fixture(scope="module")
def lab(engine_ready: None, tiny_model: Path) -> Iterator[kit.Lab]:
    """One booted systemd host with the engine visible to its units; torn down even when a test fails."""
    reason = kit.missing_prerequisites()
    if reason:
        pytest.skip(reason)
    base, _ = _base_interpreter()
    binds = [(str(engine_python().parents[1].resolve() / "lib"), f"{VENV}/lib"), (str(base), BASE)]
    try:
        rootfs = rootfs_mod.ensure_rootfs()
    except RuntimeError as exc:
        pytest.fail(f"the host rootfs could not be built here ({exc}); debootstrap needs the network, which the "
                    "tier's namespace lacks: run `python -m tests.systemd.hostkit build` first (.ci/run does)")
    booted = kit.Lab(names=[HOST], rootfs=rootfs, binds=binds)
    try:
        booted.start()
        _bind_engine(booted.hosts[HOST], tiny_model)
        yield booted
    finally:
        booted.close()


@pytest.fixture(scope="module")
def inventory(lab: kit.Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tier's inventory (tests/real_engine/inventory) on the lab's host, hosted by systemd."""
    dest = tmp_path_factory.mktemp("systemd-engine") / "inventory"
    shutil.copytree(TIER / "inventory", dest)
    deployment = dest / "group_vars" / "all" / "deployment.yml"
    deployment.write_text(deployment.read_text().replace("host: local", f"host: {HOST}"))
    (dest / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"dsv4": {"hosts": {HOST: {"ansible_host": lab.hosts[HOST].address}}}}}}))
    state = rootfs_mod.SIM_STATE_DIR
    engine = yaml.safe_load((dest / "group_vars" / "all" / "engine.yml").read_text())
    host_vars = {
        **lab.connection_vars(),
        "service_manager": "systemd", "install_root": INSTALL_ROOT, "service_user": "sglang",
        "api_key": {"file": KEY_FILE},
        # The gates, on the controller, reach the server at the host's address.
        "listen": "0.0.0.0",
        "dsv4_engine_python": f"{VENV}/bin/python", "dsv4_engine_model": MODEL,
        "dsv4_engine_stand_in": STAND_IN_DIR, "dsv4_engine_nccl_base": 29500,
        "server_env": {**engine["server_env"], "LD_LIBRARY_PATH": f"{BASE}/lib"},
        # Combined runs no router; the kit's sglang-router stands in for the tier's two launchers.
        "router_launcher": lab.sim_vars()["router_launcher"],
        # No GPU: the host's simulated nvidia-smi answers (two idle "GPUs", as the tier's inventory says).
        "gpu_query_command": ["env", f"DSV4_SIM_STATE_DIR={state}", f"PYTHONPATH={kit.SIM_ROOT}",
                              "DSV4_SIM_GPU_COUNT={{ gpu_count }}", "DSV4_SIM_GPU_MEMORY_GIB={{ gpu_memory_gib }}",
                              "/usr/bin/python3", "-m", "dsv4deploy.sim.smi"],
    }
    (dest / "host_vars").mkdir()
    (dest / "host_vars" / f"{HOST}.yml").write_text(yaml.safe_dump(host_vars, sort_keys=False))
    return dest


@pytest.fixture(scope="module")
def state() -> dict:
    """What earlier tests of the module found (the promoted release, the server's processes)."""
    return {}


def _get(lab: kit.Lab, path: str, body: dict | None = None) -> tuple[int, dict]:
    """A request to the real server from the controller side (where the gates run): status and JSON."""
    argv = ["curl", "-sS", "-m", "120", "-o", "-", "-w", "\n%{http_code}", "-H", f"Authorization: Bearer {API_KEY}"]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    proc = lab.run([*argv, f"http://{lab.hosts[HOST].address}:{PORT}{path}"], timeout=180)
    text, _, code = proc.stdout.rpartition("\n")
    return int(code or 0), json.loads(text) if text.strip().startswith("{") else {"raw": text + proc.stderr}


def assert_serving(lab: kit.Lab, release: str) -> None:
    """`release` is active, its unit installed, active and enabled, and the real server answers a chat."""
    host = lab.hosts[HOST]
    assert checks.active_release(host) == release
    assert checks.unit_state(host, UNIT) == ("active", "enabled")
    installed = host.exec(["cat", f"/etc/systemd/system/{UNIT}.service"]).stdout
    assert installed == host.exec(["cat", f"{INSTALL_ROOT}/releases/{release}/units/{UNIT}.service"]).stdout
    code, reply = _get(lab, "/v1/chat/completions", {"model": "tiny-llama", "max_tokens": 8, "temperature": 0,
                                                      "messages": [{"role": "user", "content": "Say OK"}]})
    assert code == 200, reply
    choice = reply["choices"][0]
    assert choice["message"]["content"] and choice["finish_reason"] in ("length", "stop"), choice


def service_processes(host: kit.Host) -> list[str]:
    """'PID ARGS' of every process of the service user on the host."""
    return host.sh("ps -u sglang -o pid=,args= || true").stdout.strip().splitlines()


def seconds_to_ready(host: kit.Host) -> float:
    """From systemd starting the unit (its last start) to the real server's 'fired up' line, per the journal."""
    lines = host.exec(["journalctl", "-u", f"{UNIT}.service", "-o", "short-unix", "--no-pager"]).stdout.splitlines()
    started = [float(x.split()[0]) for x in lines if "Started " in x or "Starting " in x]
    ready = [float(x.split()[0]) for x in lines if "The server is fired up and ready to roll!" in x]
    return round(ready[-1] - max(t for t in started if t <= ready[-1]), 1)


def test_combined_real_server_is_promoted_on_a_systemd_host(lab: kit.Lab, inventory: Path, tmp_path: Path,
                                                             state: dict) -> None:
    started = time.monotonic()
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path, timeout=1200)
    wall = round(time.monotonic() - started, 1)
    assert proc.returncode == 0, output(proc)
    report = checks.report(tmp_path)
    assert report["verdict"] == "promoted"
    assert [(g["name"], g["status"]) for g in report["gates"]] == [
        ("readiness", "passed"), ("config", "passed"), ("smoke", "passed")]
    host = lab.hosts[HOST]
    assert host.exec(["systemctl", "show", "-p", "User", "--value", UNIT]).stdout.strip() == "sglang"
    # The override is in the real start log (the unit's journal) and effective per the real /server_info.
    journal = host.exec(["journalctl", "-u", f"{UNIT}.service", "-o", "cat", "--no-pager"]).stdout
    assert "'json_model_override_args': '{\"rope_theta\":20000.0}'" in journal
    assert "The server is fired up and ready to roll!" in journal
    code, info = _get(lab, "/server_info")
    assert code == 200, info
    assert json.loads(info["json_model_override_args"]) == {"rope_theta": 20000.0}
    assert (info["device"], info["version"], info["served_model_name"]) == ("cpu", "0.5.23", "tiny-llama")
    # The server runs from the bound venv, with its scheduler and detokenizer, all in the unit's cgroup.
    family = service_processes(host)
    names = " ".join(family)
    assert f"{VENV}/bin/python -m sglang.launch_server" in names, family
    assert "sglang::scheduler" in names and "sglang::detokenizer" in names, family
    assert_serving(lab, report["release"])
    state.update(good=report["release"], family=family)
    print(f"systemd host: promoted in {wall} s (playbook); the server was ready {seconds_to_ready(host)} s "
          "after systemd started it")


def test_a_release_the_model_rejects_fails_readiness_and_the_host_is_rolled_back(
        lab: kit.Lab, inventory: Path, tmp_path: Path, state: dict) -> None:
    # 3 query heads cannot share 2 KV heads: the real model fails its warm-up forward.
    deployment = yaml.safe_load((inventory / "group_vars" / "all" / "deployment.yml").read_text())
    bad = {"combined": {**deployment["combined"], "model_overrides": {"num_key_value_heads": 2}}}
    started = time.monotonic()
    proc = lab.playbook("deploy.yml", inventory, "-e", json.dumps(bad), reports=tmp_path, timeout=1200)
    wall = round(time.monotonic() - started, 1)
    assert proc.returncode != 0
    report = checks.report(tmp_path)
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "readiness"), output(proc)
    assert report["serving_release"] == state["good"]
    readiness = next(g for g in report["gates"] if g["name"] == "readiness")
    summary = readiness["summary"]
    assert summary.startswith(f"{UNIT} on host {HOST} did not start: it "), summary
    # The end of the real traceback, read from the journal: a frame of sglang's and the error.
    assert "RuntimeError: Number of heads in key and value must divide the number of heads in" in summary, summary
    assert "site-packages/sglang/" in summary, summary
    assert readiness["seconds"] < 300, readiness["seconds"]
    assert f"release {state['good']} is serving again and verified" in proc.stdout, output(proc)
    assert_serving(lab, state["good"])
    print(f"systemd host: the rejected release failed readiness after {readiness['seconds']:.1f} s; rolled back "
          f"in a {wall} s playbook, the restored server ready {seconds_to_ready(lab.hosts[HOST])} s after its start")


def test_stop_leaves_no_process_of_the_service(lab: kit.Lab, inventory: Path, state: dict) -> None:
    host = lab.hosts[HOST]
    family = service_processes(host)
    assert any("sglang::scheduler" in p for p in family) and any("sglang::detokenizer" in p for p in family), family
    started = time.monotonic()
    proc = lab.playbook("stop.yml", inventory, timeout=600)
    wall = round(time.monotonic() - started, 1)
    assert proc.returncode == 0, output(proc)
    assert checks.unit_state(host, UNIT) == ("inactive", "disabled")
    assert service_processes(host) == [], "left running after stop"
    print(f"systemd host: stop.yml took {wall} s")
