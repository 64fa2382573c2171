"""Checks of values that are written onto hosts: environment names, scripts' and units' text,
host names, install roots, service users, listen addresses and the API key.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dsv4deploy.spec.models import Deployment, Problem


def check_values(spec: Deployment) -> list[Problem]:
    """Every problem of the values that are written onto hosts, in the order the checks run."""
    return (_check_env(spec) + _check_text(spec) + _check_host_settings(spec) + _check_listeners(spec)
            + _check_api_key(spec) + _check_model_paths(spec))


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _check_env(spec: Deployment) -> list[Problem]:
    """Environment names become `export NAME=...` in serve scripts: only shell variable names."""
    from dsv4deploy.spec.secret_env import is_secret

    targets: list[tuple[str, str | None, dict[str, str]]] = [("server_env", None, spec.server_env),
                                                             ("server_env_extra", None, spec.server_env_extra)]
    targets += [(f"server_env_extra_by_role.{role}", None, env) for role, env in spec.server_env_extra_by_role.items()]
    targets += [(f"{path}.env", w.host, w.env) for path, w in spec.workers()]
    if spec.topology == "pd" and spec.router:
        targets.append(("router.env", spec.router.host, spec.router.env))
    targets.append(("secret_env", None, dict.fromkeys(spec.secret_env, "")))
    out = [Problem(field=field, host=host, message=f"{name!r} is not a valid environment variable name",
                   fix="use letters, digits and underscores only, not starting with a digit")
           for field, host, env in targets for name in env if not ENV_NAME.match(name)]
    # A secret goes into an env file of NAME="value" lines: one line each.
    out += [Problem(field=f"{field}.{name}", host=host, message="a secret value contains a control character "
                                                               "(newline, tab, ...)",
                    fix="remove it; secret values are written one per line into the host's env file")
            for field, host, env in targets if field != "secret_env" for name, value in env.items()
            if is_secret(name, spec.secret_env) and CONTROL.search(value)]
    return out


# -- values written into scripts, unit files, supervisord programs and paths --------------------

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Inventory host names become file names (render --out DIR/<host>) and comments in scripts.
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}\Z")
# install_root lands unquoted in supervisord.conf (which expands %, and ends a value at " ;" or
# " #"), in unit paths and in rm -rf on purge: only plain path characters.
INSTALL_ROOT = re.compile(r"/[A-Za-z0-9_.+@,=:/-]*\Z")
# Directories whose removal (stop.yml -e dsv4_stop_purge=true) would wreck the host.
SYSTEM_DIRS = frozenset({
    "/usr/local", "/usr/lib", "/usr/share", "/usr/bin", "/usr/sbin", "/usr/src", "/var/lib", "/var/log",
    "/var/tmp", "/var/cache", "/var/spool", "/var/mail", "/var/run", "/etc/systemd", "/etc/ssh",
})
# Top-level folders of the operating system: an install root never lives under them.
# dsv4deploy.rollout.slot.SLOT_DIR: the other slot's folder under a root.
SLOT_DIR = "slot-b"
SYSTEM_TOPS = frozenset({"etc", "proc", "sys", "dev", "boot", "bin", "sbin", "lib", "lib32", "lib64", "usr", "run"})
# A Unix socket path holds at most 107 bytes; supervisord's lives under the install root.
SOCKET_PATH_MAX = 107
SUPERVISOR_SOCKET = "/supervisor/supervisor.sock"
# POSIX portable user names (useradd's default check), as systemd's User= and supervisord take them.
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _walk_text(value: Any, path: str) -> Iterable[tuple[str, str]]:
    """Every string in `value` (keys included) with its field path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield f"{path}.{k}" if path else str(k), str(k)
            yield from _walk_text(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk_text(v, f"{path}[{i}]")


# Values that only ever reach a serve script, shell-quoted (a newline there is data, not syntax).
SHELL_ONLY = re.compile(r"(^|\.)(env|server_env|server_env_extra|server_env_extra_by_role\.[a-z]+)\.[A-Za-z0-9_]+\Z"
                        r"|extra_args\[\d+\]\Z")


# Names (they also reach unit descriptions, comments and the report) and paths: plain characters only.
NAME_FIELDS = re.compile(r"^model\.(served_name|profile)\Z|(^|\.)(kv_cache_dtype|transfer_backend|ib_device)\Z"
                         r"|^router\.(policy|prefill_policy|decode_policy)\Z")
PATH_FIELDS = re.compile(r"^model\.path\Z|(^|\.)chat_template\Z|^api_key\.file\Z|^router\.health_check\.endpoint\Z")
PLAIN_TEXT = re.compile(r"[A-Za-z0-9_.:@+/=,~-]+\Z")


def _check_text(spec: Deployment) -> list[Problem]:
    """No control characters (a newline would end a comment or a unit line); names and paths plain."""
    out = []
    data = spec.model_dump(mode="json", exclude={"hosts"})
    for field, text in _walk_text(data, ""):
        if (NAME_FIELDS.search(field) or PATH_FIELDS.search(field)) and not PLAIN_TEXT.match(text):
            out.append(Problem(field=field, message=f"{text!r} has characters other than letters, digits and "
                                                    "_ . : @ + / = , ~ -",
                               fix=f"use a plain {'path' if PATH_FIELDS.search(field) else 'name'}"))
        elif "\x00" in text or (CONTROL.search(text) and not SHELL_ONLY.search(field)):
            out.append(Problem(field=field, message=f"{text!r} contains a control character (newline, tab, ...)",
                               fix="remove it; values are written into scripts and unit files"))
    for name, host in spec.hosts.items():
        for key in ("sglang_version", "address"):
            text = getattr(host, key)
            if CONTROL.search(text):
                out.append(Problem(field=key, host=name, message=f"{text!r} contains a control character",
                                   fix=f"correct {key}"))
    return out


def _check_host_settings(spec: Deployment) -> list[Problem]:
    out = []
    if spec.deployment_name and spec.deployment_name.endswith("router"):
        # The host modules tell a router by its unit name's ending; a combined server is named sglang-dsv4_NAME.
        out.append(Problem(field="deployment_name", message=f"{spec.deployment_name!r} ends in 'router', which "
                                                            "would make its combined server look like a router",
                           fix="choose another name (lower-case letters and digits, e.g. blue)"))
    for name in spec.hosts_in_use():
        host = spec.host(name)
        if not HOST_NAME.match(name) or ".." in name:
            out.append(Problem(field="inventory host name", host=repr(name),
                               message="is not a plain host name (letters, digits, '.', '-', '_'; it names files "
                                       "and is written into scripts)",
                               fix="rename the inventory host and set ansible_host to its address"))
        out += install_root_problems(name, host.install_root, host.service_manager)
        if not USER_NAME.match(host.service_user):
            out.append(Problem(field="service_user", host=name,
                               message=f"{host.service_user!r} is not a user name"
                                       + (" (an empty user would run the servers as root)"
                                          if not host.service_user else ""),
                               fix="name the user the servers run as (e.g. sglang; root only if you mean it)"))
        elif host.service_user == "root" and not host.service_user_root_ok:
            out.append(Problem(field="service_user", host=name,
                               message="is root: the servers and the router would run as root, where their "
                                       "units' sandbox (ProtectSystem, no ProtectHome) protects little",
                               fix="name an unprivileged user (e.g. sglang, with service_user_create: true), "
                                   "or set service_user_root_ok: true if you mean root"))
    return out


def slot_named_roots(spec: Deployment) -> list[Problem]:
    """Inventory install roots named like another deployment's slot. Checked on the
    inventory only (load_spec): a blue_green slot's own spec has such a root, and stop and rollback still
    find a deployment already there."""
    out = []
    for name in spec.hosts_in_use():
        root = spec.host(name).install_root
        if posixpath.basename(root) == SLOT_DIR:
            out.append(Problem(field="install_root", host=name,
                               message=f"{root!r} is named like a deployment's blue_green slot ('{SLOT_DIR}'): the "
                                       f"deployment at {posixpath.dirname(root)} would stop and purge it as its own",
                               fix="choose an install_root outside every other deployment's, e.g. /opt/dsv4deploy-b"))
    return out


def install_root_problems(name: str, root: str, service_manager: str = "systemd") -> list[Problem]:
    """Why `root` cannot be host `name`'s install root (empty when it can)."""

    def problem(message: str, fix: str = "use an absolute path of its own, e.g. /opt/dsv4deploy") -> Problem:
        return Problem(field="install_root", host=name, message=f"{root!r} {message}", fix=fix)

    if not INSTALL_ROOT.match(root):
        return [problem("must be an absolute path of letters, digits and . _ - + @ , = : / only "
                        "(it is written unquoted into supervisord.conf, which expands % and cuts at ' ;')")]
    parts = [p for p in root.split("/") if p]
    if posixpath.normpath(root) != root or any(p in (".", "..") for p in parts):
        return [problem("is not a normalised path ('..', '.', '//' or a trailing '/')")]
    if len(parts) < 2 or root in SYSTEM_DIRS or (parts[0] in SYSTEM_TOPS and root[:11] != "/usr/local/"):
        return [problem("is a system directory (stop.yml -e dsv4_stop_purge=true removes the install root)")]
    # A folder inside a home is judged by who runs the host's modules (dsv4deploy.spec.homes).
    if parts[:3] == ["var", "lib", "docker"] or (
            len(parts) == 2 and parts[0] == "home") or (len(parts) == 3 and parts[:2] == ["usr", "local"]):
        return [problem("is a home directory, a top folder of /usr/local or Docker's data folder, "
                        "where a purge would remove what others keep there")]
    if service_manager == "supervisor" and len((root + SUPERVISOR_SOCKET).encode()) > SOCKET_PATH_MAX:
        return [problem(f"is too long: supervisord's socket {root}{SUPERVISOR_SOCKET} exceeds "
                        f"{SOCKET_PATH_MAX} bytes", fix="use a shorter install_root")]
    return []


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address.strip("[]")).is_loopback


