"""A private copy of the real-engine tier's inventory for one test module, and its processes.

The copy is ``tests/real_engine/inventory`` with ports and paths filled in, so the playbooks run
as a user runs them; nothing in the tool knows it is under test. The host object is the embedded
host's (tests.integration.simhost.SimHost): playbooks, reports, supervisord's programs.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import yaml

from tests.integration.simhost import REPO, SimHost, assign_ports
from tests.ports import free_port_block

TIER = Path(__file__).resolve().parent
STAND_IN = TIER / "stand_in"


def engine_python() -> Path:
    """The real-engine venv's python (scripts/setup.sh links it as .engine-venv)."""
    venv = os.environ.get("DSV4_ENGINE_VENV")
    return Path(venv or REPO / ".engine-venv") / "bin" / "python"


def make_engine_host(root: Path, model: Path, **variables: object) -> SimHost:
    """Copy the tier's inventory into `root` with fresh ports, paths under `root` and `variables`."""
    host = SimHost(root=root, base_port=free_port_block(5))
    shutil.copytree(TIER / "inventory", host.inventory)
    assign_ports(host.inventory, host.base_port, install_root=host.install_root)
    key_file = root / "api_key"
    key_file.write_text("sk-engine-" + os.urandom(8).hex() + "\n")
    key_file.chmod(0o600)
    paths = {
        # Not resolved: a venv's bin/python is a link out to the base interpreter, without sglang.
        "dsv4_engine_python": str(engine_python()),
        "dsv4_engine_model": str(model),
        "dsv4_engine_stand_in": str(STAND_IN),
        "dsv4_engine_nccl_base": free_port_block(3),
        "dsv4_smg_python": str(REPO / ".smg-venv" / "bin" / "python"),
        "api_key": {"file": str(key_file)},
        **variables,
    }
    (host.inventory / "group_vars" / "all" / "zz_paths.yml").write_text(yaml.safe_dump(paths))
    return host


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def process_name(pid: int) -> str:
    """The process's title (sglang names its children `sglang::scheduler`, `sglang::detokenizer`)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def usage(pids: list[int], seconds: float = 5.0) -> dict[int, tuple[float, int]]:
    """Per pid: the share of one core it used over `seconds` (%) and its RSS (MiB), for the tier's figures."""
    hz = os.sysconf("SC_CLK_TCK")

    def ticks(pid: int) -> int:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            return 0

    def rss(pid: int) -> int:
        try:
            line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS"))
            return int(line.split()[1]) // 1024
        except (OSError, StopIteration, ValueError):
            return 0

    before = {p: ticks(p) for p in pids}
    time.sleep(seconds)
    return {p: (round((ticks(p) - before[p]) / hz / seconds * 100, 1), rss(p)) for p in pids}
