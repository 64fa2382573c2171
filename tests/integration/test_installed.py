"""The tool as a user installs it: a wheel built from this repository, pip-installed into a new venv,
used from an empty folder outside the repository with no ansible.cfg and no paths set.

init writes the embedded host's inventory; the collection's playbooks run by name
(dsv4.deploy.deploy, .rollback, .isolate, .stop); ansible-doc documents every module and action.
The only change to what a user runs: the starter's ports are moved to a free block.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.simhost import REPO, SMALL_SOAK, assign_ports, free_port_block, stop_supervisord
from tests.unit.test_docs import quickstart_extras

pytestmark = pytest.mark.integration

# Every module and action plugin of the collection.
PLUGINS = ["dsv4_access", "dsv4_host", "dsv4_lock", "dsv4_host_releases", "dsv4_service_state",
           "dsv4_service_state_info", "dsv4_worker_check", "dsv4_build_plan", "dsv4_run_gates", "dsv4_write_report",
           "dsv4_worker_probe", "dsv4_isolate_report"]
# A user's own playbook: the rollout is one role; its outcome comes back as documented facts.
USER_PLAYBOOK = """\
- name: My rollout
  hosts: dsv4
  gather_facts: false
  any_errors_fatal: true
  roles:
    - dsv4.deploy.dsv4_rollout
  post_tasks:
    - name: Use what the role hands on
      ansible.builtin.debug:
        msg: "my verdict: {{ dsv4_rollout_verdict }}, serving {{ dsv4_rollout_serving }}"
