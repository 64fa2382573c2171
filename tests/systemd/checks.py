"""What the systemd tier's tests look at on a host and in a run's output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.systemd.hostkit import Host, Lab

PD_UNITS = ["sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"]
INSTALL_ROOT = "/opt/dsv4deploy"
# The seeds' requirement (a 5.5K-token needle recalled) on a grid small enough for CI: index_topk
# 1024 recalls it, 512 loses it (the simulator's recall collapses beyond ~4K tokens there).
# The soak runs and must pass, at a size for CI (its power is the integration tier's subject).
GATES = {"needle_required_tokens": 5500, "needle_lengths": [1000, 5500], "needle_depths": [0.5],
         "needle_concurrency": 2, "readiness_deadline_s": 120, "smoke_deadline_s": 60, "needle_deadline_s": 300,
         # the integration tier's small soak design (5 % a test): a clean release passes after 7 sessions of 2 turns
         "soak_sessions": 12, "soak_turns": 2, "soak_acceptable_rate": 0.01, "soak_max_corruption_rate": 0.3,
         "soak_acceptable_mistake_rate": 0.01, "soak_max_mistake_rate": 0.3, "soak_alpha": 0.1, "soak_beta": 0.1}


def output(proc: subprocess.CompletedProcess) -> str:
    """A failed run's tail, for assertion messages."""
    return f"rc {proc.returncode}\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"


def report(reports: Path) -> dict[str, Any]:
    """The newest report.json of a run."""
    return json.loads((reports / "latest" / "report.json").read_text())


def active_release(host: Host) -> str:
    """The release `current` points at on `host` ('' when none)."""
    proc = host.exec(["readlink", f"{INSTALL_ROOT}/current"], check=False)
    return Path(proc.stdout.strip()).name if proc.returncode == 0 else ""


def unit_state(host: Host, unit: str) -> tuple[str, str]:
    """(is-active, is-enabled) of a unit."""
    active = host.exec(["systemctl", "is-active", unit], check=False).stdout.strip()
    enabled = host.exec(["systemctl", "is-enabled", unit], check=False).stdout.strip()
    return active, enabled


