"""Documentation shared by dsv4deploy's modules and action plugins (ansible-doc merges it in).

A module names these by their FQCN, `dsv4.deploy.dsv4deploy.<FRAGMENT>`, in
`extends_documentation_fragment`: a clone finds them through its collections path, the wheel and the
tarball as they are. A module's own entry for an attribute wins over a fragment's.
"""

from __future__ import annotations


class ModuleDocFragment:
    """The shared blocks: ACTION, CONTROLLER and READ_ONLY."""

    # An action plugin that runs dsv4deploy's Python core on the controller.
    ACTION = r"""
attributes:
  action:
    support: full
    description: Runs on the controller as an action plugin.
notes:
  - Needs the Python package C(dsv4deploy) on the controller (C(pip install dsv4deploy)).
"""

    # Works on the controller only.
    CONTROLLER = r"""
attributes:
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
