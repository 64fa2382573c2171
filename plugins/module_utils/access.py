"""What a service will need on its host, judged as its unit will see it: the service user, launchers, the
install root and the API key file (standard library only; the checks of dsv4_access and of dsv4_host's
preflight)."""

from __future__ import annotations

import grp
import os
import pwd
import stat

from ansible_collections.dsv4.deploy.plugins.module_utils import model_folder, trust

R = 4  # permission bits, as in a mode's rwx triplet
X = 1


class Who:
    """The user a service runs as, for permission checks."""

    def __init__(self, name: str, create: bool):
        self.name = name or "root"
        self.exists = True
        try:
            entry = pwd.getpwnam(self.name)
            self.uid, self.gids = entry.pw_uid, set(os.getgrouplist(self.name, entry.pw_gid))
        except KeyError:
            # Not there (yet): a new system user owns nothing and is in no group but its own.
            self.exists, self.uid, self.gids = False, -1, set()
        self.create = create

    def may(self, st: os.stat_result, bits: int, no_dac_override: bool) -> bool:
        """Whether this user may read/write/execute (`bits`) a file with stat `st`."""
        if self.uid == 0 and not no_dac_override:
            # root reads and enters anything; it executes a file when any x bit is set.
            return not (bits & X) or stat.S_ISDIR(st.st_mode) or bool(st.st_mode & 0o111)
        if st.st_uid == self.uid:
            mode = (st.st_mode >> 6) & 7
        elif st.st_gid in self.gids:
            mode = (st.st_mode >> 3) & 7
        else:
            mode = st.st_mode & 7
        return mode & bits == bits


def hidden_by(path: str, hidden: dict) -> str:
    """The unit setting that hides `path`, or ''."""
    for prefix, setting in hidden.items():
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            return setting
    return ""


def blocked_dir(path: str, who: Who, no_dac: bool) -> tuple[str, str]:
    """The first existing directory above `path` that `who` cannot enter: (dir, mode text), or ('', '')."""
    parts = path.rstrip("/").split("/")[1:-1]
    current = ""
    for part in parts:
        current += "/" + part
        try:
            st = os.stat(current)
        except OSError:
            return "", ""  # the rest does not exist yet: created later (install root) or reported as missing
        if not who.may(st, X, no_dac):
            return current, trust.describe(st)
    return "", ""


def readers(st: os.stat_result) -> set[str]:
    """Users (by name; '*' for everyone) who may read a file with stat `st`, root aside."""
    out: set[str] = set()
    if st.st_mode & 0o004:
        return {"*"}
    if st.st_mode & 0o400:
        out.add(_name(st.st_uid))
    if st.st_mode & 0o040:
        try:
            group = grp.getgrgid(st.st_gid)
            out |= set(group.gr_mem) | {u.pw_name for u in pwd.getpwall() if u.pw_gid == st.st_gid}
        except KeyError:
            out.add(f"group {st.st_gid}")
    out.discard("root")
    return out


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def resolve(need: dict) -> str:
    """The launcher as the serve script finds it: as given when it has a slash, else on its PATH."""
    path = need["path"]
    if "/" in path:
        return path
    for folder in need.get("search_path") or os.environ.get("PATH", "").split(":"):
        candidate = os.path.join(folder, path)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return ""


