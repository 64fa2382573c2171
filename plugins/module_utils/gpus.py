"""A host's GPUs as nvidia-smi reports them, and the wait until stopped servers' GPU memory is released
(standard library only): shared by the preflight check (dsv4_host) and the stop that waits for its GPUs
(dsv4_service_state O(gpus_released)), so a recreate's stop and its GPU wait are one module run."""

from __future__ import annotations

import subprocess
import time


class GpuError(Exception):
    """The GPU query could not run, or the memory was not released in time (the message says which)."""

    def __init__(self, msg: str, table: dict | None = None) -> None:
        super().__init__(msg)
        self.table = table


def _smi(cmd: list[str], *args: str) -> list[list[str]] | None:
    try:
        proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise GpuError(f"GPU query command not found: {cmd[0]}; install the NVIDIA driver tools or set "
                       "gpu_query_command") from None
    if proc.returncode != 0:
        return None
    return [[c.strip() for c in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]


def gpu_table(cmd: list[str]) -> dict[int, dict]:
    """index -> {uuid, used, total} in MiB."""
    rows = _smi(cmd, "--query-gpu=index,uuid,memory.used,memory.total", "--format=csv,noheader,nounits")
    if rows is None:
        rows = [[r[0], "", r[1], r[2]] for r in
                (_smi(cmd, "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits") or [])]
    return {int(r[0]): {"uuid": r[1], "used": int(float(r[2])), "total": int(float(r[3]))} for r in rows if r}


def compute_apps(cmd: list[str]) -> list[dict]:
    """Processes holding GPU memory: {pid, used, gpu_uuid (may be empty)}."""
    rows = _smi(cmd, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")
    if rows is not None:
        return [{"gpu_uuid": r[0], "pid": int(r[1]), "used": int(float(r[2]))} for r in rows if len(r) >= 3]
    rows = _smi(cmd, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits") or []
    return [{"gpu_uuid": "", "pid": int(r[0]), "used": int(float(r[1]))} for r in rows if len(r) >= 2]


def proc_name(pid: int) -> str:
    """The command line of `pid` (cut short), or '?'."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def wait_released(cmd: list[str], gpus: list[int], our_pids: list[int], threshold_mib: int, timeout_s: float,
                  poll_s: float) -> dict:
    """Poll until every GPU of `gpus` (and any our stopped processes held) uses less than `threshold_mib`:
    {seconds, gpus}; GpuError naming each busy GPU and its holders at `timeout_s`."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        table = gpu_table(cmd)
        watched = set(gpus)
        # Only a GPU at the threshold can be busy: with none, which GPUs our processes held does not matter
        # (one nvidia-smi call fewer in the usual case).
        if our_pids and any(v["used"] >= threshold_mib for v in table.values()):
            # GPUs our stopped processes held (their memory may be released late) count too.
            uuid_index = {v["uuid"]: k for k, v in table.items() if v["uuid"]}
            ours = set(our_pids)
            watched |= {uuid_index[a["gpu_uuid"]] for a in compute_apps(cmd)
                        if a["pid"] in ours and a["gpu_uuid"] in uuid_index}
        busy = {g: table[g]["used"] for g in sorted(watched) if g in table and table[g]["used"] >= threshold_mib}
        if not busy:
            return {"seconds": round(time.monotonic() - started, 2), "gpus": {g: table.get(g) for g in gpus}}
        if time.monotonic() > deadline:
            holders = [f"pid {a['pid']} ({proc_name(a['pid'])}) {a['used']} MiB" for a in compute_apps(cmd)]
            usage = ", ".join(f"GPU {g} uses {mib} MiB" for g, mib in sorted(busy.items()))
            raise GpuError(f"GPU memory not released after {timeout_s} s: {usage} (threshold "
                           f"{threshold_mib} MiB); holders: {', '.join(holders) or 'none listed'}", table)
        time.sleep(poll_s)
