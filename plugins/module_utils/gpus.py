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


GPU_QUERY = ("--query-gpu=index,uuid,memory.used,memory.total", "--format=csv,noheader,nounits")
APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")
SMI_TIMEOUT_S = 60


def _launch(cmd: list[str], *args: str) -> subprocess.Popen:
    """Start one nvidia-smi query (GpuError when the command is not there)."""
    try:
        return subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise GpuError(f"GPU query command not found: {cmd[0]}; install the NVIDIA driver tools or set "
                       "gpu_query_command") from None


def _rows(proc: subprocess.Popen) -> list[list[str]] | None:
    """The CSV rows a query started by _launch printed; None when it failed. Past SMI_TIMEOUT_S it is killed
    and subprocess.TimeoutExpired raised, as subprocess.run does."""
    try:
        out = proc.communicate(timeout=SMI_TIMEOUT_S)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        return None
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def _smi(cmd: list[str], *args: str) -> list[list[str]] | None:
    return _rows(_launch(cmd, *args))


def _table(cmd: list[str], rows: list[list[str]] | None) -> dict[int, dict]:
    if rows is None:  # a driver too old for uuid in --query-gpu
        rows = [[r[0], "", r[1], r[2]] for r in
                (_smi(cmd, "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits") or [])]
    return {int(r[0]): {"uuid": r[1], "used": int(float(r[2])), "total": int(float(r[3]))} for r in rows if r}


def _apps(cmd: list[str], rows: list[list[str]] | None) -> list[dict]:
    if rows is not None:
        return [{"gpu_uuid": r[0], "pid": int(r[1]), "used": int(float(r[2]))} for r in rows if len(r) >= 3]
    rows = _smi(cmd, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits") or []
    return [{"gpu_uuid": "", "pid": int(r[0]), "used": int(float(r[1]))} for r in rows if len(r) >= 2]


def gpu_table(cmd: list[str]) -> dict[int, dict]:
    """index -> {uuid, used, total} in MiB."""
    return _table(cmd, _smi(cmd, *GPU_QUERY))


def compute_apps(cmd: list[str]) -> list[dict]:
    """Processes holding GPU memory: {pid, used, gpu_uuid (may be empty)}."""
    return _apps(cmd, _smi(cmd, *APPS_QUERY))


def table_and_apps(cmd: list[str]) -> tuple[dict[int, dict], list[dict]]:
    """gpu_table and compute_apps from two queries run at once (the preflight needs both: one nvidia-smi's
    wall time, not two)."""
    gpu_proc = _launch(cmd, *GPU_QUERY)
    try:
        apps_proc = _launch(cmd, *APPS_QUERY)
    except BaseException:
        gpu_proc.kill()
        gpu_proc.communicate()
        raise
    try:
        gpu_rows = _rows(gpu_proc)
    except BaseException:
        apps_proc.kill()
        apps_proc.communicate()
        raise
    return _table(cmd, gpu_rows), _apps(cmd, _rows(apps_proc))


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
