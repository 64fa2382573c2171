"""A router's worker API: list, add and remove the workers a running router sends requests to (standard
library only).

Which routes a router has depends on its kind and version (checked against the real wheels, see
tests/unit/test_router_workers.py):

- ``uuid`` -- sglang-router >= 0.3 and smg: ``POST /workers`` with ``{url, worker_type, bootstrap_port}``
  answers ``202 {"status": "accepted", "worker_id": UUID, "location"}`` and does the work in the
  background; ``GET /workers/{id}`` carries ``job_status`` until the job is done; ``GET /workers`` lists
  ``{"workers": [{id, url, worker_type, is_healthy, bootstrap_port, ...}]}``; ``DELETE /workers/{id}``
  answers 202. sglang-router 0.3.2 forgets a removed worker at once; smg keeps it as ``status:
  draining`` (``is_healthy: false``, no new requests) for a fixed settle delay (about 5 s) first. A second POST
  of a known URL: 0.3.2 answers 202 with the same id, smg 409 ``WORKER_ALREADY_EXISTS``.
- ``url`` -- sglang-router 0.2.2 to 0.2.x: the same routes, the url-encoded worker URL as the id.
- ``legacy`` -- sglang-router <= 0.2.1: ``POST /add_worker?url=`` and ``POST /remove_worker?url=``
  and ``GET /list_workers`` (``{"urls": [...]}``), regular workers only.

Removing a worker does not drain it: requests it is serving go on, and only the server's own SIGTERM
waits for them (the caller stops the server after removing it).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

# No environment proxies: the router asked is this host's own (or one the caller names directly).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

WORKER_TYPES = ("regular", "prefill", "decode")
APIS = ("uuid", "url", "legacy")


class RouterWorkersError(Exception):
    """The router refused or did not finish a change; the message names the router, worker and answer."""


def api_for(router: str, version: str) -> str:
    """Which worker API `router` (``sglang-router`` or ``smg``) at `version` speaks: uuid, url or legacy."""
    if router == "smg":
        return "uuid"
    if router != "sglang-router":
        raise ValueError(f"unknown router {router!r}: sglang-router or smg")
    try:
        parts = tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        raise ValueError(f"router version {version!r} is not a version number (like 0.3.2)") from None
    if parts >= (0, 3):
        return "uuid"
    return "url" if parts >= (0, 2, 2) else "legacy"


def normal_url(url: str) -> str:
    """A worker URL as routers compare them: no trailing slash."""
    return url.rstrip("/")


class RouterWorkers:
    """The worker API of one running router at `base` (``http://host:port``)."""

    def __init__(self, base: str, api: str, key: str | None = None, timeout: float = 5.0) -> None:
        if api not in APIS:
            raise ValueError(f"unknown worker API {api!r}: one of {', '.join(APIS)}")
        self.base, self.api, self.key, self.timeout = base.rstrip("/"), api, key, timeout

    # -- HTTP ------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        """One request; (status, parsed JSON or text). A router that does not answer raises."""
        headers = {"content-type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base}{path}", data=data, method=method, headers=headers)
        try:
            with _OPENER.open(req, timeout=self.timeout) as resp:
                status, text = resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RouterWorkersError(f"router {self.base} did not answer {method} {path}: {reason}") from None
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def _refused(self, what: str, status: int, body: Any) -> RouterWorkersError:
        return RouterWorkersError(f"router {self.base} refused to {what}: HTTP {status} {str(body)[:500]}")

    # -- reading ---------------------------------------------------------------------------------

    def list(self) -> list[dict]:
        """Every worker the router knows: dicts with url, id, worker_type, healthy, status, bootstrap_port."""
        if self.api == "legacy":
            status, body = self._call("GET", "/list_workers")
            if status != 200 or not isinstance(body, dict):
                raise self._refused("list its workers", status, body)
            return [{"url": normal_url(u), "id": normal_url(u), "worker_type": "regular", "healthy": None,
                     "status": "", "bootstrap_port": None} for u in body.get("urls", [])]
        status, body = self._call("GET", "/workers")
        if status != 200 or not isinstance(body, dict):
            raise self._refused("list its workers", status, body)
        return [self._worker(w) for w in body.get("workers", [])]

    def _worker(self, raw: dict) -> dict:
        url = normal_url(str(raw.get("url", "")))
        return {"url": url, "id": str(raw.get("id") or quote(url, safe="")),
                "worker_type": str(raw.get("worker_type", "")), "healthy": raw.get("is_healthy"),
                "status": str(raw.get("status", "")), "bootstrap_port": raw.get("bootstrap_port")}

    def registered(self) -> list[dict]:
        """The workers the router routes to or will: all but those being removed (smg's draining)."""
        return [w for w in self.list() if w["status"] != "draining"]

    def find(self, url: str) -> dict | None:
        """The router's record of the worker at `url`, or None."""
        want = normal_url(url)
        return next((w for w in self.list() if w["url"] == want), None)

    def _wait_gone(self, url: str, wait_s: float) -> None:
        """Wait until a worker being removed is forgotten (smg refuses to add a URL it still drains)."""
        deadline = time.monotonic() + wait_s
        while (worker := self.find(url)) is not None and worker["status"] == "draining":
            if time.monotonic() > deadline:
                raise RouterWorkersError(f"router {self.base} still drains {url} {wait_s:.0f} s later")
            time.sleep(0.2)

    def _item_path(self, worker_id: str) -> str:
        return f"/workers/{worker_id if self.api == 'uuid' else quote(worker_id, safe='')}"

    # -- changing --------------------------------------------------------------------------------

    def add(self, url: str, worker_type: str = "regular", bootstrap_port: int | None = None,
            wait_s: float = 60.0, model_id: str | None = None) -> dict:
        """Register the worker at `url` and wait until the router routes to it; its record. A worker the
        router already has is left as it is."""
        if worker_type not in WORKER_TYPES:
            raise ValueError(f"worker_type {worker_type!r}: one of {', '.join(WORKER_TYPES)}")
        url = normal_url(url)
        self._refuse_pd_on_legacy(url, worker_type)  # before any request
        self._wait_gone(url, wait_s)
        worker_id = self.submit(url, worker_type, bootstrap_port, model_id)
        if self.api == "legacy" or worker_id == "":
            return self._wait_listed(url, wait_s)
        try:
            if worker_id and self.api == "uuid":
                self._wait_job(worker_id, f"add the {worker_type} {url}", wait_s)
            return self._wait_listed(url, wait_s)
        except RouterWorkersError:
            # Withdraw the pending job, so a worker that comes up later is not routed to behind our back.
            self._call("DELETE", self._item_path(worker_id or url))
            raise

    def _refuse_pd_on_legacy(self, url: str, worker_type: str) -> None:
        if self.api == "legacy" and worker_type != "regular":
            raise RouterWorkersError(f"router {self.base} (sglang-router <= 0.2.1) can only add regular "
                                     f"workers at run time, not the {worker_type} {url}; upgrade it to 0.3")

    def submit(self, url: str, worker_type: str = "regular", bootstrap_port: int | None = None,
               model_id: str | None = None) -> str | None:
        """Ask the router to add the worker at `url`, without waiting for it: the id of its background
        job (uuid API), "" when the router has the URL already (smg's 409, its own start probing it), None
        when there is no job to follow (url and legacy APIs). Raises when refused or not answered."""
        url = normal_url(url)
        self._refuse_pd_on_legacy(url, worker_type)
        if self.api == "legacy":
            status, body = self._call("POST", f"/add_worker?url={quote(url, safe='')}")
            if status != 200:
                raise self._refused(f"add {url}", status, body)
            return None
        spec: dict[str, Any] = {"url": url, "worker_type": worker_type}
        if bootstrap_port is not None:
            spec["bootstrap_port"] = bootstrap_port
        if model_id:
            spec["model_id"] = model_id
        status, body = self._call("POST", "/workers", spec)
        if status == 409:  # smg: already registered
            return ""
        if status not in (200, 201, 202):
            raise self._refused(f"add the {worker_type} {url}", status, body)
        return (body.get("worker_id") if isinstance(body, dict) else None) or None

    def remove(self, url: str, wait_s: float = 60.0) -> bool:
        """Take the worker at `url` out of the router; whether it was there. Returns once the router no
        longer sends it new requests (gone from the list, or draining: not healthy, smg's settle delay)."""
        return bool(self.remove_many([url], wait_s))

    def remove_many(self, urls: list[str], wait_s: float = 60.0) -> list[str]:
        """Remove every worker of `urls` at once, then wait for all; the URLs that were registered."""
        known = {w["url"]: w for w in self.registered()}
        gone = [normal_url(u) for u in urls if normal_url(u) in known]
        for url in gone:
            if self.api == "legacy":
                status, body = self._call("POST", f"/remove_worker?url={quote(url, safe='')}")
            else:
                status, body = self._call("DELETE", self._item_path(known[url]["id"]))
            if status not in (200, 202, 204, 404):
                raise self._refused(f"remove {url}", status, body)
        deadline = time.monotonic() + wait_s
        while True:
            left = [w["url"] for w in self.list() if w["url"] in gone and w["status"] != "draining"]
            if not left:
                return gone
            if time.monotonic() > deadline:
                raise RouterWorkersError(f"router {self.base} still routes to {', '.join(left)} "
                                         f"{wait_s:.0f} s after removing it")
            time.sleep(0.2)

    # -- waiting ---------------------------------------------------------------------------------

    def _wait_job(self, worker_id: str, what: str, wait_s: float) -> None:
        """Poll the background job of `worker_id` until it is no longer pending; raise if it failed."""
        deadline = time.monotonic() + wait_s
        while True:
            status, body = self._call("GET", self._item_path(worker_id))
            job = body.get("job_status") if isinstance(body, dict) else None
            if status == 200 and not job:
                return
            if job and str(job.get("status", "")).lower() == "failed":
                raise RouterWorkersError(f"router {self.base} could not {what}: {job.get('message') or job}")
            if status not in (200, 404):  # 404: the job may end before the worker is listed
                raise self._refused(what, status, body)
            if time.monotonic() > deadline:
                raise RouterWorkersError(f"router {self.base} did not {what} within {wait_s:.0f} s "
                                         f"(job: {job or body})")
            time.sleep(0.2)

    def _wait_listed(self, url: str, wait_s: float) -> dict:
        """The record of `url` once listed and not known unhealthy."""
        deadline = time.monotonic() + wait_s
        while True:
            worker = self.find(url)
            if worker is not None and worker["healthy"] is not False:
                return worker
            if time.monotonic() > deadline:
                state = "not listed" if worker is None else f"listed but unhealthy ({worker['status']})"
                raise RouterWorkersError(f"router {self.base}: worker {url} {state} {wait_s:.0f} s after adding it")
            time.sleep(0.2)