def wait_active(host: Host, units: list[str], timeout: float = 120) -> None:
    """Wait until every unit is active (after a boot); fails with their status and journal otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        states = {u: host.exec(["systemctl", "is-active", u], check=False).stdout.strip() for u in units}
        if all(s == "active" for s in states.values()):
            return
        if time.monotonic() > deadline:
            status = host.exec(["systemctl", "status", "--no-pager", "-n", "20", *units], check=False).stdout
            raise AssertionError(f"{host.name}: not all active after {timeout:.0f} s: {states}\n{status[-4000:]}")
        time.sleep(0.5)


def unit_dir_entries(host: Host) -> list[str]:
    """Our unit files installed in /etc/systemd/system."""
    out = host.sh("ls /etc/systemd/system | grep '^sglang-dsv4' || true").stdout
    return sorted(out.split())


# Where the verification timer's interpreter lives on a host (dsv4_verify_timer_python).
WATCH_PYTHON = "/opt/dsv4watch/bin/python"


def install_watch_env(host: Host) -> str:
    """A Python environment on `host` that runs ``python -m dsv4deploy.watch``, as an operator's ``pip install
    dsv4deploy`` into a venv would make: dsv4deploy is the host's copy (/opt/dsv4sim), its dependencies are the
    controller's installed ones (the same CPython 3.11 as bookworm's; the hosts have no package index), scipy
    among them: the gates import it only when they judge (the needle rule's binomial risks).
    Returns the interpreter's path."""
    found = subprocess.run([sys.executable, "-c", (
        "import sys, dsv4deploy.watch, httpx, scipy.stats\n"
        "httpx.Client().close()  # what a request imports (httpcore, h11, certifi)\n"
        "for m in list(sys.modules.values()):\n"
        "    f = getattr(m, '__file__', None) or ''\n"
        "    if '-packages' in f and '.' not in m.__name__ and not m.__name__.startswith(('_', 'dsv4deploy')):\n"
        "        print(f)\n")], capture_output=True, text=True, check=True).stdout.split()
    deps = host.merged / "opt/dsv4watch/deps"
    deps.mkdir(parents=True, exist_ok=True)
    for file in map(Path, found):
        if file.name == "__init__.py":
            shutil.copytree(file.parent, deps / file.parent.name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
            bundled = file.parent.with_name(file.parent.name + ".libs")  # a wheel's shared libraries (scipy's BLAS)
            if bundled.is_dir():
                shutil.copytree(bundled, deps / bundled.name, dirs_exist_ok=True)
        else:
            shutil.copy2(file, deps / file.name)
    host.sh("python3 -m venv --without-pip /opt/dsv4watch && chmod -R a+rX /opt/dsv4watch && "
            "printf '/opt/dsv4sim\\n/opt/dsv4watch/deps\\n' "
            "> \"$(/opt/dsv4watch/bin/python -c 'import site; print(site.getsitepackages()[0])')/dsv4.pth\"")
    return WATCH_PYTHON


# blue_green_hosts: the gates that run through the preview router (the needle and the soak are other tests' subject).
PREVIEW_GATES = ("-e", json.dumps({"dsv4_gates_names": ["readiness", "config", "smoke"]}))
ROUTER_UNIT = "sglang-dsv4-router"
# GET /workers of a router, with the key, from the controller side.
WORKERS_LIST = """import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/workers", headers={"Authorization": "Bearer " + sys.argv[2]})
print(json.dumps(sorted(w["url"] for w in json.load(urllib.request.urlopen(req, timeout=30))["workers"])))
"""


def main_pids(host: Host, units: list[str]) -> dict[str, str]:
    """The units' main PIDs on a host ('0' for a stopped one)."""
    return {u: host.exec(["systemctl", "show", "-p", "MainPID", "--value", u]).stdout.strip() for u in units}


def router_workers(lab: Lab, router: str, key: str) -> list[str]:
    """The worker URLs the production router on host `router` (port 30000) lists, read from the router itself."""
    proc = lab.run([sys.executable, "-c", WORKERS_LIST, f"http://{lab.hosts[router].address}:30000", key], timeout=60)
    assert proc.returncode == 0, output(proc)
    return json.loads(proc.stdout)


def new_release(lab: Lab, inventory: Path, reports: Path, tag: str,
                *extra: str) -> tuple[subprocess.CompletedProcess, dict[str, Any], str]:
    """A deploy of a new release (a server environment variable changed) gated through the preview router: its run,
    report and the line of its continuous client's figures."""
    proc = lab.playbook("deploy.yml", inventory, *PREVIEW_GATES, "-e",
                        json.dumps({"server_env_extra": {"DSV4_BGH": tag}}), *extra, reports=reports)
    found = report(reports)
    d = found["downtime"]
    return proc, found, f"sent {d.get('sent')}, failed {d.get('failed')}, longest gap {d.get('longest_gap_s')} s"


def assert_no_failed_request(found: dict[str, Any]) -> None:
    """The playbook's continuous client asked the production router throughout and no request failed."""
    assert found["downtime"]["sent"] > 10 and found["downtime"]["failed"] == 0, json.dumps(found["downtime"])


def assert_serves_on(lab: Lab, workers: dict[str, dict[str, int]], idle: dict[str, str], router: str,
                     key: str) -> None:
    """Each host of `workers` ({host: {unit: port}}) runs its worker units active and enabled; its idle partner
    (`idle`, {serving host: idle host}) has the same units stopped and not started at boot; the router on `router` is
    active and lists those workers only."""
    for name, units in workers.items():
        for unit in units:
            assert unit_state(lab.hosts[name], unit) == ("active", "enabled"), f"{name} {unit}"
            # Not started at boot either: a reboot of the idle host would start workers no router lists.
            other = idle[name]
            active, enabled = unit_state(lab.hosts[other], unit)
            assert active in ("inactive", "failed") and enabled != "enabled", f"{other} {unit}: {active}, {enabled}"
    assert unit_state(lab.hosts[router], ROUTER_UNIT) == ("active", "enabled")
    assert router_workers(lab, router, key) == sorted(f"http://{lab.hosts[name].address}:{port}"
                                                      for name, units in workers.items() for port in units.values())


def assert_moved(lab: Lab, proc: subprocess.CompletedProcess, found: dict[str, Any], way: str,
                 router_pid: dict[str, str], **serves_on: Any) -> None:
    """A promotion by blue_green_hosts `way` ('a -> b, ...'), under the continuous client with no failed request:
    the new workers serve (`serves_on`: assert_serves_on's arguments), the old ones stopped; the router was switched
    through its worker API, never restarted (`router_pid` its PID before); the router's host and the new workers'
    hosts record the new release; the preview router is gone."""
    assert proc.returncode == 0, output(proc)
    assert found["verdict"] == "promoted" and f"This deploy: {way}" in found["rollout"]["why"], found
    assert_no_failed_request(found)
    assert_serves_on(lab, **serves_on)
    router = lab.hosts[serves_on["router"]]
    assert main_pids(router, [ROUTER_UNIT]) == router_pid
    for name in [serves_on["router"], *serves_on["workers"]]:
        assert active_release(lab.hosts[name]) == found["release"], name
    assert not router.sh("ss -Hltn '( sport = :30100 )'").stdout.strip(), "the preview router listens"
