#!/usr/bin/python
"""Worker checks run on the worker's own host: for servers bound to addresses only that host reaches."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_worker_check
short_description: Poll workers' /health or read their /server_info from the host they listen on
description:
  - Run by the action M(dsv4.deploy.dsv4_worker_probe), which decides which workers need it. Standard
    library only. Never fails for a failing server; returns, per worker, the same evidence the
    controller-side gates record (tries, time to ready, last status, body and error).
  - Before asking anything, each address is checked to be one of this host's own; one that is not is
    reported at once, without waiting for a deadline.
options:
  checks:
    type: list
    elements: dict
    required: true
    description:
      - "Workers to check, each with C(name) and C(url)."
  mode:
    type: str
    choices: [readiness, config]
    required: true
    description:
      - What to ask - C(/health) until ready, or C(/server_info) once.
  deadline_s:
    type: float
    default: 600
    description:
      - Readiness deadline.
  poll_interval_s:
    type: float
    default: 0.25
    description:
      - Seconds between readiness tries.
  request_timeout_s:
    type: float
    default: 5
    description:
      - Seconds one request may take.
  api_key_file:
    type: str
    description:
      - File on this host holding the API key, sent as a Bearer token (O(mode=config)).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.read_only
attributes:
  check_mode:
    support: full
    description: Only reads from the servers.
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Wait on this host until its loopback-bound prefill answers /health
  dsv4.deploy.dsv4_worker_check:
    checks:
      - {name: prefill, url: "http://127.0.0.1:30001"}
    mode: readiness
    deadline_s: 300
"""

RETURN = r"""
workers:
  description: Worker name to its evidence (C(ready), C(tries), C(seconds_to_ready), C(last_status), C(last_body),
    C(last_error); C(server_info) answers for O(mode=config); C(unreachable) when the address is not this host's).
  returned: always
  type: dict
seconds:
  description: How long the checks took.
  returned: always
  type: float
"""


import errno
import socket
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

BODY_LIMIT = 4000  # as the controller-side gates keep (dsv4deploy.gates.result.BODY_LIMIT)
INFO_LIMIT = 1_000_000  # a server_info body is parsed on the controller: keep it whole
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
# No environment proxies: the address is this host's own.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _clip(text: str, limit: int = BODY_LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more characters]"


def get(url: str, key: str | None, timeout: float, limit: int = BODY_LIMIT) -> dict:
    """One GET: {status, body, error}; status None when no HTTP answer came."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return {"status": resp.status, "body": _clip(resp.read().decode(errors="replace"), limit), "error": ""}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": _clip(exc.read().decode(errors="replace"), limit), "error": ""}
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"status": None, "body": "", "error": f"{reason.__class__.__name__}: {reason}"}


def not_here(url: str) -> str:
    """Why `url`'s address is not one of this host's own, or ''."""
    address = urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"{address} does not resolve on this host ({exc.strerror})"
    family, sockaddr = infos[0][0], infos[0][4]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((sockaddr[0], 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"{address} is not an address of this host, so no server here can listen on it"
    return ""


def poll_health(check: dict, key: str | None, deadline: float, started: float, p: dict) -> dict:
    """Ask /health until 200 or the deadline; evidence as the controller's readiness gate keeps it."""
    url = f"{check['url']}/health"
    ev = {"check": f"{check['name']} /health", "url": url, "ready": False, "seconds_to_ready": None,
          "attempts": 0, "last_status": None, "last_body": ""}
    while True:
        ev["attempts"] += 1
        left = deadline - time.monotonic()
        answer = get(url, key, min(p["request_timeout_s"], max(left, 0.2)))
        ev["last_status"], ev["last_body"] = answer["status"], answer["body"]
        if answer["error"]:
            ev["last_error"] = answer["error"]
        else:
            ev.pop("last_error", None)
        if answer["status"] == 200:
            ev["ready"] = True
            ev["seconds_to_ready"] = round(time.monotonic() - started, 3)
            return ev
        if time.monotonic() >= deadline:
            return ev
        time.sleep(min(p["poll_interval_s"], max(deadline - time.monotonic(), 0)))


def server_info(check: dict, key: str | None, timeout: float) -> list[dict]:
    """The answers of /server_info (then /get_server_info when the first is 404)."""
    answers = []
    for path in SERVER_INFO_PATHS:
        answer = {"path": path, **get(f"{check['url']}{path}", key, timeout, INFO_LIMIT)}
        answers.append(answer)
        if answer["status"] != 404:
            break
    return answers


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "checks": {"type": "list", "elements": "dict", "required": True},
            "mode": {"type": "str", "choices": ["readiness", "config"], "required": True},
            "deadline_s": {"type": "float", "default": 600},
            "poll_interval_s": {"type": "float", "default": 0.25},
            "request_timeout_s": {"type": "float", "default": 5},
            "api_key_file": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    key = None
    if p["api_key_file"] and p["mode"] == "config":  # /health is open; only server_info needs the key
        try:
            with open(p["api_key_file"], encoding="utf-8") as fh:
                key = fh.read().strip() or None
        except OSError as exc:
            module.fail_json(msg=f"cannot read the API key file {p['api_key_file']} on this host to ask the "
                                 f"workers' server_info: {exc.strerror}")
    started = time.monotonic()
    results: dict[str, dict] = {}
    threads = []
    for check in p["checks"]:
        why = not_here(check["url"])
        if why:
            results[check["name"]] = {"unreachable": why, "url": check["url"]}
            continue
        if p["mode"] == "config":
            results[check["name"]] = {"server_info": server_info(check, key, p["request_timeout_s"] * 2)}
            continue

        def run(check: dict = check) -> None:
            results[check["name"]] = {"health": poll_health(check, key, started + p["deadline_s"], started, p)}

        threads.append(threading.Thread(target=run, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    module.exit_json(changed=False, workers=results, seconds=round(time.monotonic() - started, 3))


if __name__ == "__main__":
    main()
