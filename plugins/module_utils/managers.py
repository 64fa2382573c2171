"""The service manager of an install root, and what its services logged (standard library only)."""

from __future__ import annotations

from typing import Union

from ansible_collections.dsv4.deploy.plugins.module_utils.files import read_from
from ansible_collections.dsv4.deploy.plugins.module_utils.supervisor import Supervisor
from ansible_collections.dsv4.deploy.plugins.module_utils.systemd import Systemd
from ansible_collections.dsv4.deploy.plugins.module_utils.text import redact

# Union, not |: this line runs on the host, whose Python may be older than 3.10.
Manager = Union[Supervisor, Systemd]  # noqa: UP007
# The options every module that reaches the service manager takes (its argument_spec entries).
MANAGER_OPTIONS = {
    "manager": {"type": "str", "choices": ["systemd", "supervisor"], "required": True},
    "install_root": {"type": "path", "required": True},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    "supervisor_bin_dir": {"type": "path"},
}


def open_manager(kind: str, root: str, supervisor_bin_dir: str | None = None,
                 unit_dir: str = "/etc/systemd/system") -> Manager:
    """The client of `kind` (supervisor or systemd) for the services under `root`."""
    return Supervisor(root, supervisor_bin_dir) if kind == "supervisor" else Systemd(root, unit_dir)


def log_since(mgr: Manager, name: str, offset: int = 0, invocation: str | None = None) -> str:
    """What `name` logged since its start (its log file from `offset`, or its journal for `invocation`),
    API keys redacted: sglang prints its server_args, the key among them."""
    if isinstance(mgr, Supervisor):
        return redact(read_from(mgr.log_path(name), offset))
    return redact(mgr.logs(name, invocation or None))
