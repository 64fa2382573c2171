"""Proving a cross-host path before anything stops: a short-lived listener on the target host's port, and a
connection to it from the host that will connect (standard library only).

The listener is a detached child process (its own session) that binds every port it is given, accepts and
closes connections, and exits by itself after its time to live; `stop` ends it earlier by its PID. A port
already bound (by the serving release, which preflight has found to be ours) needs no listener: a connection
to what listens there proves the path as well.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys

# The child's argv carries this word, so `stop` ends only a listener of ours.
MARK = "dsv4-reach-listener"
_CHILD = r"""
import errno, json, select, socket, sys, time
spec = json.loads(sys.argv[1])
socks, answer = [], {"bound": [], "busy": [], "failed": {}}
def bind(address, port):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((address.strip("[]"), port))
        s.listen(16)
    except OSError:
        s.close()
        raise
    return s
for item in spec["ports"]:
    try:
        try:
            s = bind(item["address"], item["port"])
        except OSError as exc:
            # Every address is taken on one (a serving release on loopback): the one others connect to may be free.
            reach = item.get("reach") or item["address"]
            if exc.errno != errno.EADDRINUSE or reach == item["address"]:
                raise
            s = bind(reach, item["port"])
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            answer["busy"].append(item["port"])
        else:
            answer["failed"][str(item["port"])] = exc.strerror or str(exc)
        continue
    socks.append(s)
    answer["bound"].append(item["port"])
sys.stdout.write(json.dumps(answer) + "\n")
sys.stdout.flush()
sys.stdout.close()
deadline = time.monotonic() + spec["ttl_s"]
while socks and time.monotonic() < deadline:
    ready, _, _ = select.select(socks, [], [], 0.5)
    for s in ready:
        try:
            s.accept()[0].close()
        except OSError:
            pass
"""


def start_listener(ports: list[dict], ttl_s: float) -> dict:
    """Bind `ports` ([{address, port}]) in a detached child for at most `ttl_s` seconds.

    Returns {"pid": the child's PID (None when it bound nothing), "bound": [...], "busy": [...] (held by
    another listener: what connects reaches that one), "failed": {port: why}}.
    """
    argv = [sys.executable, "-c", _CHILD, json.dumps({"ports": ports, "ttl_s": ttl_s}), MARK]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True)
    if child.stdout is None:  # stdout=PIPE always gives one; this only narrows the type
        raise RuntimeError("the listener's stdout is not a pipe")
    line = child.stdout.readline()
    child.stdout.close()
    answer = json.loads(line) if line else {"bound": [], "busy": [], "failed": {"*": "the listener did not start"}}
    answer["pid"] = child.pid if answer["bound"] else None
    if not answer["bound"]:
        child.wait(timeout=10)
    return answer


def stop_listener(pid: int | None) -> bool:
    """End the listener `pid` if it is still ours; whether one was ended."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if MARK.encode() not in fh.read():
                return False
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return False
    # Not our child when a later module run stops it: it exits on the signal, and init reaps it.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return True


def connect_problem(address: str, port: int, timeout_s: float) -> str:
    """'' when a TCP connection to `address`:`port` opens from here, else what is in the way (one line)."""
    try:
        with socket.create_connection((address.strip("[]"), port), timeout=timeout_s):
            return ""
    except ConnectionRefusedError:
        return (f"connection refused: {address} answered but nothing listens on port {port} there (a wrong "
                f"address: another machine answers at {address}, or the listener could not bind)")
    except TimeoutError:
        return (f"timed out after {timeout_s:g} s: likely a firewall dropping port {port}, or {address} is not "
                "on a route from here")
    except socket.gaierror as exc:
        return f"{address} does not resolve here ({exc.strerror})"
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL):
            return f"no route to {address} from here ({exc.strerror}): a wrong address, or a network in between"
        return f"{exc.strerror or exc}"
