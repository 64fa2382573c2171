#!/usr/bin/python
"""Register workers with a running router, or take them out, through the router's own worker API."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_router_workers
short_description: Add workers to a running sglang-router or smg, or remove them, without restarting it
description:
  - Runs on the router's host and talks to the router's worker API at O(router_url) (a loopback URL is
    asked as given). Which routes it uses follows O(router) and O(router_version) - sglang-router 0.3 and
    later and smg C(POST /workers) with a background job polled at C(GET /workers/{id}), 0.2.2 to 0.2.x
    the url-encoded URL as id, 0.2.1 and older C(/add_worker?url=) and C(/remove_worker?url=) (regular
    workers only).
  - O(state=present) registers each worker of O(workers) the router does not have yet and waits until the
    router routes to it (its background job done, the worker listed and not unhealthy); with O(exclusive)
    it then removes every other worker, so the router serves exactly O(workers).
  - O(state=absent) removes each worker of O(workers) the router has and waits until the router no longer
    sends it new requests. This does not drain the worker - its running requests go on; stopping the
    server (its own SIGTERM waits for them) is the drain.
  - O(state=query) only lists the router's workers.
  - Workers are matched by URL (no trailing slash). A worker already registered is left alone
    (idempotent); one the router is still removing (smg keeps it C(draining) for a fixed settle delay, about 5 s)
    counts as gone, and adding it back waits until the router has forgotten it.
options:
  router_url:
    type: str
    required: true
    description:
      - The router's base URL, C(http://HOST:PORT).
  router:
    type: str
    choices: [sglang-router, smg]
    default: sglang-router
    description:
      - Which router runs there.
  router_version:
    type: str
    default: 0.3.2
    description:
      - Its version (chooses the worker API for sglang-router).
  api_key:
    type: str
    description:
      - The router's C(--api-key), sent as a Bearer token.
  workers:
    type: list
    elements: dict
    default: []
    description:
      - Workers, each C(url), C(worker_type) (C(regular), C(prefill) or C(decode); default C(regular)),
        for a prefill C(bootstrap_port), and optionally C(model_id), the model name the router lists and
        routes by (sglang-router 0.3.2 lists a PD worker added without it as C(unknown) in C(/v1/models)).
  state:
    type: str
    choices: [present, absent, query]
    default: present
    description:
      - What to do with O(workers).
  exclusive:
    type: bool
    default: false
    description:
      - With O(state=present), also remove every registered worker not in O(workers).
  timeout_s:
    type: float
    default: 60
    description:
      - How long to wait for each change to take effect.
  drain_s:
    type: float
    default: 0
    description:
      - When above 0, after removing workers wait up to this many seconds until each removed worker has
        nothing in flight, judged from its own C(/metrics) (C(sglang:num_running_reqs) plus
        C(sglang:num_queue_reqs)); RV(drained) says per worker. A worker still busy at the deadline, or one
        whose state cannot be read, is reported, not failed - its own SIGTERM still waits for its requests.
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.posix
attributes:
  check_mode:
    support: full
    description: Lists the router's workers and returns in RV(would) the changes a real run makes; changes nothing.
  diff_mode:
    support: none
    description: The result lists the workers before and after (RV(before), RV(workers)).
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: Put the new release's workers behind the production router, and only them
  dsv4.deploy.dsv4_router_workers:
    router_url: http://127.0.0.1:30000
    router: smg
    router_version: 1.13.0
    workers:
      - {url: "http://127.0.0.1:30100", worker_type: prefill, bootstrap_port: 8998}
      - {url: "http://127.0.0.1:30101", worker_type: decode}
    exclusive: true
"""

