#!/usr/bin/python
"""Host preflight (GPUs present and not held by others, ports free or ours) and the GPU-release wait."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dsv4_host
short_description: Check a GPU host before a switchover, or wait until its GPUs are really released
description:
  - O(state=check) changes nothing. It fails, listing every problem, when a GPU of the new layout is
    missing, when a process that is not ours holds memory on one, or when a port is taken by a
    process that is not ours.
  - O(state=released) polls C(nvidia-smi) until every listed GPU uses less than O(threshold_mib), and
    fails at O(timeout_s) naming the GPU, its usage and the processes holding it.
options:
  gpu_query_command:
    type: list
    elements: str
    required: true
    description:
      - The C(nvidia-smi) command (argv) to query GPUs with; its query arguments are appended.
  state:
    type: str
    choices: [check, released]
    default: check
    description:
      - What to do.
  gpus:
    type: list
    elements: int
    default: []
    description:
      - GPU indices of the new layout.
  ports:
    type: list
    elements: int
    default: []
    description:
      - TCP ports the new services listen on.
  port_addresses:
    type: dict
    default: {}
    description:
      - The address the service of a port in O(ports) binds (port as a string -> address). A listener on
        another address, neither of them a wildcard, does not take that port (two nodes of a multi-node
        server on one machine, each on its own address). A port not named here counts as bound to every
        address.
  our_pids:
    type: list
    elements: int
    default: []
    description:
      - PIDs of our services and their children; what they hold does not count against a GPU or port.
  services:
    type: dict
    default: {}
    description:
      - "O(state=check): find our services and their pids on the host in the same module run, as
        M(dsv4.deploy.dsv4_service_state_info) does (C(manager), C(install_root), C(supervisor_bin_dir),
        C(unit_dir)); their pids count as ours beside O(our_pids), and RV(services) and RV(pids) return what
        was found. {} finds nothing."
  key_on_command_line:
    type: bool
    default: false
    description:
      - "O(state=check): the API key is on our services' command lines (the spec sets C(api_key)): warn, and
        return RV(proc_hidepid) false, when the host's C(/proc) is mounted without C(hidepid), so every
        local user can read it from C(/proc/PID/cmdline)."
  access:
    type: dict
    default: {}
    description:
      - "O(state=check): first, before anything else, check the service user and every path its services
        need as M(dsv4.deploy.dsv4_access) does (C(host), C(user), C(create_user), C(needs)), in the same module
        run; a problem fails the call as that module fails, and nothing is written. {} checks nothing."
  parsers:
    type: list
    elements: dict
    default: []
    description:
      - "O(state=check): next, still before the lock, parse each rendered command line (C(service), C(kind):
        server, sglang-router or smg, C(python), C(argv), C(env), C(expected_version), C(table_version)) with
        the host's own parser, loaded by that Python as the service user (O(access)'s C(user)): one child
        process per Python, a few seconds each (sglang's parser imports torch). An unknown, abbreviated or
        deprecated flag, or an sglang other than C(expected_version), fails the call naming host, service,
        flag and fix. A server line with C(resolve) is then resolved as sglang resolves it at start-up
        (C(prepare_server_args), and C(resolve_once) where the release has it: the post-init checks and the
        model's hooks with the model folder's config.json, the GPU as nvidia-smi reports it), with its
        C(resolve_env) (SGLANG_* switches, CUDA_VISIBLE_DEVICES), offline, without loading weights; a refusal
        fails the call quoting sglang's message. Without a parser on the host, dsv4deploy's flag tables are the
        rule: a C(table_version) other than C(expected_version) then fails. [] checks nothing."
  lock:
    type: dict
    default: {}
    description:
      - "O(state=check): then take the deploy lock as M(dsv4.deploy.dsv4_lock) does (C(path), C(owner), C(run_id),
        C(phase), C(target), C(stale_after_s), C(takeover_from); the action of the same name adds the
        controller's identity and takes over a dead run's lock, naming it), before the GPUs and ports are
        checked, in the same module run. A live holder fails the call naming it (RV(holder)). In check mode it
        says it would take the lock (RV(would)) and writes nothing. {} takes no lock."
  threshold_mib:
    type: int
    default: 1024
    description:
      - A GPU using less than this many MiB counts as free.
  timeout_s:
    type: float
    default: 120
    description:
      - Deadline for O(state=released).
  poll_s:
    type: float
    default: 0.25
    description:
      - Poll interval for O(state=released).
extends_documentation_fragment:
  - dsv4.deploy.dsv4deploy.read_only
attributes:
  action:
    support: full
    description: The action of the same name adds the controller's identity to O(lock) and takes over a dead
      run's lock, as M(dsv4.deploy.dsv4_lock)'s does.
  check_mode:
    support: full
    description: Both states only read (O(lock) writes nothing in check mode); O(state=released) waits in check
      mode too.
  platform:
    support: full
    platforms: posix
    description: A Linux host with C(nvidia-smi) (or the command given in O(gpu_query_command)).
author: dsv4deploy maintainers (@dsv4deploy)
"""