def _listen_problem(field: str, host: str | None, address: str) -> Problem | None:
    try:
        ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return Problem(field=field, host=host, message=f"{address!r} is not an IP address",
                       fix="listen on 127.0.0.1, on one address of the host, or on 0.0.0.0 with an api_key")
    return None


def _check_listeners(spec: Deployment) -> list[Problem]:
    """Bind addresses are IP literals; anything but loopback needs an API key."""
    out = []
    listeners = [("listen", name, spec.host(name).listen) for name in spec.hosts_in_use()
                 if any(w.host == name for _, w in spec.workers())]
    if spec.topology == "pd" and spec.router:
        listeners += [("router.listen", spec.router.host, spec.router.listen),
                      ("router.prometheus_listen", spec.router.host, spec.router.prometheus_listen)]
    for field, host, address in listeners:
        bad = _listen_problem(field, host, address)
        if bad:
            out.append(bad)
        elif spec.api_key is None and not _is_loopback(address) and field != "router.prometheus_listen":
            out.append(Problem(field=field, host=host,
                               message=f"{address} is reachable from other machines but no api_key is set",
                               fix="set api_key: {file: PATH} or {vault_var: NAME}, or listen on 127.0.0.1"))
    return out


def _check_api_key(spec: Deployment) -> list[Problem]:
    key = spec.api_key
    if key is None:
        return []
    if key.file is not None and (not key.file.startswith("/") or ".." in key.file.split("/")):
        return [Problem(field="api_key.file", message=f"{key.file!r} is not an absolute path",
                        fix="give the key file's absolute path on the hosts, e.g. /etc/dsv4deploy/api_key")]
    if key.vault_var is not None and not VAR_NAME.match(key.vault_var):
        return [Problem(field="api_key.vault_var", message=f"{key.vault_var!r} is not a variable name",
                        fix="name the (vaulted) Ansible variable that holds the key")]
    return []


