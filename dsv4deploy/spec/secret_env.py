"""Secret environment values (an HF_TOKEN, say): kept out of every rendered file, plan and report.

A value is secret when its name matches SECRET_NAME (TOKEN, SECRET, KEY, PASSWORD, PASSWD,
CREDENTIAL, anywhere in the name, any case; not TOKENS, which names a count such as
SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK) or is listed in the spec's `secret_env`. Secret values go
to one env file per service, `<install_root>/secrets/<service>.env` (mode 0600, the service user's),
written by the playbook with no_log and no diff; the systemd unit reads it with `EnvironmentFile=`,
the supervisord serve script sources it. Everything else that shows the spec (`spec.json`, the
plan, `dsv4deploy plan`, `--diff`, the report) carries only `redacted(value)`: a short digest, so a
changed secret still changes the release (and restarts its servers) without showing the value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

SECRET_NAME = re.compile(r"TOKEN(?!S)|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
SECRETS_DIR = "secrets"
REDACTED_PREFIX = "<secret sha256:"


def is_secret(name: str, listed: Iterable[str] = ()) -> bool:
    """Whether the environment variable `name` holds a secret (by name, or listed in secret_env)."""
    return bool(SECRET_NAME.search(name)) or name in set(listed)


def redacted(value: str) -> str:
    """What is shown instead of a secret value: 12 hex of its sha256 (tells a change, not the value)."""
    if value.startswith(REDACTED_PREFIX):
        return value  # already redacted (a release's spec.json read back)
    return f"{REDACTED_PREFIX}{hashlib.sha256(value.encode()).hexdigest()[:12]}>"


def split(env: Mapping[str, str], listed: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """`env` as (plain, secret) mappings, both sorted by name."""
    listed = set(listed)
    plain = {k: v for k, v in sorted(env.items()) if not is_secret(k, listed)}
    secret = {k: v for k, v in sorted(env.items()) if is_secret(k, listed)}
    return plain, secret


def file_path(install_root: str, service: str) -> str:
    """Where a service's secret env file lives on its host."""
    return f"{install_root}/{SECRETS_DIR}/{service}.env"


def _double_quoted(value: str) -> str:
    # Read the same by bash (`.`) and systemd's EnvironmentFile=: inside "...", a backslash escapes
    # exactly " \\ ` $ in both.
    return '"' + re.sub(r'(["\\`$])', r"\\\1", value) + '"'


def file_content(secret: Mapping[str, str]) -> str:
    """The env file for `secret`: one NAME="value" line each (values have no control characters)."""
    return "".join(f"{name}={_double_quoted(value)}\n" for name, value in sorted(secret.items()))


def digest(secret: Mapping[str, str]) -> str:
    """12 hex identifying the secret values of a service (written into its serve script)."""
    return hashlib.sha256(file_content(secret).encode()).hexdigest()[:12]


def redact_env(env: Mapping[str, Any], listed: Iterable[str]) -> dict[str, Any]:
    """`env` with every secret value redacted."""
    listed = set(listed)
    return {k: redacted(str(v)) if is_secret(k, listed) else v for k, v in env.items()}


def _map_env(data: Mapping[str, Any], change: Callable[[Mapping[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """A Deployment dump with `change` applied to every env mapping in it (a new mapping)."""
    out = dict(data)
    for key in ("server_env", "server_env_extra"):
        if isinstance(out.get(key), Mapping):
            out[key] = change(out[key])
    if isinstance(out.get("server_env_extra_by_role"), Mapping):
        out["server_env_extra_by_role"] = {r: change(e) for r, e in out["server_env_extra_by_role"].items()}
    for role in ("prefill", "decode"):
        out[role] = [{**w, "env": change(w.get("env") or {})} for w in out.get(role) or []]
    for role in ("combined", "router"):
        if isinstance(out.get(role), Mapping):
            out[role] = {**out[role], "env": change(out[role].get("env") or {})}
    return out


def redact_spec(data: Mapping[str, Any]) -> dict[str, Any]:
    """A Deployment's `model_dump(mode="json")` with every secret env value redacted (a new mapping)."""
    listed = data.get("secret_env") or []
    return _map_env(data, lambda env: redact_env(env, listed))


def unredact_spec(data: Mapping[str, Any], source: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`data` (a redacted dump, e.g. a release's spec.json or a plan derived from it) with each redacted
    secret replaced by the value in `source` (the inventory's dump) that has that digest, and the names
    of those no value of `source` matches (changed since the release was made)."""
    values: dict[str, str] = {}
    listed = source.get("secret_env") or []

    def collect(env: Mapping[str, Any]) -> dict[str, Any]:
        values.update({redacted(str(v)): str(v) for k, v in env.items() if is_secret(k, listed)})
        return dict(env)

    _map_env(source, collect)
    missing: list[str] = []

    def restore(env: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for k, v in env.items():
            if isinstance(v, str) and v.startswith(REDACTED_PREFIX):
                if v not in values:
                    missing.append(k)
                out[k] = values.get(v, v)
            else:
                out[k] = v
        return out

    return _map_env(data, restore), sorted(set(missing))
