"""Render a host's release: serve scripts, units or supervisor programs, the resolved spec, a manifest.

One set of Jinja templates (top-level `templates/`) serves `dsv4deploy render` and Ansible alike.
Everything the templates print comes from `ServiceDefinition`s; the templates only lay it out.
Same spec in, same bytes out: the manifest's `content_hash` is the release's identity.

Release layout (docs/interfaces.md section 5), relative to the release directory:
  bin/serve-<name>.sh        (mode 0755)
  units/<name>.service       (systemd hosts)
  supervisor/<name>.conf     (supervisor hosts)
  spec.json                  (the resolved spec; holds no secret: the API key's file or vault name, and
                             secret env values only as a digest keyed by the host's salt; they are in
                             <install_root>/secrets/)
  services.json              (the release's record of its services: name, role, drain rank, ports, GPUs, endpoint)
  manifest.json              (sha256 of every other file, and their content_hash)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

import jinja2

from dsv4deploy import PACKAGE_DIR
from dsv4deploy.plan.release_record import SERVICES_FILE, services_json
from dsv4deploy.plan.services import ServiceDefinition, services_on
from dsv4deploy.spec import Deployment, engine, secret_env
from dsv4deploy.spec.engine import ENGINE_FILE
from dsv4deploy.spec.models import RECIPE_WORKER_KEYS

MANAGED_HEADER = "Managed by dsv4deploy — local changes are overwritten"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
# Where the templates live (see templates_dir), or DSV4DEPLOY_TEMPLATES.
TEMPLATES_ENV = "DSV4DEPLOY_TEMPLATES"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# Deployment fields left out of spec.json while empty (an experiment's env switches, secret names).
UNSET_OMITTED = ("server_env_extra", "server_env_extra_by_role", "secret_env", "engine")


class RenderError(ValueError):
    """A value cannot be written safely into a script or unit file."""


def templates_dir() -> Path:
    """The templates folder: DSV4DEPLOY_TEMPLATES, else the installed package's copy (a wheel carries
    them inside `dsv4deploy/`), else the source tree's top-level templates/ (a clone)."""
    override = os.environ.get(TEMPLATES_ENV)
    if override:
        return Path(override)
    here = PACKAGE_DIR
    packaged = here / "templates"
    return packaged if packaged.is_dir() else here.parent / "templates"


# -- filters -----------------------------------------------------------------------------------

def shquote(value: object) -> str:
    """A single shell word for `value` (POSIX shell quoting; bash reads it back unchanged)."""
    return shlex.quote(str(value))


def argv_groups(argv: Iterable[str]) -> list[list[str]]:
    """`argv` split for display: the launcher, then one group per `--flag` and its values."""
    groups: list[list[str]] = []
    for arg in argv:
        if not groups or arg.startswith("--"):
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def unit_escape(value: object) -> str:
    """A systemd unit value: `%` starts a specifier, so it is doubled; no control characters."""
    text = str(value)
    if _CONTROL.search(text):
        raise RenderError(f"unit value {text!r} contains a control character")
    return text.replace("%", "%%")


def unit_exec(path: object) -> str:
    """An ExecStart command path, double-quoted for systemd (spaces allowed; `$` and `%` escaped)."""
    text = unit_escape(path)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$") + '"'


def comment(value: object) -> str:
    """Text for a comment line (shell, unit or supervisord): a newline would end the comment."""
    text = str(value)
    if _CONTROL.search(text):
        raise RenderError(f"comment text {text!r} contains a control character")
    return text


# supervisord reads its files with inline comments on: whitespace then ';' or '#' ends a value.
_SUPERVISOR_INLINE_COMMENT = re.compile(r"\s[;#]")


def supervisor_escape(value: object) -> str:
    """A supervisord value: `%` starts an expansion, so it is doubled; no control characters, and no
    whitespace before ';' or '#' (supervisord would cut the value there: there is no escape for it)."""
    text = comment(value)
    if _SUPERVISOR_INLINE_COMMENT.search(text):
        raise RenderError(f"supervisor value {text!r} has ' ;' or ' #', which supervisord reads as a comment")
    return text.replace("%", "%%")


def supervisor_path(value: object) -> str:
    """A supervisord log path: supervisord expands it twice (`%%` would come back as `%`), so no `%`."""
    text = str(value)
    if "%" in text:
        raise RenderError(f"supervisor log path {text!r} contains '%', which supervisord expands twice")
    return supervisor_escape(text)