def check_need(need: dict, who: Who) -> list[str]:
    """Problems with one need, each '<path> (<what>): <problem>; fix: <fix>'."""
    user, no_dac = who.name, bool(need.get("no_dac_override"))
    label = f"{need['path']} ({need['what']})"
    if need["need"] == "device":
        return [] if os.path.exists(need["path"]) else [_missing_device(label, need["path"])]
    if need["need"] in ("search", "secret", "trusted"):
        # Root writes under the install root and reads the key: no part of either path may be another user's.
        own = frozenset({who.uid}) if need["need"] == "secret" and who.exists else frozenset()
        untrusted = trust.walk(need["path"], user if user != "root" else "", own)
        if untrusted:
            return [f"{label}: root will not trust it: {untrusted}"]
        if need["need"] == "trusted":
            return []
    path = resolve(need) if need["need"] == "exec" else need["path"]
    if not path:
        where = ":".join(need.get("search_path") or []) or "the PATH"
        return [f"{label}: not found on the unit's PATH {where}; fix: give server_launcher/router_launcher "
                "as an absolute path, or install it there"]
    real = os.path.realpath(path)
    for candidate in dict.fromkeys([path, real]):
        setting = hidden_by(candidate, need.get("hidden") or {})
        if setting:
            seen = f" (it resolves to {real})" if candidate != path else ""
            return [f"{label}{seen} is invisible to the unit: {setting}; the service would fail with 'No such "
                    "file or directory'; fix: install it outside that folder (e.g. under /opt) and point the "
                    "spec at it"]
    for candidate in dict.fromkeys([path, real]):
        folder, mode = blocked_dir(candidate, who, no_dac)
        if folder:
            return [f"{label}: user {user} cannot enter {folder} ({mode}); fix: chmod o+x {folder} (or make "
                    f"{user} its owner or a member of its group)"]
    if need["need"] in ("model", "read") and not os.path.isabs(path):
        return [f"{label}: not an absolute path (the service's working directory is its release); fix: give "
                "the absolute path"]
    try:
        st = os.stat(path)
    except OSError as exc:
        if need["need"] == "search":
            return []  # the install root is created by the deploy
        return [f"{label}: {exc.strerror}; fix: install it, or correct the spec to where it is"]
    if need["need"] == "model":
        return model_folder.check_folder(label, path, need.get("model") or {}, user,
                                         lambda p: _readable(p, who, no_dac))
    if need["need"] in _FILE_NEEDS:
        bits, verb, chmod, what = _FILE_NEEDS[need["need"]]
        if not stat.S_ISREG(st.st_mode):
            return [f"{label}: not a regular file; fix: point the spec at the {what} itself"]
        if not who.may(st, bits, no_dac):
            return [f"{label}: user {user} cannot {verb} it ({trust.describe(st)}); fix: chmod {chmod} {real} "
                    f"(or make {user} its owner or a member of its group)"]
    elif need["need"] == "search":
        if not stat.S_ISDIR(st.st_mode) or not who.may(st, X, no_dac):
            return [f"{label}: user {user} cannot enter it ({trust.describe(st)}); fix: chmod o+x {path}"]
    elif need["need"] == "secret":
        return _check_secret(label, path, st, who, no_dac)
    return []


def _missing_device(label: str, path: str) -> str:
    # mooncake would not see the device and fall back to TCP silently (its log says "Found 0 HCAs").
    folder = os.path.dirname(path)
    present = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    found = f"it has {', '.join(present)}" if present else f"it has none ({folder} is empty or missing)"
    return (f"{label}: no such InfiniBand device on this host ({found}); fix: set ib_device to a device the host "
            "has, or transport: tcp")


# A file the service runs or reads: (permission bits, verb, chmod to fix it, what it is).
_FILE_NEEDS = {"exec": (X, "execute", "o+rx", "program"), "read": (R, "read", "o+r", "file")}


def _readable(path: str, who: Who, no_dac: bool) -> bool:
    try:
        return who.may(os.stat(path), R, no_dac)
    except OSError:
        return False


def _check_secret(label: str, path: str, st: os.stat_result, who: Who, no_dac: bool) -> list[str]:
    user = who.name
    fix = f"chown {user} {path} && chmod 0400 {path}"
    if not who.exists:
        return [f"{label}: user {user} does not exist yet, so it cannot own the key; fix: create the user, then "
                f"{fix} (or give the key as api_key: {{vault_var: NAME}}, which the deploy installs for it)"]
    if not stat.S_ISREG(st.st_mode):
        return [f"{label}: not a regular file; fix: put the key in a file, then {fix}"]
    if not who.may(st, R, no_dac):
        return [f"{label}: user {user} cannot read it ({trust.describe(st)}); fix: {fix}"]
    others = sorted(readers(st) - {user})
    if others:
        shown = "everyone" if "*" in others else ", ".join(others)
        return [f"{label}: readable by {shown}, not only by {user} ({trust.describe(st)}); fix: {fix}"]
    return []


def problems(host: str, user: str, create_user: bool, needs: list[dict]) -> dict:
    """The access check's result: C(problems), one line per problem naming host, user, path and fix, and
    C(create_user), True when the user is missing, may be created and nothing else is wrong."""
    who = Who(user, create_user)
    found: list[str] = []
    if not who.exists and not who.create:
        found.append(f"user {who.name} does not exist: every unit would fail with status=217/USER; fix: create "
                     f"it (useradd --system --create-home --shell /usr/sbin/nologin {who.name}) or set "
                     "service_user_create: true")
    seen: set[str] = set()
    for need in needs:
        if need["need"] == "secret" and not who.exists and not who.create:
            continue  # the missing user is the problem, said once above
        for problem in check_need(need, who):
            if problem not in seen:
                seen.add(problem)
                found.append(problem)
    lines = [f"host {host}, user {who.name}: {problem}" for problem in found]
    return {"problems": lines, "create_user": not who.exists and who.create and not found}


def failure_message(lines: list[str]) -> str:
    """The one message of a failed access check."""
    return "the services could not start as configured:\n- " + "\n- ".join(lines)