EXAMPLES = r"""
- name: GPUs 0-7 present and not held by others, ports free or ours
  dsv4.deploy.dsv4_host:
    gpu_query_command: [nvidia-smi]
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    ports: [30000, 30001, 30002]
    our_pids: "{{ status.pids }}"

- name: Wait until the stopped servers' GPU memory is released
  dsv4.deploy.dsv4_host:
    gpu_query_command: [nvidia-smi]
    state: released
    gpus: [0, 1, 2, 3]
    timeout_s: 300
"""

RETURN = r"""
gpus:
  description: GPU index to its C(uuid), C(used) and C(total) memory in MiB, as seen by the check.
  returned: state=check
  type: dict
services:
  description: Each of our services and its status (C(running), C(serving) - running or, under supervisord,
    STARTING within its startsecs -, C(active), C(pid)), as
    M(dsv4.deploy.dsv4_service_state_info) returns it.
  returned: state=check with O(services)
  type: dict
pids:
  description: Every pid of ours found (the services, their children, our supervisord).
  returned: state=check with O(services)
  type: list
  elements: int
problems:
  description: One line per problem found (the access check's, or the GPUs' and ports').
  returned: state=check
  type: list
  elements: str
parser_seconds:
  description: With O(parsers), the seconds the host's own parsers took.
  returned: state=check with O(parsers)
  type: float
parser_notes:
  description: "With O(parsers), the command lines no parser on the host could check or resolve (the tables were
    the rule), each saying why (e.g. C(not resolved: no sglang on the host))."
  returned: state=check with O(parsers)
  type: list
  elements: str
resolved:
  description: "With O(parsers), per server service, the settings sglang's own start-up resolution gave its line
    (C(mem_fraction_static), C(max_running_requests), C(chunked_prefill_size), C(kv_cache_dtype), C(page_size),
    C(attention_backend), ...), with the host's GPU as sglang sees it. The KV pool's token count is not among them
    (sglang sizes it after loading the weights)."
  returned: state=check with O(parsers)
  type: dict
create_user:
  description: With O(access), true when the service user is missing, may be created and nothing else is wrong.
  returned: state=check with O(access)
  type: bool
holder:
  description: With O(lock), the lock's record - this run's once taken, or that of the run holding it.
  returned: state=check with O(lock), except in check mode
  type: dict
previous:
  description: With O(lock), the record of the dead run whose lock was taken over (null when none).
  returned: state=check with O(lock), except in check mode
  type: dict
would:
  description: In check mode, with O(lock), that the lock would be taken.
  returned: check mode, state=check with O(lock)
  type: list
  elements: str
kept_warm:
  description: With O(services), whether a blue_green run left a record of a previous release kept warm
    (C(install_root/blue_green.json)), which the next run settles first.
  returned: state=check with O(services)
  type: bool
roll_record:
  description: With O(services), whether a roll that died left its record (C(install_root/rolling.json)),
    which the next run repairs first.
  returned: state=check with O(services)
  type: bool
proc_hidepid:
  description: With O(key_on_command_line), whether the host's C(/proc) hides other users' processes
    (C(hidepid)); false comes with a warning that local users can read the API key.
  returned: state=check with O(key_on_command_line)
  type: bool
seconds:
  description: How long the GPUs took to be released.
  returned: state=released
  type: float
"""


import ipaddress
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dsv4.deploy.plugins.module_utils import gpus, host_parser
from ansible_collections.dsv4.deploy.plugins.module_utils import lock as deploy_lock
from ansible_collections.dsv4.deploy.plugins.module_utils.access import failure_message
from ansible_collections.dsv4.deploy.plugins.module_utils.access import problems as access_problems
from ansible_collections.dsv4.deploy.plugins.module_utils.layout import (
    KEEP_RECORD,
    ROLL_RECORD,
    release_services,
    root_problem,
)
from ansible_collections.dsv4.deploy.plugins.module_utils.managers import open_manager
from ansible_collections.dsv4.deploy.plugins.module_utils.ours import report
from ansible_collections.dsv4.deploy.plugins.module_utils.proc_mount import exposure_warning
from ansible_collections.dsv4.deploy.plugins.module_utils.service import ServiceError