"""
FAST = ["-e", "readiness_deadline_s=20", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK]


@dataclass
class Installed:
    """A venv with only the wheel installed, and an empty working folder outside the repository."""

    venv: Path
    work: Path
    version: str

    def env(self) -> dict[str, str]:
        # Nothing from the developer's shell that could point Ansible or Python at the repository.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV", "DSV4"))}
        env.update(PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", HOME=str(self.work))
        return env

    def run(self, *cmd: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / cmd[0]), *cmd[1:]], cwd=self.work, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def report(self) -> dict:
        return json.loads((self.work / "reports" / "latest" / "report.json").read_text())

    def active_release(self) -> str | None:
        link = self.work / "site" / ".state" / "current"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None


def _must(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"{what} failed (rc {proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("installed")
    dist, venv, work = root / "dist", root / "venv", root / "work"
    work.mkdir()
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, f"building the wheel failed:\n{build.stderr[-3000:]}"
    (wheel,) = dist.glob("dsv4deploy-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # With the README's quickstart extras, so its first report is checked whole (heatmap included).
    extras = ",".join(sorted(quickstart_extras()))
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"{wheel}[{extras}]"],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, f"pip install of the wheel failed:\n{pip.stderr[-3000:]}"
    inst = Installed(venv=venv, work=work, version=wheel.name.split("-")[1])
    try:
        yield inst
    finally:
        # What the tests started, stopped by its supervisord (test_collection_stop_stops_everything runs the
        # stop playbook itself; a second run here cost a playbook run).
        stop_supervisord(work / "site" / ".state")


def test_init_writes_the_local_example(installed: Installed) -> None:
    _must(installed.run("dsv4deploy", "init", "site", "--example", "local"), "init")
    assert (installed.work / "site" / "hosts.yml").is_file()
    assign_ports(installed.work / "site", free_port_block(5))
    proc = _must(installed.run("dsv4deploy", "validate", "-i", "site"), "validate")
    assert "topology pd" in proc.stdout
    refused = installed.run("dsv4deploy", "init", "site", "--example", "2p1d")
    assert refused.returncode == 2 and "already holds different" in refused.stderr


def test_collection_deploy_promotes_from_outside_the_repository(installed: Installed) -> None:
    proc = _must(installed.run("ansible-playbook", "dsv4.deploy.deploy", "-i", "site", "-e", "topology=pd",
                               "-e", "index_topk=1024", *FAST), "deploy")
    assert "[WARNING]" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    report = installed.report()
    assert report["verdict"] == "promoted"
    assert all(g["status"] == "passed" for g in report["gates"])
    assert installed.active_release() == report["release"]
    # The whole report, as the quickstart shows it: the needle heatmap is there, not skipped.
    latest = installed.work / "reports" / "latest"
    markdown = (latest / "report.md").read_text()
    assert "Heatmap skipped" not in markdown and "![needle recall heatmap](needle-heatmap.png)" in markdown
    assert (latest / "needle-heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_version_and_releases_from_the_installed_package(installed: Installed) -> None:
    proc = _must(installed.run("dsv4deploy", "--version"), "--version")
    assert proc.stdout.strip() == f"dsv4deploy {installed.version}"
    proc = _must(installed.run("dsv4deploy", "releases", "-i", "site"), "releases")
    active = installed.active_release()
    assert active and any(line.startswith(f"  * {active} ") and line.rstrip().endswith("verified  (active)")
                          for line in proc.stdout.splitlines()), proc.stdout


def test_a_playbook_of_ones_own_uses_the_rollout_role_then_rollback_returns(installed: Installed) -> None:
    first = installed.active_release()
    (installed.work / "mine.yml").write_text(USER_PLAYBOOK)
    proc = _must(installed.run("ansible-playbook", "mine.yml", "-i", "site", "-e", "topology=combined", *FAST),
                 "deploy through the role")
    assert "my verdict: promoted" in proc.stdout
    second = installed.active_release()
    assert second != first
    _must(installed.run("ansible-playbook", "dsv4.deploy.rollback", "-i", "site", *FAST), "rollback")
    assert installed.active_release() == first
    assert installed.report()["verdict"] == "rolled_back"


def test_collection_isolate_runs_the_experiment_and_restores_the_release(installed: Installed) -> None:
    release = installed.active_release()
    _must(installed.run("ansible-playbook", "dsv4.deploy.isolate", "-i", "site", "-e", "suite=smoke", *FAST),
          "isolate")
    report = json.loads((installed.work / "reports" / "isolate" / "latest" / "report.json").read_text())
    assert (report["verdict"], report["restored"], report["serving_release"]) == ("clean", True, release)
    assert installed.active_release() == release


def test_collection_stop_stops_everything(installed: Installed) -> None:
    _must(installed.run("ansible-playbook", "dsv4.deploy.stop", "-i", "site"), "stop")
    assert not (installed.work / "site" / ".state" / "supervisor" / "supervisord.pid").exists()


def test_ansible_doc_documents_the_rollout_role(installed: Installed) -> None:
    proc = _must(installed.run("ansible-doc", "-t", "role", "dsv4.deploy.dsv4_rollout"), "ansible-doc -t role")
    assert "dsv4_reports_dir" in proc.stdout


@pytest.fixture(scope="module")
def plugin_docs(installed: Installed) -> tuple[dict, str]:
    """ansible-doc --json of every plugin at once (one ansible-doc start instead of one per plugin):
    (the docs by full name, its stderr)."""
    proc = _must(installed.run("ansible-doc", "--json", *(f"dsv4.deploy.{p}" for p in PLUGINS)), "ansible-doc")
    return json.loads(proc.stdout), proc.stderr


@pytest.mark.parametrize("plugin", PLUGINS)
def test_ansible_doc_documents_every_module_and_action(plugin_docs: tuple[dict, str], plugin: str) -> None:
    docs, stderr = plugin_docs
    assert f"dsv4.deploy.{plugin}" in docs, f"ansible-doc has no doc of {plugin}:\n{stderr[-3000:]}"
    doc = docs[f"dsv4.deploy.{plugin}"]
    assert doc["doc"]["short_description"]
    assert doc["doc"]["options"], "every option is documented"
    assert doc["examples"].strip(), "EXAMPLES"
    assert doc["return"], "RETURN"
    assert set(doc["doc"]["attributes"]) >= {"check_mode", "diff_mode"}


def test_collection_layout_runs_from_the_installed_wheel(installed: Installed) -> None:
    # No source tree beside the installed package: the collection the wheel holds is laid out.
    proc = _must(installed.run("python", "-m", "dsv4deploy.collection_layout", "collections"), "collection_layout")
    root = installed.work / "collections" / "ansible_collections" / "dsv4" / "deploy"
    assert (installed.work / proc.stdout.strip()).resolve() == root.resolve() and "Traceback" not in proc.stderr
    assert (root / "galaxy.yml").is_file() and (root / "plugins" / "modules" / "dsv4_host_releases.py").is_file()
    assert (root / "playbooks" / "deploy.yml").is_file()
