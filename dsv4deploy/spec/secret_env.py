"""Secret environment values (an HF_TOKEN, say): kept out of every rendered file, plan and report.

A value is secret when its name matches SECRET_NAME (TOKEN, SECRET, KEY, PASSWORD, PASSWD,
CREDENTIAL, anywhere in the name, any case; not TOKENS, which names a count such as
SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK) or is listed in the spec's `secret_env`. Secret values go
to one env file per service, `<install_root>/secrets/<service>.env` (mode 0600, the service user's),
written by the playbook with no_log and no diff; the systemd unit reads it with `EnvironmentFile=`,
the supervisord serve script sources it. Everything else that shows the spec (`spec.json`, the
plan, `dsv4deploy plan`, `--diff`, the report) carries only `redacted(value, key)`.

A host's release (its spec.json and serve scripts) shows a keyed digest, HMAC-SHA256 under the host's digest
salt (`<install_root>/secrets/digest_salt`, root's, in the 0700 secrets folder): a changed secret still
changes the release (and restarts its servers), yet a reader of the 0644 files cannot try guesses offline,
and the digest on one host says nothing about another's. Without a key (the plan's shared spec, the report,
`dsv4deploy plan` and `render` on the controller) a value is only `<secret>`. Releases made before the salt
show `<secret sha256:...>`, an unkeyed digest; they are still read back.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

SECRET_NAME = re.compile(r"TOKEN(?!S)|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
SECRETS_DIR = "secrets"
# Every redacted value starts with "<secret": keyed "<secret hmac:12hex>", unkeyed "<secret>", and the
# unsalted "<secret sha256:12hex>" of releases made before the digest salt (read back, never written).
REDACTED_MARK = "<secret"
KEYED_PREFIX = "<secret hmac:"
LEGACY_PREFIX = "<secret sha256:"
UNKEYED = "<secret>"
# The per-host key: 32 random bytes as 64 hex, in <install_root>/secrets/digest_salt (dsv4_digest_salt reads it).
SALT_PATTERN = re.compile(r"[0-9a-f]{64}\Z")


def is_secret(name: str, listed: Iterable[str] = ()) -> bool:
    """Whether the environment variable `name` holds a secret (by name, or listed in secret_env)."""
    return bool(SECRET_NAME.search(name)) or name in set(listed)


def is_redacted(value: object) -> bool:
    """Whether `value` is a redacted secret (any of the forms `redacted` writes or wrote)."""
    return isinstance(value, str) and value.startswith(REDACTED_MARK)


def keyed_digest(text: str, key: str) -> str:
    """12 hex of HMAC-SHA256 of `text` under `key` (a host's salt, 64 hex): tells a change, not the text."""
    return hmac.new(bytes.fromhex(key), text.encode(), hashlib.sha256).hexdigest()[:12]


def redacted(value: str, key: str | None = None) -> str:
    """What is shown instead of a secret value: its keyed digest under `key`, or `<secret>` without one."""
    if is_redacted(value):
        return value  # already redacted (a release's spec.json read back)
    return UNKEYED if key is None else f"{KEYED_PREFIX}{keyed_digest(value, key)}>"


def _legacy(value: str) -> str:
    """The unsalted form releases made before the digest salt show (to read them back only)."""
    return f"{LEGACY_PREFIX}{hashlib.sha256(value.encode()).hexdigest()[:12]}>"


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


def api_key_digest(content: str, key: str) -> str:
    """12 hex naming the API key `content` under its host's `key`, as the servers use it (the serve script
    reads the file with `$(<file)`, which drops trailing newlines): a new key makes a new release."""
    return keyed_digest(content.rstrip("\n"), key)


def digest(secret: Mapping[str, str], key: str) -> str:
    """12 hex identifying the secret values of a service under its host's `key` (in its serve script)."""
    return keyed_digest(file_content(secret), key)


def redact_env(env: Mapping[str, Any], listed: Iterable[str], key: str | None = None) -> dict[str, Any]:
    """`env` with every secret value redacted (keyed by `key`, a host's salt, when given)."""
    listed = set(listed)
    return {k: redacted(str(v), key) if is_secret(k, listed) else v for k, v in env.items()}


def _map_env(data: Mapping[str, Any], change: Callable[[Mapping[str, Any], str], dict[str, Any]]) -> dict[str, Any]:
    """A Deployment dump with `change(env, where)` applied to every env mapping in it (a new mapping);
    `where` names the mapping's place (`server_env`, `prefill.0`, `router`, ...)."""
    out = dict(data)
    for key in ("server_env", "server_env_extra"):
        if isinstance(out.get(key), Mapping):
            out[key] = change(out[key], key)
    if isinstance(out.get("server_env_extra_by_role"), Mapping):
        out["server_env_extra_by_role"] = {r: change(e, f"server_env_extra_by_role.{r}")
                                           for r, e in out["server_env_extra_by_role"].items()}
    for role in ("prefill", "decode"):
        out[role] = [{**w, "env": change(w.get("env") or {}, f"{role}.{i}")} for i, w in enumerate(out.get(role) or [])]
    for role in ("combined", "router"):
        if isinstance(out.get(role), Mapping):
            out[role] = {**out[role], "env": change(out[role].get("env") or {}, role)}
    return out


def redact_spec(data: Mapping[str, Any], key: str | None = None) -> dict[str, Any]:
    """A Deployment's `model_dump(mode="json")` with every secret env value redacted (a new mapping): keyed
    by `key` (a host's salt) in that host's release, `<secret>` without one."""
    listed = data.get("secret_env") or []
    return _map_env(data, lambda env, _where: redact_env(env, listed, key))


def unredact_spec(data: Mapping[str, Any], source: Mapping[str, Any], keys: Iterable[str] = (),
                  ) -> tuple[dict[str, Any], list[str]]:
    """`data` (a redacted dump, e.g. a release's spec.json or a plan derived from it) with each redacted
    secret replaced by the value in `source` (the inventory's dump) it stands for, and the names of those
    no value of `source` matches (changed since the release was made).

    A digest is matched under each of `keys` (the hosts' salts) and in the unsalted form of older releases;
    `<secret>` (no digest: the plan's own spec) takes the inventory's value of that name at the same place.
    """
    keys = list(keys)
    values: dict[str, str] = {}
    placed: dict[tuple[str, str], str] = {}
    listed = source.get("secret_env") or []

    def collect(env: Mapping[str, Any], where: str) -> dict[str, Any]:
        for k, v in env.items():
            if is_secret(k, listed):
                values.update({redacted(str(v), key): str(v) for key in keys})
                values[_legacy(str(v))] = str(v)
                placed[(where, k)] = str(v)
        return dict(env)

    _map_env(source, collect)
    missing: list[str] = []

    def restore(env: Mapping[str, Any], where: str) -> dict[str, Any]:
        out = {}
        for k, v in env.items():
            if not is_redacted(v):
                out[k] = v
                continue
            value = placed.get((where, k)) if v == UNKEYED else values.get(v)
            if value is None:
                missing.append(k)
            out[k] = v if value is None else value
        return out

    return _map_env(data, restore), sorted(set(missing))
