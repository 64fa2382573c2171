"""Paths root trusts must not lie inside a user's home: refused before anything reaches a host.

Root's host modules read and write the install root, read the API key file, run the verification's Python
(its import check) and write node_exporter's textfile folder. A home's owner can rename anything inside it and
put a folder or link of its own in its place, so a path anywhere under a home (`/home/<user>/...`, `/root/...`,
the service user's home) lets that user steer what root runs, reads or writes. The host's preflight walks
each path's real owners and modes (`trust.walk_all`); this check catches the paths that are known to be
homes from their names alone, on the controller, before any host is touched.

A host whose modules run as its service user (no become, the connecting user is the service user) has no
privilege to give away: the quickstart runs everything as the user, in its own home, and is not refused.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import pwd
from collections.abc import Mapping
from typing import Any

from dsv4deploy.spec.models import Deployment, Problem
from dsv4deploy.spec.values import install_root_problems

# Inventory variables read besides the spec's own: who the modules run as, and the verification's paths.
TRUST_KEYS = ("ansible_connection", "ansible_user", "ansible_become", "ansible_become_user",
              "dsv4_verify_timer_python", "dsv4_verify_timer_textfile_dir")
VERIFY_PATHS = ("dsv4_verify_timer_python", "dsv4_verify_timer_textfile_dir")
# The home dsv4deploy gives a service user it creates (roles/dsv4_preflight: service_user_create).
CREATED_HOME = "/var/lib/{user}"
# Homes that are system folders (nologin accounts) say nothing about who may write below them.
SYSTEM_HOMES = frozenset({"/", "/nonexistent", "/bin", "/sbin", "/usr", "/usr/bin", "/usr/sbin", "/dev/null",
                          "/var", "/var/lib", "/tmp", "/var/tmp", "/run", "/proc", "/etc", "/opt", "/srv"})


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "yes", "true", "on")


def _controller_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return ""


def runs_as_service_user(service_user: str, hv: Mapping[str, Any]) -> bool:
    """Whether the host's modules run as `service_user` itself (no become; it is the connecting user)."""
    if _truthy(hv.get("ansible_become", False)) and hv.get("ansible_become_user", "root") != service_user:
        return False
    local = hv.get("ansible_connection") == "local"
    user = _controller_user() if local or not hv.get("ansible_user") else str(hv["ansible_user"])
    return bool(user) and user == service_user


def _service_user_homes(service_user: str, local: bool) -> list[str]:
    """The service user's homes known on the controller: the one dsv4deploy creates, and the passwd's
    entry when the host is this machine."""
    homes = [CREATED_HOME.format(user=service_user)]
    if local:
        with contextlib.suppress(KeyError):  # no such user here: only the created home is known
            homes.append(posixpath.normpath(pwd.getpwnam(service_user).pw_dir))
    return [h for h in homes if h not in SYSTEM_HOMES]


def home_of(path: str, service_user: str, local: bool = False) -> str:
    """The home folder `path` lies in (or is), or '' when it lies in none known by name."""
    norm = posixpath.normpath(path)
    parts = [p for p in norm.split("/") if p]
    if parts[:1] == ["root"]:
        return "/root"
    if parts[:1] == ["home"] and len(parts) >= 2:
        return f"/home/{parts[1]}"
    for home in _service_user_homes(service_user, local):
        if norm == home or norm.startswith(home + "/"):
            return home
    return ""


def _paths(spec: Deployment, name: str, hv: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (field, path) pairs root trusts on host `name`."""
    host = spec.host(name)
    out = []
    if not install_root_problems(name, host.install_root, host.service_manager):  # else said once already
        out.append(("install_root", host.install_root))
    if spec.api_key is not None and spec.api_key.file and spec.api_key.file.startswith("/"):
        out.append(("api_key.file", spec.api_key.file))
    out += [(key, hv[key]) for key in VERIFY_PATHS if isinstance(hv.get(key), str) and hv[key].startswith("/")]
    return out


def home_path_problems(spec: Deployment, hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """A problem for each path root trusts that lies inside a home, on each host whose modules run as root."""
    out = []
    for name in spec.hosts_in_use():
        if name not in spec.hosts:  # an unknown host is reported by the spec's checks
            continue
        hv = hostvars.get(name, {})
        user = spec.host(name).service_user
        if runs_as_service_user(user, hv):
            continue
        for field, path in _paths(spec, name, hv):
            home = home_of(path, user, local=hv.get("ansible_connection") == "local")
            if home:
                out.append(Problem(
                    field=field, host=name,
                    message=f"{path!r} lies inside the home folder {home}: its owner can rename what is there and "
                            "put a folder or link of its own in its place, which root then reads, runs or writes",
                    fix=f"move it to a folder only root can write, outside every home (e.g. "
                        f"{_example(field)}), owned by root and not group- or world-writable"))
    return out


def _example(field: str) -> str:
    return {"install_root": "/opt/dsv4deploy", "api_key.file": "/etc/dsv4deploy/api_key",
            "dsv4_verify_timer_python": "/opt/dsv4-verify/venv/bin/python",
            "dsv4_verify_timer_textfile_dir": "/var/lib/prometheus/node-exporter"}[field]
