"""Start a helper process as the service user with its secret env file, as its unit would
(standard library only): the rolling preview router, which runs beside the production router for one step."""

from __future__ import annotations

import os
import pwd
import re

from ansible_collections.dsv4.deploy.plugins.module_utils import trust

# Larger than any env file of secrets we write.
ENV_FILE_MAX_BYTES = 1 << 20
# NAME="value" lines as dsv4deploy.spec.secret_env.file_content writes them: inside "...", a backslash
# escapes exactly " \ ` $ (as bash's `.` and systemd's EnvironmentFile= read them).
ENV_LINE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\Z')


def read_env_file(path: str) -> dict[str, str]:
    """The variables of a secret env file; ValueError naming the line number of one it cannot read."""
    out: dict[str, str] = {}
    # Read as root: never through a link (the secrets folder was the service user's in older versions).
    text = trust.read_secret(path, trust.trusted_uids(), max_bytes=ENV_FILE_MAX_BYTES)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = ENV_LINE.match(line)
        if not match:
            raise ValueError(f"{path} line {number} is not NAME=\"value\"")
        out[match[1]] = re.sub(r'\\(["\\`$])', r"\1", match[2])
    return out


def identity(user: str) -> dict:
    """Popen's arguments that run a process as `user` (uid, gid, groups), with its "env" (HOME, USER, LOGNAME);
    {} when this process is that user already. ValueError when the user is unknown or we cannot switch."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"no user {user!r} on this host (the service user)") from None
    if entry.pw_uid == os.geteuid():
        return {}
    if os.geteuid() != 0:
        raise ValueError(f"cannot start a process as {user!r}: this module does not run as root (become: true)")
    return {"user": entry.pw_uid, "group": entry.pw_gid,
            "extra_groups": os.getgrouplist(entry.pw_name, entry.pw_gid),
            "env": {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name}}


def environment(user_env: dict[str, str] | None, env_file: str | None) -> dict[str, str]:
    """The process's environment: this one's (the launcher's PATH), the user's HOME, USER and LOGNAME, and the
    secret env file's variables on top."""
    env = {**os.environ, **(user_env or {})}
    if env_file:
        env.update(read_env_file(env_file))
    return env
