"""The continuous-verification timer's units (roles/dsv4_verify_timer/templates) as the role renders them:
systemd's own verifier accepts them, the service runs the watch once as the service user, the timer
repeats it at the interval."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "roles" / "dsv4_verify_timer" / "templates"
P = "__dsv4_verify_timer_"  # the role's internal names
VARS = {f"{P}deployment": "prod", f"{P}unit": "dsv4-verify-prod", f"{P}user": "daemon",
        f"{P}config": "/opt/dsv4deploy/verify-timer/watch.json", f"{P}metrics": "/opt/dsv4deploy/verify-timer/metrics",
        "dsv4_verify_timer_python": "/usr/bin/python3",
        "dsv4_verify_timer_textfile_dir": "/var/lib/prometheus/node-exporter", "dsv4_verify_timer_interval_s": 300,
        # As vars/main.yml builds it.
        f"{P}publish_argv": ["/usr/bin/python3", "-E", "-s", "-B",
                             "/opt/dsv4deploy/verify-timer/publish/textfile_publish.py",
                             "--source", "/opt/dsv4deploy/verify-timer/metrics/dsv4deploy-prod.prom",
                             "--dest", "/var/lib/prometheus/node-exporter/dsv4deploy-prod.prom", "--owner", "daemon"]}
PUBLISH = ("/usr/bin/python3 -E -s -B /opt/dsv4deploy/verify-timer/publish/textfile_publish.py "
           "--source /opt/dsv4deploy/verify-timer/metrics/dsv4deploy-prod.prom "
           "--dest /var/lib/prometheus/node-exporter/dsv4deploy-prod.prom --owner daemon")


def _render(tmp_path: Path) -> dict[str, Path]:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters["quote"] = shlex.quote  # Ansible's
    out = {}
    for kind in ("service", "timer"):
        path = tmp_path / f"dsv4-verify-prod.{kind}"
        path.write_text(env.get_template(f"dsv4-verify.{kind}.j2").render(VARS))
        out[kind] = path
    return out


def test_the_service_runs_the_watch_once_as_the_service_user_and_the_timer_repeats_it(tmp_path: Path) -> None:
    units = _render(tmp_path)
    service, timer = units["service"].read_text(), units["timer"].read_text()
    assert "ExecStart=/usr/bin/python3 -m dsv4deploy.watch --config /opt/dsv4deploy/verify-timer/watch.json --once" \
        in service
    assert "Type=oneshot" in service and "User=daemon" in service
    # It writes its one file in its own metrics folder, nothing else; root's publish step (+: outside the sandbox)
    # copies it into node_exporter's after every run, a failed one too (ExecStopPost).
    assert "\nReadWritePaths=/opt/dsv4deploy/verify-timer/metrics\n" in service
    assert f"\nExecStopPost=+{PUBLISH}\n" in service and "\nExecStartPost=" not in service
    assert "\nProtectSystem=strict\n" in service and "\nCapabilityBoundingSet=\n" in service
    assert "OnUnitActiveSec=300" in timer and "Unit=dsv4-verify-prod.service" in timer


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt-get install systemd)")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    units = _render(tmp_path)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(units["service"]), str(units["timer"])],
                          capture_output=True, text=True, timeout=60)
    # Lines about other units on this machine are not ours; ours must have no complaint.
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if "dsv4-verify-prod" in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt-get install systemd)")
def test_the_service_is_exposed_little(tmp_path: Path) -> None:
    """An HTTP client that writes one file scores at most 1.5 (it was 7.7: no capability bound, devices,
    system call filter, address families or namespaces restricted)."""
    service = _render(tmp_path)["service"]
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(service)],
                          capture_output=True, text=True, timeout=60)
    level = float(proc.stdout.rsplit("dsv4-verify-prod.service:", 1)[1].split()[0])
    assert level <= 1.5, proc.stdout


def test_supervisord_reads_the_verification_program_beside_the_releases(tmp_path: Path) -> None:
    """The program as the role renders it, in the folder our supervisord.conf includes beside the active
    release's programs: supervisord's own parser loads both, the program started with supervisord."""
    supervisor_options = pytest.importorskip("supervisor.options", reason="supervisor not installed")
    from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import Supervisor

    root = tmp_path / "root"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters["quote"] = shlex.quote  # Ansible's
    text = env.get_template("dsv4-verify.supervisor.conf.j2").render(
        {**VARS, f"{P}user": "", f"{P}dir": f"{root}/verify-timer", "dsv4_verify_timer_interval_s": 30,
         f"{P}config": f"{root}/verify-timer/100% watch.json", "dsv4_plan_host": {"install_root": str(root)}})
    for rel, body in {"verify-timer/supervisor/dsv4-verify-prod.conf": text,
                      "current/supervisor/sglang-dsv4.conf": "[program:sglang-dsv4]\ncommand=/bin/true\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    (root / "logs").mkdir()
    sup = Supervisor(str(root), None)
    (root / "supervisor").mkdir()
    Path(sup.conf).write_text(sup.config_text())
    opts = supervisor_options.ServerOptions()
    opts.configfile = sup.conf
    opts.process_config(do_usage=False)
    groups = {g.name: g.process_configs[0] for g in opts.process_group_configs}
    assert sorted(groups) == ["dsv4-verify-prod", "dsv4-verify-prod-publish", "sglang-dsv4"]
    program = groups["dsv4-verify-prod"]
    assert program.command == ("/usr/bin/python3 -m dsv4deploy.watch --config "
                               f"'{root}/verify-timer/100% watch.json' --every 30")
    assert program.autostart is True and program.stdout_logfile == f"{root}/logs/dsv4-verify-prod.log"
    # Root's publish step: no user= (supervisord's own, root), the system Python, polling at most every 5 s.
    publish = groups["dsv4-verify-prod-publish"]
    assert publish.command == f"{PUBLISH} --every 5" and publish.uid is None and publish.umask == 0o022
    assert publish.autostart is True and publish.stdout_logfile == f"{root}/logs/dsv4-verify-prod-publish.log"