def environment() -> jinja2.Environment:
    """The Jinja environment of our templates.

    trim_blocks (and no lstrip_blocks) matches Ansible's `template` defaults, so the same files
    render the same way there; StrictUndefined turns a missing variable into an error.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        autoescape=False,
    )
    env.filters.update(shquote=shquote, argv_groups=argv_groups, unit_escape=unit_escape,
                       unit_exec=unit_exec, supervisor_escape=supervisor_escape,
                       supervisor_path=supervisor_path, comment=comment)
    return env


# -- rendering ---------------------------------------------------------------------------------

def _check_service(svc: ServiceDefinition) -> None:
    # Environment names become `export NAME=...`: anything else would be shell syntax.
    for key in svc.env:
        if not _ENV_NAME.match(key):
            raise RenderError(f"{svc.name}: environment variable name {key!r} is not a valid name")


def render_service(env: jinja2.Environment, svc: ServiceDefinition) -> dict[str, str]:
    """The files of one service: its serve script and its unit or program section."""
    _check_service(svc)
    context = {"svc": svc.model_dump(), "managed_header": MANAGED_HEADER}
    files = {f"bin/serve-{svc.name}.sh": env.get_template(f"serve/{svc.role}.sh.j2").render(context)}
    if svc.service_manager == "systemd":
        files[f"units/{svc.name}.service"] = env.get_template(f"systemd/{svc.role}.service.j2").render(context)
    else:
        files[f"supervisor/{svc.name}.conf"] = env.get_template(f"supervisor/{svc.role}.conf.j2").render(context)
    return files


def spec_json(spec: Deployment, host: str, salt: str | None = None) -> str:
    """The resolved spec as stable JSON (sorted keys), with the host it was rendered for; secret env
    values redacted, keyed by the host's digest `salt` (dsv4deploy.spec.secret_env)."""
    dump = spec.model_dump(mode="json")
    # Unset, these leave spec.json (and so the release's identity) as it was before they existed.
    for key in UNSET_OMITTED:
        if not dump.get(key):
            dump.pop(key, None)
    _omit_unset_recipe_keys(dump)
    data = {"host": host, "deployment": secret_env.redact_spec(dump, salt)}
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _omit_unset_recipe_keys(dump: dict) -> None:
    # The recipes' settings (dsv4deploy.spec.models.RECIPE_WORKER_KEYS, model.precision) leave spec.json
    # while unset: a spec that does not use them keeps the release identity it had before they existed.
    workers = [*dump.get("prefill", []), *dump.get("decode", []), dump.get("combined") or {}, dump]
    for worker in workers:
        for key in RECIPE_WORKER_KEYS:
            if key in worker and worker[key] is None:
                del worker[key]
    if dump.get("model", {}).get("precision", "") is None:
        del dump["model"]["precision"]


def sha256(text: str) -> str:
    """Hex sha256 of a file's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_hash(files: Mapping[str, str]) -> str:
    """Hex sha256 over every file (path and content) but the manifest: the release's identity.

    Hashes `sha256sum`-style lines sorted by path, so it depends on content and names only.
    """
    lines = "".join(f"{sha256(text)}  {path}\n" for path, text in sorted(files.items()) if path != MANIFEST)
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def manifest_json(files: Mapping[str, str]) -> str:
    """The manifest of `files`: each file's sha256 and the content_hash over all of them."""
    body = {
        "format": MANIFEST_FORMAT,
        "files": {path: sha256(text) for path, text in sorted(files.items()) if path != MANIFEST},
        "content_hash": content_hash(files),
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def file_mode(path: str) -> int:
    """The mode a release file is installed with: serve scripts are executable."""
    return 0o755 if path.startswith("bin/") else 0o644


def render_release(spec: Deployment, host: str, key: str | None = None,
                   api_key_digest: str | None = None) -> dict[str, str]:
    """Every file of `host`'s release (relative path -> content), sorted by path.

    Deterministic: the same spec and `key` (the host's digest salt) give the same bytes, so the manifest's
    content_hash identifies the release; a changed secret env value changes its keyed digest, so the release.
    `api_key_digest` (the API key's content keyed the same way) goes into the serve script of every service that
    reads the key, so a rotated key changes the release too. Without a key (rendering on the controller alone)
    secret values show as `<secret>`, with no digest. Raises RenderError for a value that cannot be written safely.
    """
    env = environment()
    files: dict[str, str] = {}
    for svc in services_on(spec, host):
        if svc.secret_env and key is not None:
            svc = svc.model_copy(update={"secret_env_digest": secret_env.digest(svc.secret_env, key)})
        if svc.api_key_file and api_key_digest:
            svc = svc.model_copy(update={"api_key_digest": api_key_digest})
        files.update(render_service(env, svc))
    files["spec.json"] = spec_json(spec, host, key)
    files[SERVICES_FILE] = services_json(spec, host)
    if spec.engine is not None:
        # The engine it runs on: part of the release's content (a changed engine is a new release) and what
        # rollback, status and the engine prune read.
        files[ENGINE_FILE] = engine.record_json(spec.engine_record(host))
    files[MANIFEST] = manifest_json(files)
    return dict(sorted(files.items()))


def render_all(spec: Deployment, keys: Mapping[str, str] | None = None,
               api_key_digests: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """`render_release` for every host that runs something in the active topology, each with its digest
    salt from `keys` (host -> salt; None: rendering on the controller alone) and its API key's digest from
    `api_key_digests` (host -> 12 hex)."""
    return {host: render_release(spec, host, None if keys is None else keys.get(host),
                                 (api_key_digests or {}).get(host))
            for host in spec.hosts_in_use()}
