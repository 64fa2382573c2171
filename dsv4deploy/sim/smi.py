"""``python -m dsv4deploy.sim.smi``: nvidia-smi for the simulated host, read from its GPU ledger.

Supports ``-L``, ``--query-gpu=...`` and ``--query-compute-apps=...`` with
``--format=csv[,noheader][,nounits]``, and a plain call (a short table). An idle GPU shows
4 MiB used, as the seeds' GPUs did.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable

from .env import SimEnv, read_env
from .ledger import Holding, Ledger

IDLE_MIB = 4
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def gpu_uuid(env: SimEnv, index: int) -> str:
    """A stable UUID per simulated GPU (per state dir, so two simulated hosts differ)."""
    h = hashlib.sha256(f"{env.state_dir}|{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _bus_id(index: int) -> str:
    return f"00000000:{0x18 + index * 0x10:02X}:00.0"


def _gpu_fields(env: SimEnv, used: list[int]) -> dict[str, Callable[[int, bool], str]]:
    total = int(env.gpu_memory_gib * 1024)

    def mib(value: int, units: bool) -> str:
        return f"{value}" if not units else f"{value} MiB"

    return {
        "index": lambda i, u: str(i),
        "name": lambda i, u: GPU_NAME,
        "uuid": lambda i, u: gpu_uuid(env, i),
        "gpu_uuid": lambda i, u: gpu_uuid(env, i),
        "pci.bus_id": lambda i, u: _bus_id(i),
        "memory.used": lambda i, u: mib(IDLE_MIB + used[i], u),
        "memory.total": lambda i, u: mib(total, u),
        "memory.free": lambda i, u: mib(max(0, total - IDLE_MIB - used[i]), u),
        "utilization.gpu": lambda i, u: "0" if not u else "0 %",
        "temperature.gpu": lambda i, u: "34",
        "driver_version": lambda i, u: "580.95.05",
    }


def _app_fields(env: SimEnv) -> dict[str, Callable[[Holding, int, bool], str]]:
    return {
        "pid": lambda h, g, u: str(h.pid),
        "used_memory": lambda h, g, u: f"{h.mib_per_gpu}" if not u else f"{h.mib_per_gpu} MiB",
        "used_gpu_memory": lambda h, g, u: f"{h.mib_per_gpu}" if not u else f"{h.mib_per_gpu} MiB",
        "gpu_uuid": lambda h, g, u: gpu_uuid(env, g),
        "gpu_bus_id": lambda h, g, u: _bus_id(g),
        "process_name": lambda h, g, u: h.process_name,
        "name": lambda h, g, u: h.process_name,
    }


def _header(field: str, units: bool) -> str:
    return f"{field} [MiB]" if units and "memory" in field else field


def run(argv: list[str], env: SimEnv) -> tuple[int, str]:
    """Execute one nvidia-smi call; returns (exit status, output)."""
    opts: dict[str, str] = {}
    flags: set[str] = set()
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            k, v = arg[2:].split("=", 1)
            opts[k] = v
        else:
            flags.add(arg)
    unknown = flags - {"-L", "--list-gpus"}
    if unknown:
        return 2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
    ledger = Ledger(env.state_dir)
    holdings = ledger.holdings()
    used = [0] * env.gpu_count
    for h in holdings:
        for g in h.gpus:
            if 0 <= g < env.gpu_count:
                used[g] += h.mib_per_gpu
    if flags & {"-L", "--list-gpus"}:
        return 0, "".join(f"GPU {i}: {GPU_NAME} (UUID: {gpu_uuid(env, i)})\n" for i in range(env.gpu_count))
    fmt = set(opts.get("format", "csv").split(","))
    header, units = "noheader" not in fmt, "nounits" not in fmt
    if "query-gpu" in opts:
        fields = [f.strip() for f in opts["query-gpu"].split(",") if f.strip()]
        table = _gpu_fields(env, used)
        bad = [f for f in fields if f not in table]
        if bad:
            return 2, f'Field "{bad[0]}" is not a valid field to query.\n\n'
        rows = [", ".join(table[f](i, units) for f in fields) for i in range(env.gpu_count)]
    elif "query-compute-apps" in opts:
        fields = [f.strip() for f in opts["query-compute-apps"].split(",") if f.strip()]
        apps = _app_fields(env)
        bad = [f for f in fields if f not in apps]
        if bad:
            return 2, f'Field "{bad[0]}" is not a valid field to query.\n\n'
        rows = [", ".join(apps[f](h, g, units) for f in fields)
                for g in range(env.gpu_count) for h in holdings if g in h.gpus]
    else:
        total = int(env.gpu_memory_gib * 1024)
        lines = [f"| {i}  {GPU_NAME[:28]:<28} | {IDLE_MIB + used[i]:>6}MiB / {total}MiB |"
                 for i in range(env.gpu_count)]
        lines += [f"|  GPU {g}  PID {h.pid:>8}  {h.process_name[-30:]:<30} {h.mib_per_gpu:>7}MiB |"
                  for h in holdings for g in h.gpus]
        return 0, "\n".join(lines) + "\n"
    out = ([", ".join(_header(f, units) for f in fields)] if header else []) + rows
    return 0, "".join(line + "\n" for line in out)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    status, text = run(sys.argv[1:] if argv is None else argv, read_env_safe())
    (sys.stdout if status == 0 else sys.stderr).write(text)
    return status


def read_env_safe() -> SimEnv:
    """The host settings; smi ignores fault settings it cannot parse (they are the server's)."""
    try:
        return read_env()
    except ValueError:
        import os

        env = dict(os.environ)
        env.pop("DSV4_SIM_FAULTS", None)
        return read_env(env)


if __name__ == "__main__":
    sys.exit(main())