# sglang takes --chat-template as a file or as a built-in template's name (chatml): a file has a slash or suffix.
_TEMPLATE_FILE = re.compile(r"/|\.(jinja|j2|json)\Z")


def _check_model_paths(spec: Deployment) -> list[Problem]:
    """The model folder and a chat template file are absolute paths on the hosts.

    sglang would take `models/X` as a Hugging Face repo id (and download it at start), and the serve script
    runs in the release folder, so a relative path never means what the inventory's author saw.
    """
    out = []
    if not spec.model.path.startswith("/"):
        out.append(Problem(field="model.path", message=f"{spec.model.path!r} is not an absolute path",
                           fix="give the absolute path of the downloaded checkpoint on the hosts (the folder "
                               "holding config.json), e.g. /models/DeepSeek-V4-Flash; ~ is not expanded"))
    templates = [("chat_template", spec.chat_template)] + [(f"{p}.chat_template", w.chat_template)
                                                           for p, w in spec.workers()]
    for field, value in templates:
        if value and _TEMPLATE_FILE.search(value) and not value.startswith("/"):
            out.append(Problem(field=field, message=f"{value!r} is not an absolute path",
                               fix="give the template file's absolute path on the hosts, or the name of one "
                                   "of sglang's built-in templates"))
    return out
