"""The root filesystem of the throwaway hosts: Debian bookworm by debootstrap, built once and cached.

The cache key is a hash of the recipe below (suite, packages, the setup script run inside, the
sglang-router version), so changing the recipe builds a new rootfs and an unchanged one is reused.
Builds are serialized by a lock file, so two test runs on one machine never build at once.

    python -m tests.systemd.hostkit build      # build (or find) the rootfs and print its path
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

CACHE = Path(os.environ.get("DSV4_HOSTKIT_CACHE", "/var/cache/dsv4deploy/hostkit"))
SUITE = "bookworm"
MIRROR = os.environ.get("DSV4_HOSTKIT_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ["systemd", "systemd-sysv", "dbus", "python3", "iproute2", "procps", "openssh-server", "sudo",
            "nftables"]
SERVICE_USER = "sglang"
SIM_STATE_DIR = "/var/lib/dsv4-sim"
ROUTER_DIR = "/opt/sglang-router"

# Run inside the new rootfs (chroot): what a site's base image would hold before dsv4deploy runs.
SETUP = f"""set -eu
useradd --system --create-home --home-dir /var/lib/{SERVICE_USER} --shell /usr/sbin/nologin {SERVICE_USER}
install -d -m 0700 /root/.ssh
install -d -o {SERVICE_USER} -g {SERVICE_USER} -m 0755 {SIM_STATE_DIR}
printf 'UseDNS no\\nPermitRootLogin prohibit-password\\nPasswordAuthentication no\\n' \\
  > /etc/ssh/sshd_config.d/dsv4-hostkit.conf
# Nothing on these hosts needs a console login, time sync or apt timers.
systemctl mask console-getty.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer \\
  e2scrub_all.timer fstrim.timer 2>/dev/null || true
systemctl enable ssh.service
# The router's own Python environment, bound in only on the hosts that run a router.
python3 -m venv --without-pip {ROUTER_DIR}
apt-get clean
rm -rf /var/lib/apt/lists/*
"""


def router_version() -> str:
    """The sglang-router the controller uses; the router hosts get the same."""
    return metadata.version("sglang-router")


@dataclass(frozen=True)
class Rootfs:
    """A built rootfs and the router environment that goes with it."""

    path: Path
    router: Path
    key: str


def recipe() -> dict[str, object]:
    """Everything that decides the rootfs's content."""
    return {"suite": SUITE, "mirror": MIRROR, "packages": PACKAGES, "setup": SETUP,
            "router": f"sglang-router=={router_version()}", "python": "3.11"}


def recipe_key() -> str:
    """A short hash of the recipe: the cache entry's name."""
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:12]


def log(msg: str) -> None:
    """A progress line on stderr (shown by pytest -s and on failures)."""
    print(f"[hostkit] {msg}", file=sys.stderr, flush=True)


def _run(argv: list[str], **kw: object) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed (rc {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _build(tmp: Path) -> None:
    rootfs, router = tmp / "rootfs", tmp / "router"
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
         timeout=1800)
    _run(["chroot", str(rootfs), "/bin/sh", "-c", SETUP], timeout=300)
    # The router's packages come from the controller's pip (its cache and index), built for the
    # rootfs's Python 3.11; then the environment moves out, to be bound in on router hosts only.
    site = rootfs / ROUTER_DIR.lstrip("/") / "lib" / "python3.11" / "site-packages"
    _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
          "--target", str(site), "--python-version", "3.11", "--only-binary=:all:",
          f"sglang-router=={router_version()}"], timeout=1800)
    shutil.move(str(rootfs / ROUTER_DIR.lstrip("/")), str(router))
    (rootfs / ROUTER_DIR.lstrip("/")).mkdir()


def ensure_rootfs(cache: Path = CACHE) -> Rootfs:
    """The cached rootfs for the current recipe, building it first when it is missing."""
    key = recipe_key()
    entry = cache / f"bookworm-{key}"
    done = entry / "complete.json"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            tmp = cache / f".build-{key}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            log(f"building the host rootfs {entry} (debootstrap {SUITE}, once per recipe)")
            start = time.monotonic()
            try:
                _build(tmp)
                shutil.rmtree(entry, ignore_errors=True)
                tmp.rename(entry)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            took = time.monotonic() - start
            done.write_text(json.dumps({"recipe": recipe(), "build_s": round(took, 1)}, indent=1))
            log(f"rootfs built in {took:.0f} s")
    return Rootfs(path=entry / "rootfs", router=entry / "router", key=key)


def prune(cache: Path = CACHE) -> list[Path]:
    """Drop rootfs builds of other recipes (about 400 MB each); never done on its own, because a
    test run of another checkout may be using one."""
    keep = cache / f"bookworm-{recipe_key()}"
    dropped = [old for old in cache.glob("bookworm-*") if old != keep]
    for old in dropped:
        shutil.rmtree(old, ignore_errors=True)
    return dropped
