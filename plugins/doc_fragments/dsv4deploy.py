"""Documentation shared by dsv4deploy's modules and action plugins (ansible-doc merges it in).

A module names these by their FQCN, `dsv4.deploy.dsv4deploy.<FRAGMENT>`, in
`extends_documentation_fragment`: a clone finds them through its collections path, the wheel and the
tarball as they are. A module's own entry for an attribute wins over a fragment's.
"""

from __future__ import annotations


class ModuleDocFragment:
    """The shared blocks: ACTION, CONTROLLER, READ_ONLY, POSIX, REPORT and SERVICE_MANAGER."""

    # An action plugin whose controller side runs dsv4deploy's Python core and whose host side is a
    # module (dsv4_worker_probe): the plugin says what its action does on the hosts.
    ACTION = r"""
attributes:
  action:
    support: full
    description: An action plugin.
notes:
  - Needs the Python package C(dsv4deploy) on the controller (C(pip install dsv4deploy)).
"""

    # An action plugin that works on the controller only (it runs dsv4deploy's Python core there) and
    # changes nothing on a host.
    CONTROLLER = r"""
notes:
  - Needs the Python package C(dsv4deploy) on the controller (C(pip install dsv4deploy)).
attributes:
  action:
    support: full
    description: Runs on the controller as an action plugin.
  diff_mode:
    support: none
    description: Nothing on a host is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
    description: The controller.
"""

    # Reads and changes nothing, on any host with Python 3.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Only reads.
  diff_mode:
    support: none
    description: Nothing is changed.
  platform:
    support: full
    platforms: posix
    description: Any host with Python 3.
"""

    # A controller-side report writer (dsv4_write_report, dsv4_isolate_report). Named before CONTROLLER:
    # the first fragment naming an attribute wins (its diff_mode).
    REPORT = r"""
options:
  reports_dir:
    type: path
    required: true
    description:
      - Folder on the controller the reports are written under. A relative path is taken from the
        directory C(ansible-playbook) runs in.
notes:
  - Run it with C(run_once). The report is a record on the controller, not a change to a host.
attributes:
  check_mode:
    support: none
    description: Writes files on the controller - in check mode it writes nothing and says it was
      skipped ("check mode - no report was written").
  diff_mode:
    support: none
    description: Reports are new files; there is nothing to diff.
"""

    # Any POSIX host (a module that changes files there).
    POSIX = r"""
attributes:
  platform:
    support: full
    platforms: posix
    description: Any POSIX host.
"""

    # A module that reaches the service manager of an install root (plugins/module_utils/managers.py).
    SERVICE_MANAGER = r"""
options:
  manager:
    type: str
    choices: [systemd, supervisor]
    required: true
    description:
      - Service manager.
  install_root:
    type: path
    required: true
    description:
      - Root of the releases on this host.
  unit_dir:
    type: path
    default: /etc/systemd/system
    description:
      - Where systemd units are installed.
  supervisor_bin_dir:
    type: path
    description:
      - Folder holding C(supervisord) and C(supervisorctl) (default the PATH).
attributes:
  platform:
    support: full
    platforms: posix
    description: A Linux host with systemd, or with supervisor installed.
"""