RETURN = r"""
before:
  description: The router's workers before (each C(url), C(id), C(worker_type), C(healthy), C(status),
    C(bootstrap_port)).
  returned: always
  type: list
  elements: dict
workers:
  description: The router's workers after the change (in check mode, as before).
  returned: always
  type: list
  elements: dict
added:
  description: URLs registered.
  returned: always
  type: list
  elements: str
removed:
  description: URLs taken out.
  returned: always
  type: list
  elements: str
drained:
  description: Per removed worker with O(drain_s) - C(url), C(idle) (true, false when still busy at the
    deadline, null when its state could not be read), C(in_flight), C(seconds), C(why).
  returned: when workers were removed with O(drain_s)
  type: list
  elements: dict
would:
  description: In check mode, the changes a real run makes.
  returned: check mode
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils.drain import wait_idle
from ansible_collections.dsv4.deploy.plugins.module_utils.router_workers import (
    WORKER_TYPES,
    RouterWorkers,
    RouterWorkersError,
    api_for,
    normal_url,
)


def _wanted(module: AnsibleModule) -> list[dict]:
    """The O(workers) entries, checked: each names its field and the fix when wrong."""
    wanted = []
    for i, raw in enumerate(module.params["workers"]):
        url = str(raw.get("url") or "")
        kind = str(raw.get("worker_type") or "regular")
        if not url.startswith(("http://", "https://")):
            module.fail_json(msg=f"workers[{i}].url is {url!r}: give the worker's http://HOST:PORT")
        if kind not in WORKER_TYPES:
            module.fail_json(msg=f"workers[{i}].worker_type is {kind!r}: one of {', '.join(WORKER_TYPES)}")
        port = raw.get("bootstrap_port")
        wanted.append({"url": normal_url(url), "worker_type": kind,
                       "bootstrap_port": int(port) if port not in (None, "") else None,
                       "model_id": str(raw["model_id"]) if raw.get("model_id") else None})
    return wanted


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "required": True},
            "router": {"type": "str", "choices": ["sglang-router", "smg"], "default": "sglang-router"},
            "router_version": {"type": "str", "default": "0.3.2"},
            "api_key": {"type": "str", "no_log": True},
            "workers": {"type": "list", "elements": "dict", "default": []},
            "state": {"type": "str", "choices": ["present", "absent", "query"], "default": "present"},
            "exclusive": {"type": "bool", "default": False},
            "timeout_s": {"type": "float", "default": 60},
            "drain_s": {"type": "float", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        client = RouterWorkers(p["router_url"], api_for(p["router"], p["router_version"]), p["api_key"])
    except ValueError as exc:
        module.fail_json(msg=f"router_version: {exc}")
    wanted = _wanted(module)
    try:
        before = client.list()
        known = {w["url"] for w in before if w["status"] != "draining"}
        want_urls = {w["url"] for w in wanted}
        if p["state"] == "query":
            module.exit_json(changed=False, before=before, workers=before, added=[], removed=[])
        if p["state"] == "present":
            to_add = [w for w in wanted if w["url"] not in known]
            to_remove = sorted(known - want_urls) if p["exclusive"] else []
        else:
            to_add, to_remove = [], sorted(known & want_urls)
        added = [w["url"] for w in to_add]
        if module.check_mode:
            would = [f"add the {w['worker_type']} {w['url']}" for w in to_add] + [f"remove {u}" for u in to_remove]
            module.exit_json(changed=bool(would), before=before, workers=before, added=added,
                             removed=to_remove, would=would)
        # Add before removing: the router is never left without a worker of a kind it had.
        for w in to_add:
            client.add(w["url"], w["worker_type"], w["bootstrap_port"], p["timeout_s"], model_id=w["model_id"])
        removed = client.remove_many(to_remove, p["timeout_s"]) if to_remove else []
        after = client.list() if (added or removed) else before
    except RouterWorkersError as exc:
        module.fail_json(msg=str(exc))
    extra = {}
    if removed and p["drain_s"] > 0:
        extra["drained"] = [wait_idle(url, p["api_key"], p["drain_s"]) for url in removed]
    module.exit_json(changed=bool(added or removed), before=before, workers=after, added=added, removed=removed,
                     **extra)


if __name__ == "__main__":
    main()
