"""Whether root may trust a path the operator named: every existing part of it, up to /, is root's (or this
process's user's), writable by no one else and outside other users' homes; and secret files read without
following a link (standard library only).

The rule for world-writable sticky folders (/tmp, /var/tmp): another user cannot rename or remove an entry it
does not own there, so such a folder is passed when the entry below it exists and is trusted; a path whose next
part is missing under it is refused (anyone could create that part first).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat

# Home folders of system accounts that are system folders themselves, not a user's own space.
SYSTEM_HOMES = frozenset({"/", "/bin", "/sbin", "/usr", "/usr/bin", "/usr/sbin", "/dev", "/proc", "/run",
                          "/var", "/var/run", "/var/empty", "/nonexistent", "/dev/null"})
# More than any API key or salt we write: a larger "key" is not one (an endless file, a log).
SECRET_MAX_BYTES = 4096
_MAX_LINKS = 40


class Untrusted(ValueError):
    """A path or secret file root must not trust; the message names it, its owner and mode, and the fix."""


def describe(st: os.stat_result) -> str:
    """`owner:group mode` of a file, as an error shows it."""
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group} {stat.S_IMODE(st.st_mode):04o}"


def _uid(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid if user else None
    except KeyError:
        return None


def trusted_uids() -> set[int]:
    """Owners root may trust: root, and the user this module runs as (no privilege to gain from it)."""
    return {0, os.geteuid()}


def _home_of(path: str, trusted: set[int]) -> str:
    """The home folder of another user that holds `path`, with its user, or ''."""
    for entry in pwd.getpwall():
        home = os.path.normpath(entry.pw_dir or "/")
        if entry.pw_uid in trusted or home in SYSTEM_HOMES or not home.startswith("/"):
            continue
        if path == home or path.startswith(home + "/"):
            return f"{home} (the home of {entry.pw_name})"
    return ""


def _fix(component: str) -> str:
    return (f"make it root's and writable by root only (chown root:root {component} && chmod go-w {component}), "
            "or choose a path whose every folder is root's, e.g. under /opt")


def walk(path: str, service_user: str = "", final_owners: frozenset[int] = frozenset()) -> str:
    """Why root must not trust `path` ('' when it may): the first part of it, up to /, that is not root's, is
    writable by others, is the service user's, or lies in another user's home. `final_owners` may own the last
    part too (the service user's own API key file)."""
    trusted = trusted_uids()
    service = _uid(service_user)
    return _walk(os.path.normpath(path), trusted, service, set(final_owners), 0)


def _walk(path: str, trusted: set[int], service: int | None, final_owners: set[int], depth: int) -> str:
    if depth > _MAX_LINKS:
        return f"{path}: too many levels of symbolic links"
    home = _home_of(path, trusted)
    if home:
        return (f"{path} is inside {home}, which that user controls; fix: choose a path outside every user's "
                "home, e.g. under /opt")
    parts = [p for p in path.split("/") if p]
    current, above = "/", os.lstat("/")
    problem = _component("/", above, trusted, service, set(), last=not parts)
    if problem:
        return problem
    for index, part in enumerate(parts):
        candidate = os.path.join(current, part)
        last = index == len(parts) - 1
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            if _writable_by_others(above):
                return (f"{candidate} does not exist, and {current} ({describe(above)}) lets other users create it "
                        f"first; fix: create {candidate} as root (mode 0755) before the deploy, or choose a path "
                        "under a folder only root can write")
            return ""
        except OSError as exc:
            return f"{candidate}: {exc.strerror}; fix: correct the path"
        if stat.S_ISLNK(st.st_mode):
            # The link is as trusted as its folder (checked); what it points at is walked in full.
            target = os.path.normpath(os.path.join(current, os.readlink(candidate)))
            rest = "/".join(parts[index + 1:])
            return _walk(os.path.join(target, rest) if rest else target, trusted, service, final_owners, depth + 1)
        problem = _component(candidate, st, trusted, service, final_owners if last else set(), last)
        if problem:
            return problem
        current, above = candidate, st
    return ""


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & 0o002) or bool(st.st_mode & 0o020 and st.st_gid != 0)


def _component(path: str, st: os.stat_result, trusted: set[int], service: int | None, final_owners: set[int],
               last: bool) -> str:
    shown = f"{path} is {describe(st)}"
    if service is not None and service not in trusted and st.st_uid == service and st.st_uid not in final_owners:
        return f"{shown}, the service user's: it could swap what root reads or writes there; fix: {_fix(path)}"
    if st.st_uid not in trusted and st.st_uid not in final_owners:
        return f"{shown}, not root's; fix: {_fix(path)}"
    if _writable_by_others(st):
        sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and not last
        if not sticky_dir:
            return f"{shown}, writable by other users; fix: {_fix(path)}"
    return ""


def walk_all(paths: list[str], service_user: str = "") -> str:
    """The first problem of `walk` over `paths`, or ''."""
    for path in paths:
        problem = walk(path, service_user)
        if problem:
            return problem
    return ""


def read_secret(path: str, owners: set[int] | None = None, max_bytes: int = SECRET_MAX_BYTES) -> str:
    """The text of the secret file `path`, read without following a link at its last part: a regular file owned
    by one of `owners` (root's uid is always one; None: any one owner), writable by its owner only, at most
    `max_bytes`. Untrusted, naming the path, otherwise; OSError when it cannot be opened."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last part is a symbolic link
            raise Untrusted(f"{path} is a symbolic link; a secret is read from the file itself, never through a "
                            "link; fix: put the file there in place of the link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{path} is not a regular file ({describe(st)}); fix: put the secret in a plain file")
        if st.st_mode & 0o022:
            raise Untrusted(f"{path} is {describe(st)}, writable by others than its owner; fix: chmod 0400 {path}")
        if owners is not None and st.st_uid not in owners | {0}:
            raise Untrusted(f"{path} is {describe(st)}, not owned by root or the service user; fix: chown root {path}")
        if st.st_size > max_bytes:
            raise Untrusted(f"{path} is {st.st_size} bytes, more than a secret's {max_bytes}; fix: put only the "
                            "secret in it")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Untrusted(f"{path} grew past {max_bytes} bytes while read; fix: put only the secret in it")
    return data.decode("utf-8", errors="strict")


def owners_for(service_user: str) -> set[int]:
    """The owners a secret file may have: root and, when it exists, the service user."""
    uid = _uid(service_user)
    return {0} if uid is None else {0, uid}


def read_key(path: str, owners: set[int] | None = None) -> str:
    """An API key from `path` (read_secret), stripped; Untrusted, never quoting it, when it holds a character
    an HTTP header cannot carry (white space, a line break, a control or non-ASCII character): such a key would
    come back inside the HTTP library's error."""
    key = read_secret(path, owners).strip()
    if any(not 0x21 <= ord(c) <= 0x7E for c in key):
        raise Untrusted(f"{path} holds more than one printable word (a line break, a space or a control "
                        "character), which a header cannot carry; fix: put the key alone on one line")
    return key
