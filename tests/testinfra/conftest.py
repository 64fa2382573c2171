"""Options of the deployed-state suite; without an install root its tests skip, saying how to run them.

    pytest tests/testinfra --hosts=local:// --dsv4-install-root .state/local
    pytest tests/testinfra --hosts=ssh://root@gpu1 --dsv4-install-root /opt/dsv4deploy

`--hosts` comes from pytest-testinfra (default: this machine). The install root may also be given
as DSV4_INSTALL_ROOT, supervisorctl as DSV4_SUPERVISORCTL.
"""

from __future__ import annotations

import os

import pytest

INSTALL_ROOT_ENV = "DSV4_INSTALL_ROOT"
SUPERVISORCTL_ENV = "DSV4_SUPERVISORCTL"
NEEDS_ROOT = "dsv4_install_root"
SKIP_REASON = (f"no deployment to check: pass --dsv4-install-root ROOT (or set {INSTALL_ROOT_ENV}) "
               "and --hosts=local:// or ssh://HOST to check a deployed host")


def pytest_addoption(parser: pytest.Parser) -> None:
    """--dsv4-install-root and --dsv4-supervisorctl."""
    group = parser.getgroup("dsv4deploy", "dsv4deploy deployed-state checks (tests/testinfra)")
    group.addoption("--dsv4-install-root", default=None, metavar="ROOT",
                    help=f"install_root of the deployment on the target hosts (env {INSTALL_ROOT_ENV})")
    group.addoption("--dsv4-supervisorctl", default=None, metavar="PATH",
                    help=f"supervisorctl on the targets (env {SUPERVISORCTL_ENV}; default: supervisorctl)")


def install_root_of(config: pytest.Config) -> str | None:
    """The install root from the option, else the environment; None when neither is set.

    getoption has a default because this conftest's options are only registered when pytest
    loads it at start (e.g. `pytest` at the repository root, or a path under tests/testinfra).
    """
    return config.getoption("dsv4_install_root", default=None) or os.environ.get(INSTALL_ROOT_ENV) or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every test that needs a deployment when none is named."""
    if install_root_of(config):
        return
    marker = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if NEEDS_ROOT in getattr(item, "fixturenames", ()):
            item.add_marker(marker)


@pytest.fixture(scope="session")
def dsv4_install_root(pytestconfig: pytest.Config) -> str:
    """The install root on the targets (skips when none is given)."""
    root = install_root_of(pytestconfig)
    if not root:
        pytest.skip(SKIP_REASON)
    return root


@pytest.fixture(scope="session")
def dsv4_supervisorctl(pytestconfig: pytest.Config) -> str:
    """The supervisorctl command on the targets."""
    return (pytestconfig.getoption("dsv4_supervisorctl", default=None) or os.environ.get(SUPERVISORCTL_ENV)
            or "supervisorctl")