def gpu_snapshot(module: AnsibleModule, cmd: list[str]) -> tuple[dict[int, dict], list[dict]]:
    """The GPU table (index -> {uuid, used, total} in MiB) and the processes holding GPU memory ({pid, used,
    gpu_uuid (may be empty)}), queried at once; fails the module when the query command is missing."""
    try:
        return gpus.table_and_apps(cmd)
    except gpus.GpuError as exc:
        module.fail_json(msg=str(exc))
    return {}, []


def _address(hex_addr: str) -> str:
    """A /proc/net/tcp{,6} local address (host byte order, 32-bit words) as text."""
    raw = bytes.fromhex(hex_addr)
    return str(ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))))


def listeners() -> dict[int, list[tuple[int, str]]]:
    """port -> (PID, local address) of each listener on it (TCP, IPv4 and IPv6), from /proc."""
    inode_port: dict[str, tuple[int, str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="utf-8") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A":  # LISTEN
                addr, port = cols[1].rsplit(":", 1)
                inode_port[cols[9]] = (int(port, 16), _address(addr))
    owners: dict[int, list[tuple[int, str]]] = {}
    seen: set[str] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found = inode_port.get(target[8:-1])
                if found is not None:
                    owners.setdefault(found[0], []).append((int(pid), found[1]))
                    seen.add(target[8:-1])
    for inode, (port, addr) in inode_port.items():
        if inode not in seen:  # a listener whose process we cannot see
            owners.setdefault(port, []).append((0, addr))
    return owners


def clashes(bound: str | None, other: str) -> bool:
    """Whether a listener on `other` keeps a service from binding the same port on `bound` (None: every
    address). Two different addresses, neither a wildcard, do not clash."""
    if bound is None:
        return True
    mine, theirs = (_plain(ipaddress.ip_address(a)) for a in (bound, other))
    return mine.is_unspecified or theirs.is_unspecified or mine == theirs


def _plain(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    # An IPv4-mapped IPv6 listener (::ffff:127.0.0.1) holds the IPv4 address itself.
    return getattr(addr, "ipv4_mapped", None) or addr


def _port_problems(ports: list[int], bound: dict[str, str], ours: set[int]) -> list[str]:
    """Ports of the new layout a process that is not ours listens on (where its service would bind)."""
    problems = []
    owners = listeners()
    for port in ports:
        taken = [pid for pid, addr in owners.get(port, []) if clashes(bound.get(str(port)), addr)]
        foreign = [pid for pid in taken if pid not in ours]
        if foreign:
            who = ", ".join(f"{pid} ({gpus.proc_name(pid)})" for pid in foreign if pid) or "a process we cannot see"
            problems.append(f"port {port} is taken by {who}: stop it or change the port in the spec")
    return problems


def _gpu_problems(module: AnsibleModule, ours: set[int]) -> list[str]:
    """GPUs of the new layout that are missing or held by a process that is not ours."""
    p = module.params
    problems = []
    table, apps = gpu_snapshot(module, p["gpu_query_command"])
    if not table:
        module.fail_json(msg=f"no GPU answered '{' '.join(p['gpu_query_command'])} --query-gpu'; "
                             "check the NVIDIA driver (nvidia-smi) on this host")
    missing = [g for g in p["gpus"] if g not in table]
    if missing:
        problems.append(f"GPUs {missing} are not present (the host shows {sorted(table)}): fix the GPU lists "
                        "in the spec or the host's driver")
    uuid_index = {v["uuid"]: k for k, v in table.items() if v["uuid"]}
    for app in apps:
        if app["pid"] in ours:
            continue
        index = uuid_index.get(app["gpu_uuid"])
        if index is None or index in p["gpus"]:
            where = f"GPU {index}" if index is not None else "a GPU"
            problems.append(f"process {app['pid']} ({gpus.proc_name(app['pid'])}) is not ours and holds "
                            f"{app['used']} MiB on {where}: stop it or choose other GPUs")
    return problems


def _our_services(module: AnsibleModule) -> dict:
    """O(services): our services' status and pids under the install root ({} when not asked)."""
    where = module.params["services"]
    if not where:
        return {}
    root = where.get("install_root") or ""
    if root_problem(root):
        module.fail_json(msg=f"services: {root_problem(root)}")
    if where.get("manager") not in ("systemd", "supervisor"):
        module.fail_json(msg=f"services: manager must be systemd or supervisor (got {where.get('manager')!r})")
    mgr = open_manager(where["manager"], root, where.get("supervisor_bin_dir"),
                       where.get("unit_dir") or "/etc/systemd/system")
    try:
        found = report(mgr, release_services(root))
    except ServiceError as exc:
        module.fail_json(msg=str(exc))
    return {"services": found["services"], "pids": found["pids"],
            "kept_warm": os.path.exists(os.path.join(root, KEEP_RECORD)),
            "roll_record": os.path.exists(os.path.join(root, ROLL_RECORD))}


def _access(module: AnsibleModule) -> dict:
    """O(access): the service user and the paths its services need ({} when not asked); fails on a problem."""
    want = module.params["access"]
    if not want:
        return {}
    found = access_problems(str(want.get("host") or ""), str(want.get("user") or ""),
                            bool(want.get("create_user")), list(want.get("needs") or []))
    if found["problems"]:
        module.fail_json(msg=failure_message(found["problems"]), changed=False, **found)
    return {"create_user": found["create_user"]}


def _parsers(module: AnsibleModule) -> dict:
    """O(parsers): every command line through the host's own parsers ({} when not asked); fails on a problem."""
    checks = module.params["parsers"]
    if not checks:
        return {}
    user = str((module.params["access"] or {}).get("user") or "")
    found = host_parser.check_lines(str((module.params["access"] or {}).get("host") or ""), user, list(checks))
    result = {"parser_seconds": found["parser_seconds"], "parser_notes": found["notes"], "resolved": found["resolved"]}
    if found["problems"]:
        module.fail_json(msg="the host's own parsers refuse the rendered command lines:\n- "
                             + "\n- ".join(found["problems"]), changed=False, problems=found["problems"], **result)
    return result


def _lock(module: AnsibleModule) -> dict:
    """O(lock): take the deploy lock ({} when not asked); fails naming the holder when another run has it."""
    want = module.params["lock"]
    if not want:
        return {}
    for key in ("path", "run_id"):
        if not want.get(key):
            module.fail_json(msg=f"lock.{key} is required (the deploy lock's path and this run's id)")
    record = {"owner": str(want.get("owner") or ""), "run_id": str(want["run_id"]),
              "controller": str(want.get("controller") or ""), "controller_pid": int(want.get("controller_pid") or 0),
              "controller_start": str(want.get("controller_start") or ""),
              "controller_boot": str(want.get("controller_boot") or ""),
              "phase": str(want.get("phase") or "locked"), "target": str(want.get("target") or "")}
    takeover = want.get("takeover_from")
    try:
        taken = deploy_lock.take(str(want["path"]), record, None if takeover is None else str(takeover),
                                 int(want.get("stale_after_s") or 7200), module.check_mode)
    except deploy_lock.Refused as exc:
        module.fail_json(msg=str(exc), changed=False, **exc.extra)
    taken.pop("changed", None)  # the lock lives only for the run: not a change to the host
    return taken


def check(module: AnsibleModule) -> None:
    p = module.params
    # In this order: the access check changes nothing, so a problem there leaves even the lock untaken.
    before = _access(module)
    before.update(_parsers(module))
    before.update(_lock(module))
    found = _our_services(module)
    ours = set(p["our_pids"]) | set(found.get("pids", []))
    problems = []
    if p["gpus"]:
        problems += _gpu_problems(module, ours)
    problems += _port_problems(p["ports"], {str(k): str(v) for k, v in p["port_addresses"].items()}, ours)
    # A router-only host has no GPUs to check (and may have no nvidia-smi at all).
    result = {"changed": False, "problems": problems, **before, **found}
    if p["key_on_command_line"]:
        exposed = exposure_warning()
        result["proc_hidepid"] = exposed is None
        if exposed:
            module.warn(exposed)
    if problems:
        # Without this run's own lock record: a failure with a holder means a lock held by another run.
        result.pop("holder", None)
        module.fail_json(msg="preflight failed:\n- " + "\n- ".join(problems), **result)
    module.exit_json(**result)


def released(module: AnsibleModule) -> None:
    p = module.params
    try:
        done = gpus.wait_released(p["gpu_query_command"], p["gpus"], p["our_pids"], p["threshold_mib"],
                                  p["timeout_s"], p["poll_s"])
    except gpus.GpuError as exc:
        module.fail_json(msg=str(exc), **({"gpus": exc.table} if exc.table is not None else {}))
    module.exit_json(changed=False, **done)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpu_query_command": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "choices": ["check", "released"], "default": "check"},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "ports": {"type": "list", "elements": "int", "default": []},
            "port_addresses": {"type": "dict", "default": {}},
            "our_pids": {"type": "list", "elements": "int", "default": []},
            "services": {"type": "dict", "default": {}},
            "access": {"type": "dict", "default": {}},
            "parsers": {"type": "list", "elements": "dict", "default": []},
            "key_on_command_line": {"type": "bool", "default": False},
            "lock": {"type": "dict", "default": {}},
            "threshold_mib": {"type": "int", "default": 1024},
            "timeout_s": {"type": "float", "default": 120},
            "poll_s": {"type": "float", "default": 0.25},
        },
        supports_check_mode=True,
    )
    if module.params["state"] == "check":
        check(module)
    released(module)


if __name__ == "__main__":
    main()
