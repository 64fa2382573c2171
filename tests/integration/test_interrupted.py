"""Interrupted and concurrent runs against the simulated host, with the real playbooks and processes.

The controller (ansible-playbook, its workers and the modules they run) is SIGKILLed at each phase of a
deploy: the test reads the phase from the host's lock record, as an operator would, and kills the real
processes - the controller's machine dying with everything it ran, as a dropped ssh session ends the modules
on a host. Ansible detaches each worker into a session of its own, so the process group alone would leave a
module running on; one module run can carry several phases (a host's stop, GPU wait, switch and start). The next
deploy.yml (or rollback.yml) must say in one line which run died in which phase, repair, and end with a
verified release serving and every earlier release still on disk. Two runs at once: the second (deploy,
verify or stop) fails fast naming the live holder, and the first finishes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.integration.simhost import READINESS, REPO, SMALL_NEEDLE_RULE, VENV_BIN, SimHost

pytestmark = pytest.mark.integration
# Small gates (the soak is off): what is under test is the run's state on the host, not the gates.
GRID = ["-e", "needle_required_tokens=2000", "-e", '{"needle_lengths": [1000, 2000], "needle_depths": [0.2]}',
        "-e", "readiness_deadline_s=60", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120",
        "-e", "soak_enabled=false", *SMALL_NEEDLE_RULE,
        # "Nothing lost" is about interruptions: keep every release, so the keep-5 pruning of a
        # successful switch (a deliberate policy) cannot hide or fake a loss across this module's deploys.
        "-e", "dsv4_release_keep=50"]


def start(host: SimHost, name: str, *extra: str) -> subprocess.Popen:
    """ansible-playbook in its own process group (so the whole controller can be killed at once)."""
    cmd = [str(VENV_BIN / "ansible-playbook"), f"playbooks/{name}", "-i", str(host.inventory),
           "-e", f"dsv4_report_dir={host.reports}", *extra]
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def lock_record(host: SimHost) -> dict:
    try:
        return json.loads((host.install_root / "deploy.lock").read_text())
    except (OSError, ValueError):
        return {}


def descendants(pid: int) -> set[int]:
    """Every live process descended from `pid` (from /proc: each process's parent)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_controller(proc: subprocess.Popen) -> None:
    """SIGKILL the controller and everything it runs, by PID: each is stopped first (SIGSTOP, until no new one
    appears), so none can start another or record one more phase, then killed."""
    frozen: set[int] = set()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGSTOP)
    while new := descendants(proc.pid) - frozen:
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= new
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def kill_at(host: SimHost, proc: subprocess.Popen, phase: str, timeout: float = 400) -> dict:
    """SIGKILL the controller and what it runs once the lock records `phase`; the record at that moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = lock_record(host)
        if record.get("phase", "").startswith(phase):
            kill_controller(proc)
            return lock_record(host)
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before phase {phase}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.01)
    kill_controller(proc)
    pytest.fail(f"phase {phase} never recorded")


def kill_when(proc: subprocess.Popen, reached: Callable[[], bool], what: str, timeout: float = 400) -> None:
    """SIGKILL the controller's process group as soon as `reached()` (polled); fails naming `what` if the run
    ends first or it never comes. The group is killed on any way out."""
    deadline = time.monotonic() + timeout
    try:
        while not reached():
            if proc.poll() is not None:
                pytest.fail(f"the run ended (rc {proc.returncode}) before {what}:\n{proc.stdout.read()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} never came")
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def releases(host: SimHost) -> set[str]:
    return set(os.listdir(host.install_root / "releases"))


def verified(host: SimHost) -> list[str]:
    return json.loads((host.install_root / "state.json").read_text()).get("good", [])


def serves(host: SimHost) -> bool:
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "Say OK"}], "max_tokens": 8}
    resp = httpx.post(f"{host.endpoint}/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {host.api_key}"})
    return resp.status_code == 200


@pytest.fixture(scope="module")
def deployed(sim_host: SimHost) -> SimHost:
    proc = sim_host.playbook("deploy.yml", *GRID, *READINESS)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return sim_host


# Each case deploys another harmless variant (a different release), so every kill interrupts a real switch.
PHASES = [("release-written", "warmup_s=0.1"), ("switch: stopped", "warmup_s=0.2"),
          ("switch: started", "warmup_s=0.3"), ("gates", "warmup_s=0.4")]


@pytest.mark.parametrize(("phase", "variant"), PHASES, ids=[p for p, _ in PHASES])
def test_controller_killed_then_the_next_deploy_repairs(deployed: SimHost, phase: str, variant: str) -> None:
    host = deployed
    before = releases(host)
    args = ["-e", f"sim_faults={variant}", *GRID]
    record = kill_at(host, start(host, "deploy.yml", *args), phase)
    assert record["phase"] == phase and record["controller_pid"]
    proc = host.playbook("deploy.yml", *args, *READINESS)
    assert proc.returncode == 0, proc.stdout[-5000:]
    explained = [ln for ln in proc.stdout.splitlines() if "died during phase" in ln]
    assert explained and f"previous run {record['run_id']}" in explained[0] and f"'{phase}'" in explained[0]
    assert host.report()["verdict"] == "promoted"
    assert host.active_release() in verified(host)
    assert before <= releases(host)
    assert serves(host)
    assert not (host.install_root / "deploy.lock").exists()


def test_controller_killed_during_a_rollback_then_rollback_yml_finishes_it(deployed: SimHost) -> None:
    host = deployed
    good = host.active_release()
    before = releases(host)
    # The new decode dies at start: the deploy rolls back to `good`, and dies while doing so.
    crash = '{"sim_faults_by_role": {"decode": "crash_on_start"}}'
    # Its readiness waits out its deadline on the crashed decode: 10 s of it shows the failure as well as
    # GRID's 60 (the run is killed before its rollback's own readiness, which would use it too).
    record = kill_at(host, start(host, "deploy.yml", "-e", crash, *GRID, "-e", "readiness_deadline_s=10"),
                     "rollback: stopped")
    assert record["target"] == good
    proc = host.playbook("rollback.yml", *GRID)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert any("died during phase 'rollback: stopped'" in ln for ln in proc.stdout.splitlines())
    assert f"release {good} is serving and verified" in proc.stdout
    assert host.active_release() == good and good in verified(host)
    assert before <= releases(host)
    assert serves(host)


def test_a_second_run_fails_fast_naming_the_live_holder(deployed: SimHost) -> None:
    host = deployed
    # A new variant (a release to switch to); long deadlines, should the hold fall inside a gate.
    first = start(host, "deploy.yml", *GRID, "-e", "sim_faults=warmup_s=0.5", "-e", "readiness_deadline_s=600",
                  "-e", "smoke_deadline_s=600", "-e", "needle_deadline_s=600")
    try:
        deadline = time.monotonic() + 300
        while not lock_record(host).get("phase", "").startswith(("release-written", "switch", "gates")):
            assert time.monotonic() < deadline and first.poll() is None, "the first deploy never took the lock"
            time.sleep(0.05)
        # The first deploy must still hold the lock while three more runs are refused: its controller is
        # held (SIGSTOP: alive, as a slow one is) for as long as they take, then let go to finish. Before,
        # a 60 s simulated load held it, a minute of every CI run spent waiting.
        os.killpg(first.pid, signal.SIGSTOP)
        holder = lock_record(host)
        for playbook in ("deploy.yml", "verify.yml", "stop.yml"):
            t0 = time.monotonic()
            second = host.playbook(playbook, *GRID)
            assert second.returncode != 0, f"{playbook} ran beside a deploy"
            assert "another run holds" in second.stdout and holder["run_id"] in second.stdout
            assert "that run is alive" in second.stdout
            assert first.poll() is None, f"{playbook} outlived the deploy it should have refused fast"
            assert time.monotonic() - t0 < 120
        os.killpg(first.pid, signal.SIGCONT)
        out, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 0, out[-5000:]
    assert host.report()["verdict"] == "promoted" and serves(host)


def test_an_empty_lock_file_is_taken_over_with_a_clear_line(deployed: SimHost) -> None:
    host = deployed
    (host.install_root / "deploy.lock").write_text("")
    proc = host.playbook("verify.yml", "-e", '{"dsv4_gates_names": ["readiness"]}', *GRID)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "the lock file is empty or unreadable" in proc.stdout
    assert not Path(host.install_root / "deploy.lock").exists()
