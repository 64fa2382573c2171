"""The playbooks' input names, in one place: each new name, and the old one it replaces for one release.

Scheme: an input the operator gives one playbook (`-e`) is `dsv4_<playbook>_<what>` (rollback.yml's
release is `dsv4_rollback_release`); an input of a role is `dsv4_<role>_<what>`. The old unprefixed
names still work for one release and warn, naming the new one (the roles' defaults fall back to them;
`dsv4_build_plan state=roots`, which stop, rollback, verify and isolate run first, says the warnings). The
deployment spec's keys (`topology`, `model`, `router`, ...) are not renamed: they are the inventory's
own vocabulary (dsv4deploy.spec). The misspelt-variable check learns these names from `known_names()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# old name -> new name. Removed in the release after next.
DEPRECATED_ALIASES: dict[str, str] = {
    "release": "dsv4_rollback_release",
    "purge": "dsv4_stop_purge",
    "suite": "dsv4_isolate_suite",
    "isolate_force": "dsv4_isolate_force",
    "isolate_gpus": "dsv4_isolate_gpus",
    "isolate_port": "dsv4_isolate_port",
    "isolate_env": "dsv4_isolate_env",
    "isolate_report_dir": "dsv4_isolate_report_dir",
}

# Every playbook input by its new name, with the playbook that reads it.
PLAYBOOK_INPUTS: dict[str, str] = {
    "dsv4_rollback_release": "rollback.yml: the release to restore (default the newest verified one not active)",
    "dsv4_rollback_allow_failed": "rollback.yml: restore a release that failed its gates all the same",
    "dsv4_stop_purge": "stop.yml: also remove what dsv4deploy put under the install root",
    "dsv4_isolate_suite": "isolate.yml: the suites to run on each side (smoke, needle, soak)",
    "dsv4_isolate_force": "isolate.yml: run even when the serving release is not healthy",
    "dsv4_isolate_gpus": "isolate.yml: the combined server's GPUs",
    "dsv4_isolate_port": "isolate.yml: the combined server's port",
    "dsv4_isolate_env": "isolate.yml: environment switches changed on purpose on the combined server",
    "dsv4_isolate_report_dir": "isolate.yml: where the experiment's report goes",
    "dsv4_reports_dir": "every playbook: where reports go",
    "dsv4_release_keep": "deploy.yml, rollback.yml: releases kept per host",
}


def known_names() -> set[str]:
    """Every playbook input name this release knows, old and new (for the "did you mean" check)."""
    return set(PLAYBOOK_INPUTS) | set(DEPRECATED_ALIASES) | set(DEPRECATED_ALIASES.values())


def deprecation_warnings(variables: Mapping[str, Any]) -> list[str]:
    """One warning per old name found in `variables`, naming its replacement."""
    return [f"'{old}' is deprecated and will be removed in the release after next: use '{new}' instead"
            + (f" (both are set; '{new}' wins)" if new in variables else "")
            for old, new in DEPRECATED_ALIASES.items() if old in variables]
