"""Secrets in `extra_args` and URL credentials in plain settings: refused before anything reaches a host.

An `extra_args` value is written into the serve script (0755), `spec.json` (0644), the plan, `--diff`
and the report, so a secret given there (`--admin-api-key SECRET`) is readable by every local user.
A flag is secret-looking when one of its words (split at '-' and '_', any case) is key(s), apikey,
token, secret(s), password or passwd, unless it names where a secret is kept (its last word is path,
file or dir: `--tls-key-path`). Counts such as `--max-total-tokens` are not secrets.
"""

from __future__ import annotations

import re

from dsv4deploy.spec.models import Deployment, Problem
from dsv4deploy.spec.secret_env import is_secret

SECRET_WORD = re.compile(r"^(?:api)?keys?$|^tokens?$|^secrets?$|^passw(?:or)?d$", re.IGNORECASE)
# A plural 'tokens' is a count (--max-prefill-tokens); every other secret word counts in either number.
# user:password@ inside a URL (--encoder-urls http://u:pw@h, --flag=scheme://u:pw@h).
URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s@]*:[^/\s@]*@")
COUNT_WORDS = frozenset({"tokens"})
PLACE_WORDS = frozenset({"path", "file", "dir"})
# Reported by the rendered-flag check already, with its own fix (api_key: {file: ...}).
RENDERED_KEY_FLAG = "--api-key"


def is_secret_flag(arg: str) -> bool:
    """Whether `arg` (a flag, or `--flag=value`) names a secret value."""
    if not arg.startswith("-"):
        return False
    words = [w.lower() for w in re.split(r"[-_]+", arg.split("=", 1)[0]) if w]
    if not words or words[-1] in PLACE_WORDS:
        return False
    return any(SECRET_WORD.match(w) and w not in COUNT_WORDS for w in words)


def secret_flag_problems(spec: Deployment) -> list[Problem]:
    """A problem for each secret-looking flag in a server's or the router's extra_args."""
    places = [(path, w.host, w.extra_args) for path, w in spec.workers()]
    if spec.topology == "pd" and spec.router:
        places.append(("router", spec.router.host, spec.router.extra_args))
    out = []
    for path, host, args in places:
        out += [Problem(field=f"{path}.extra_args", host=host,
                        message="a URL in extra_args holds a user name and password (scheme://user:password@host): "
                                "extra_args are written into the serve script, spec.json, the plan and the report, "
                                "readable by every local user",
                        fix="remove the credentials from the URL; give the service a credential-free URL, or "
                            "the credential as a secret environment variable")
                for arg in args if URL_CREDENTIALS.search(arg)]
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag != RENDERED_KEY_FLAG and is_secret_flag(arg):
                out.append(Problem(
                    field=f"{path}.extra_args", host=host,
                    message=f"'{flag}' looks like a secret: extra_args are written into the serve script, "
                            "spec.json, the plan and the report, readable by every local user",
                    fix="remove it; give a secret as an environment variable whose name has KEY, TOKEN, SECRET "
                        "or PASSWORD in it (or is listed in secret_env), which is written only to the 0600 "
                        "secret env file <install_root>/secrets/<service>.env, and the API key as "
                        "api_key: {file: PATH} or {vault_var: NAME}"))
    return out


def _plain_env_places(spec: Deployment) -> list[tuple[str, str | None, dict[str, str]]]:
    """Every environment mapping of the spec as (field path, host or None for all, mapping)."""
    places: list[tuple[str, str | None, dict[str, str]]] = [
        ("server_env", None, spec.server_env), ("server_env_extra", None, spec.server_env_extra)]
    places += [(f"server_env_extra_by_role.{role}", None, env) for role, env in spec.server_env_extra_by_role.items()]
    places += [(f"{path}.env", w.host, w.env) for path, w in spec.workers()]
    if spec.topology == "pd" and spec.router:
        places.append(("router.env", spec.router.host, spec.router.env))
    return places


def url_credential_env_problems(spec: Deployment) -> list[Problem]:
    """A problem for each plain (non-secret) environment value holding a URL with user:password@.

    A plain value is written into spec.json (0644), the serve script, the plan and the report, so a proxy
    or mirror URL with credentials (HTTPS_PROXY=http://u:pw@proxy) would be readable by every local user.
    The value is never quoted in the problem.
    """
    return [Problem(field=f"{path}.{name}", host=host,
                    message="the value is a URL holding a user name and password (scheme://user:password@host), "
                            "and a plain environment value is written into spec.json, the serve script, the plan "
                            "and the report, readable by every local user",
                    fix=f"list {name} in secret_env (its value then goes only to the root-owned secret env file "
                        "<install_root>/secrets/<service>.env), or remove the credentials from the URL")
            for path, host, env in _plain_env_places(spec)
            for name, value in env.items()
            if not is_secret(name, spec.secret_env) and URL_CREDENTIALS.search(value)]
