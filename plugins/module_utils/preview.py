"""A rolling step's preview router under the host's service manager: the command it runs, its transient
systemd unit and its supervisord program (standard library only)."""

from __future__ import annotations

import os
import re
import shlex

# The router's command, started by bash so that the API key is read from its file at start (as the serve
# scripts do): never in a unit, a program file or the module's arguments. The env file (supervisord only:
# systemd reads the router unit's EnvironmentFile=) is sourced the same way.
LAUNCH = ('if [ -n "${DSV4_PREVIEW_ENV_FILE:-}" ]; then set -a; . "$DSV4_PREVIEW_ENV_FILE"; set +a; fi; '
          'if [ -z "${DSV4_PREVIEW_KEY_FILE:-}" ]; then exec "$@"; fi; '
          'key="$(cat "$DSV4_PREVIEW_KEY_FILE")" || exit 1; '
          'if [ -z "$key" ]; then echo "the API key file $DSV4_PREVIEW_KEY_FILE is empty" >&2; exit 1; fi; '
          'exec "$@" --api-key "$key"')
# Where the deployment's supervisord finds the preview program (module_utils/supervisor.PROGRAM_DIRS): in its
# own folder, root's and 0750, never in a release.
PROGRAM_DIR = os.path.join("supervisor", "preview")


def command(name: str, argv: list[str]) -> list[str]:
    """The preview router's command line: bash running `argv` with the key and env file added at start."""
    return ["/bin/bash", "-c", LAUNCH, name, *argv]


def environment(key_file: str | None, env_file: str | None) -> dict[str, str]:
    """The variables LAUNCH reads: where the key and the env file are (paths, never their content)."""
    out = {}
    if key_file:
        out["DSV4_PREVIEW_KEY_FILE"] = key_file
    if env_file:
        out["DSV4_PREVIEW_ENV_FILE"] = env_file
    return out


def unit_name(name: str) -> str:
    """The transient unit of the preview router `name`."""
    return f"{name}.service"


def systemd_run(name: str, argv: list[str], properties: list[str], key_file: str | None) -> list[str]:
    """`systemd-run` starting the preview router as a transient unit with the router unit's `properties` (its
    User=, EnvironmentFile= and hardening), removed by systemd once it stops, even after a failure (--collect)."""
    out = ["systemd-run", f"--unit={unit_name(name)}", "--collect", "--quiet", "--service-type=exec",
           f"--description=dsv4deploy rolling preview router {name}", "-p", f"SyslogIdentifier={name}"]
    for prop in properties:
        out += ["-p", prop]
    for key, value in environment(key_file, None).items():
        out.append(f"--setenv={key}={value}")
    return [*out, "--", *command(name, argv)]


def _supervisor_value(text: str) -> str:
    # supervisord expands %(...)s in a value: a literal % is doubled.
    return text.replace("%", "%%")


def program_text(name: str, argv: list[str], user: str | None, key_file: str | None, env_file: str | None,
                 log_path: str, directory: str) -> str:
    """The supervisord program of the preview router: the service user, started and stopped by the deploy
    only (no autostart, no restart), TERM to its process group and KILL after 30 s."""
    line = shlex.join(command(name, argv))
    if re.search(r"[\x00-\x1f\x7f]", line):
        raise ValueError("the router's command has a control character (a newline ends a supervisord value)")
    if re.search(r"\s[;#]", line):  # supervisord would cut the value there (an inline comment)
        raise ValueError("the router's command has ' ;' or ' #', which supervisord reads as a comment")
    env = ",".join(f'{k}="{_supervisor_value(v)}"' for k, v in environment(key_file, env_file).items())
    lines = [
        "; Managed by dsv4deploy: a rolling step's preview router, removed when the step ends",
        f"[program:{name}]",
        f"command={_supervisor_value(line)}",
        f"directory={_supervisor_value(directory)}",
        *([f"user={user}"] if user else []),
        *([f"environment={env}"] if env else []),
        "autostart=false",
        "autorestart=false",
        "startsecs=0",
        "stopsignal=TERM",
        "stopwaitsecs=30",
        "stopasgroup=true",  # TERM to the router and whatever it spawned (and KILL after stopwaitsecs)
        "umask=077",
        "redirect_stderr=true",
        f"stdout_logfile={log_path}",
        "stdout_logfile_maxbytes=10MB",
        "stdout_logfile_backups=1",
    ]
    return "\n".join(lines) + "\n"
