"""The roll's steps (rollout/rolling.py) carried out against the REAL sglang-router 0.3.2 (and smg 1.13) with simulated
2P2D workers on loopback, under a continuous client (dsv4deploy.rollout.downtime): each step takes its workers out
of the production router through the worker API (dsv4_router_workers, drained), stops them (SIGTERM),
starts their replacements on the same GPUs and ports, gates them behind the step's preview router
(rolling.preview_router_argv: readiness, then the smoke gate itself) and adds them back. The deploy
playbook runs the same steps (tests/integration/test_rolling.py); this proves, behind smg too, that the
plan's pacing keeps the router serving, and that a step whose new workers fail their gate stops the roll
with the others still serving."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from simhelpers import PYTHON, REPO, Launcher, Proc, chat, free_port, sim_env, wait_status

from dsv4deploy.gates.smoke import run_smoke
from dsv4deploy.plan import services
from dsv4deploy.rollout import rolling
from dsv4deploy.rollout.downtime import DowntimeClient
from dsv4deploy.spec import Deployment, load_spec
from tests.unit.plugins.runner import run_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from fixture_specs import PD_COMMON, host_vars

pytest.importorskip("sglang_router", reason="needs sglang-router 0.3.2 (extra 'sim')")
pytestmark = pytest.mark.integration


SMG_PYTHON = REPO / ".smg-venv" / "bin" / "python"
ROUTERS = {"sglang-router": ([PYTHON, "-m", "sglang_router.launch_router"], "0.3.2"),
           "smg": ([str(SMG_PYTHON), "-m", "smg.launch_router"], "1.13.0")}


def _spec(router: str) -> Deployment:
    """2P2D on one simulated 8-GPU host, tp 2 per worker, free loopback ports, behind `router`."""
    worker = {"host": "local", "tp_size": 2, "mem_fraction_static": 0.8}
    data = {**copy.deepcopy(PD_COMMON), "api_key": None,
            "router_implementation": router, "router_launcher": ROUTERS[router][0],
            "prefill": [{**worker, "gpus": [2 * i, 2 * i + 1], "port": free_port(), "bootstrap_port": free_port()}
                        for i in range(2)],
            "decode": [{**worker, "gpus": [4 + 2 * i, 5 + 2 * i], "port": free_port()} for i in range(2)],
            "router": {"host": "local", "port": free_port(), "listen": "127.0.0.1", "prometheus_port": free_port()}}
    return load_spec(data, {"local": host_vars("supervisor", ansible_host="127.0.0.1", listen="127.0.0.1")})


class Host:
    """The simulated host: one process per worker (by spec path) and the production router."""

    def __init__(self, spec: Deployment, launcher: Launcher, state: Path) -> None:
        self.spec, self.launcher, self.state = spec, launcher, state
        self.workers: dict[str, Proc] = {}
        self.failure = ""  # why the last step's new workers failed their gate, with the preview router's log
        self.by_path = {w.path: w for ws in rolling.roll_workers(spec).values() for w in ws}

    def start_worker(self, path: str, faults: str = "") -> None:
        role, index = path[:-3], int(path[-2])
        w = getattr(self.spec, role)[index]
        args = ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", self.spec.model.served_name,
                "--tp-size", "2", "--host", "127.0.0.1", "--port", str(w.port), "--enable-metrics",
                "--disaggregation-mode", role, "--base-gpu-id", str(w.gpus[0])]
        if role == "prefill":
            args += ["--disaggregation-bootstrap-port", str(w.bootstrap_port)]
        self.workers[path] = self.launcher.sim(args, sim_env(self.state, faults), name=path, wait=False)

    def api_workers(self, paths: list[str]) -> list[dict]:
        """Worker-API entries of `paths` (a prefill with its bootstrap port)."""
        out = []
        for path in paths:
            role, index = path[:-3], int(path[-2])
            entry = {"url": self.by_path[path].url, "worker_type": role}
            if role == "prefill":
                entry["bootstrap_port"] = self.spec.prefill[index].bootstrap_port
            out.append(entry)
        return out


@pytest.fixture
def host(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Host]:
    """The old release's 2P2D serving behind the production router (rendered by dsv4deploy.plan.services);
    sglang-router unless the test is parametrized with `router`."""
    router_kind = getattr(request, "param", "sglang-router")
    if router_kind == "smg" and not SMG_PYTHON.exists():
        pytest.skip(f"needs smg 1.13.0 in its own venv ({SMG_PYTHON}); ./scripts/setup.sh builds it")
    spec = _spec(router_kind)
    launcher = Launcher(tmp_path)
    try:
        h = Host(spec, launcher, tmp_path / "host")
        (tmp_path / "host").mkdir()
        for path in h.by_path:
            h.start_worker(path)
        router = next(d for d in services.build_services(spec) if d.role == "router")
        launcher.start(router.argv, port=spec.router.port, name="router", timeout=30)
        h.router_url, h.router_kind = router.url, router_kind
        wait_status(f"{router.url}/readiness", 200, timeout=30)
        yield h
    finally:
        launcher.close()


def _workers_module(tmp_path: Path, host: Host, paths: list[str], state: str) -> dict:
    out = run_module("dsv4_router_workers", tmp_path, router_url=host.router_url, router=host.router_kind,
                     router_version=ROUTERS[host.router_kind][1], workers=host.api_workers(paths), state=state,
                     **({"drain_s": 10} if state == "absent" else {}))
    assert not out.get("failed"), out
    return out


def _step(tmp_path: Path, host: Host, step: dict, faults: str = "") -> bool:
    """One roll step; False (its new workers stopped) when they fail their gate behind the preview router."""
    paths = [w["path"] for w in step["workers"]]
    _workers_module(tmp_path, host, paths, "absent")
    for path in paths:
        host.workers[path].stop(timeout=10)  # the server's own SIGTERM drain
    for path in paths:
        host.start_worker(path, faults)
    port = free_port()
    preview = host.launcher.start(rolling.preview_router_argv(host.spec, step, port, free_port()), port=port,
                                  name=f"preview-{step['step']}", timeout=30)
    try:
        wait_status(f"http://127.0.0.1:{port}/readiness", 200, timeout=6)
        # The smoke gate itself (retried with backoff): smg answers /readiness 200 a moment before its
        # newly registered prefill takes requests ("No prefill workers available").
        smoke = run_smoke(f"http://127.0.0.1:{port}", host.spec.model.served_name, deadline_s=10,
                          initial_backoff_s=0.3, max_backoff_s=1, request_timeout_s=5)
        assert smoke.passed, smoke.summary
    except AssertionError as exc:
        host.failure = f"{exc}\n--- preview router log ---\n{preview.text()[-2000:]}"
        for path in paths:
            host.workers[path].stop()
        return False
    finally:
        preview.stop()
    _workers_module(tmp_path, host, paths, "present")
    return True


@pytest.mark.parametrize("host", list(ROUTERS), indirect=True)
def test_a_rolling_2p2d_fails_no_request(host: Host, tmp_path: Path) -> None:
    steps = rolling.roll_steps(host.spec)
    assert len(steps) == 2
    with DowntimeClient(host.router_url, host.spec.model.served_name, concurrency=2) as client:
        for step in steps:
            assert _step(tmp_path, host, step), host.failure
    figures = client.figures
    print(f"rolling 2P2D behind {host.router_kind}, two steps: {figures.line()}")  # with pytest -s
    assert figures.sent > 20 and figures.failed == 0, figures.line() + f" {figures.failures}"
    registered = run_module("dsv4_router_workers", tmp_path, router_url=host.router_url, router=host.router_kind,
                            router_version=ROUTERS[host.router_kind][1], state="query")["workers"]
    assert {w["url"] for w in registered if w.get("status") != "draining"} == {w.url for w in host.by_path.values()}


def test_a_step_that_fails_its_gate_stops_the_roll_with_the_others_serving(host: Host, tmp_path: Path) -> None:
    first, second = rolling.roll_steps(host.spec)
    with DowntimeClient(host.router_url, host.spec.model.served_name, concurrency=2) as client:
        assert _step(tmp_path, host, first), host.failure
        assert not _step(tmp_path, host, second, faults="never_ready")
        status, reply = chat(host.router_url, "Say OK", max_tokens=5)
    assert status == 200, reply
    assert client.figures.failed == 0, client.figures.line() + f" {client.figures.failures}"
    # The router serves step 1's renewed pair alone; step 2's failed workers were stopped, never joined.
    registered = run_module("dsv4_router_workers", tmp_path, router_url=host.router_url, router="sglang-router",
                            router_version="0.3.2", state="query")["workers"]
    assert {w["url"] for w in registered} == {w["url"] for w in host.api_workers(["prefill[0]", "decode[0]"])}
    assert all(host.workers[p].popen.poll() is not None for p in ("prefill[1]", "decode[1]"))
    table = rolling.release_table([first, second], "old", "new", done=1, failed_step=2)
    assert table[-1] == "| 2 (failed) | new | new | stopped | stopped |"
