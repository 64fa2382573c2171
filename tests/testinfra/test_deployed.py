"""A deployed host, checked the way an operator would (pytest-testinfra).

    pytest tests/testinfra/test_deployed.py --hosts=local:// --dsv4-install-root .state/local
    pytest tests/testinfra/test_deployed.py --hosts=ssh://root@gpu1 --dsv4-install-root /opt/dsv4deploy

What should be there is read from the target itself: `{install_root}/current/spec.json` and
`manifest.json`. Without --dsv4-install-root (or DSV4_INSTALL_ROOT) every test skips.
"""

from __future__ import annotations

from typing import Any

import deployed_checks as checks
import pytest


def report(problems: list[str]) -> str:
    """An assertion message: one problem per line."""
    return "\n".join(["", *problems])


@pytest.fixture(scope="module")
def deployed(host: Any, dsv4_install_root: str) -> checks.Deployed:
    """The active release of the host under test."""
    try:
        return checks.read_deployed(host, dsv4_install_root)
    except checks.DeployedStateError as exc:
        pytest.fail(f"no deployment under {dsv4_install_root}: {exc}")


@pytest.fixture(scope="module")
def manager(host: Any, deployed: checks.Deployed, dsv4_supervisorctl: str) -> checks.ServiceManager:
    """The host's service manager (systemd or our supervisord)."""
    return checks.manager_for(host, deployed, dsv4_supervisorctl)


def test_current_points_into_releases(host: Any, deployed: checks.Deployed) -> None:
    problems = checks.pointer_problems(host, deployed)
    assert not problems, report(problems)


def test_release_files_match_the_manifest(host: Any, deployed: checks.Deployed) -> None:
    problems = checks.manifest_problems(host, deployed)
    assert not problems, report(problems)


def test_release_has_a_serve_script_per_service(host: Any, deployed: checks.Deployed) -> None:
    problems = checks.layout_problems(host, deployed)
    assert not problems, report(problems)


def test_services_are_running(deployed: checks.Deployed, manager: checks.ServiceManager) -> None:
    problems = checks.running_problems(manager, deployed)
    assert not problems, report(problems)


def test_units_are_enabled_at_boot(host: Any, deployed: checks.Deployed) -> None:
    if deployed.spec.host(deployed.host_name).service_manager != "systemd":
        pytest.skip("supervisord programs start with supervisord, not at boot")
    problems = checks.enabled_problems(host, deployed)
    assert not problems, report(problems)


def test_processes_run_from_the_active_release(host: Any, deployed: checks.Deployed,
                                               manager: checks.ServiceManager) -> None:
    problems = checks.cwd_problems(host, manager, deployed)
    assert not problems, report(problems)


def test_ports_are_listening(host: Any, deployed: checks.Deployed) -> None:
    problems = checks.port_problems(host, deployed)
    assert not problems, report(problems)


def test_override_logged_since_start(deployed: checks.Deployed, manager: checks.ServiceManager) -> None:
    if not deployed.workers:
        pytest.skip(f"no server runs on {deployed.host_name}")
    problems = checks.override_problems(manager, deployed)
    assert not problems, report(problems)


def test_serve_scripts_take_the_key_from_a_file(host: Any, deployed: checks.Deployed) -> None:
    problems = checks.literal_key_problems(host, deployed)
    assert not problems, report(problems)


def test_api_key_file_is_private_and_not_in_the_release(host: Any, deployed: checks.Deployed) -> None:
    path = checks.key_file(deployed)
    if path is None:
        pytest.skip("spec.json has no api_key")
    problems = checks.key_file_problems(host, path)
    if not problems:
        problems = checks.leaked_key_problems(host, deployed, host.file(path).content_string.strip())
    assert not problems, report(problems)
