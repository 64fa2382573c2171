"""Whether the host's /proc hides other users' processes (standard library only).

sglang and both routers (sglang-router, smg) take the API key only as `--api-key`, so it is in the
servers' and the router's /proc/PID/cmdline, which every local user may read unless /proc is mounted
with `hidepid` (1/noaccess, 2/invisible or ptraceable). The units' ProtectProc=invisible hides other
users' processes from our services, not ours from other users: only the host's mount does that.
"""

from __future__ import annotations

MOUNTINFO = "/proc/1/mountinfo"
# hidepid values that keep other users out of /proc/PID/cmdline (0 and "off" do not).
HIDING = frozenset({"1", "2", "4", "noaccess", "invisible", "ptraceable"})


def proc_hidepid(mountinfo: str) -> str | None:
    """The hidepid value of the /proc mount described in `mountinfo` (a mountinfo file's text), None when unset."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 10 or fields[4] != "/proc" or "-" not in fields:
            continue
        tail = fields[fields.index("-") + 1:]
        if len(tail) < 3 or tail[0] != "proc":
            continue
        options = [o.partition("=") for o in tail[2].split(",") + fields[5].split(",")]
        return next((value for key, _sep, value in options if key == "hidepid"), None)
    return None


def exposure_warning(mountinfo_path: str = MOUNTINFO) -> str | None:
    """A warning when /proc lets every local user read our command lines (None when it does not)."""
    try:
        with open(mountinfo_path, encoding="utf-8") as fh:
            value = proc_hidepid(fh.read())
    except OSError:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8") as fh:
                value = proc_hidepid(fh.read())
        except OSError:
            return "cannot read /proc's mount options: whether local users can read the API key is unknown"
    if value in HIDING:
        return None
    return ("the API key is on the servers' and the router's command lines (sglang, sglang-router and smg "
            "take it only as --api-key) and /proc is mounted without hidepid"
            + (f" (hidepid={value})" if value else "")
            + ", so every local user can read it from /proc/PID/cmdline. Fix: mount /proc with "
            "hidepid=invisible (e.g. 'proc /proc proc defaults,hidepid=invisible 0 0' in /etc/fstab, then "
            "mount -o remount /proc; see docs/security.md)")
