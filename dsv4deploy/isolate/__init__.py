"""The decisive experiment: the same suite on the PD deployment and on one combined server.

`isolation_plan` derives, from the spec of the PD release that is serving, a combined server with
the same model, overrides, environment switches and CUDA-graph settings (on the prefill's GPUs
unless told otherwise) and plans it as a temporary release. `decide` turns the two sides' suite
results into a verdict: the bug lives in the PD transfer, in the path both share, nowhere, or the
experiment could not tell (and why).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from dsv4deploy.gates.runner import GATES
from dsv4deploy.isolate.compare import combine_suites, compare_soak
from dsv4deploy.isolate.needle_compare import compare_needle
from dsv4deploy.plan import gate_targets, host_layouts, make_plan
from dsv4deploy.sglang import flags
from dsv4deploy.spec import CombinedSpec, Deployment, Problem, SpecError, check_deployment

#: Suites a side can run: gates of a deploy that test behaviour (readiness is always run first).
SUITES = ("smoke", "needle", "soak", "parity")
#: The suite judged across the sides (dsv4deploy.isolate.parity_suite), not by each side's own gate status.
PARITY = "parity"
VERDICTS = ("pd_specific", "pd_amplified", "shared_path", "clean", "inconclusive")
#: Model-affecting settings a worker may set for itself; the combined server takes the prefill's.
_WORKER_MODEL_SETTINGS = ("index_topk", "model_overrides", "chat_template", "page_size", "kv_cache_dtype",
                          "context_length")
# extra_args that only mean something to a PD worker.
_PD_ONLY_FLAG = "--disaggregation-"
# The playbook variables that choose a field of the combined server.
_CHOICE_FIELDS = {"gpus": "dsv4_isolate_gpus", "port": "dsv4_isolate_port", "env": "dsv4_isolate_env"}


def parse_suite(text: str | Sequence[str]) -> list[str]:
    """`"smoke,needle"` -> `["smoke", "needle"]`; raises SpecError naming the field and the fix."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if str(n).strip()]
    available = [s for s in SUITES if s in GATES]
    unknown = [n for n in names if n not in available]
    if not names or unknown:
        got = f"unknown suite {', '.join(map(repr, unknown))}" if unknown else "no suite given"
        raise SpecError([Problem(field="suite", message=got,
                                 fix=f"use one or more of {', '.join(available)}, comma-separated "
                                     "(e.g. -e dsv4_isolate_suite=smoke,needle)")])
    return list(dict.fromkeys(names))


def combined_from_pd(pd: Deployment, *, gpus: Sequence[int] | None = None, port: int | None = None,
                     env: Mapping[str, str] | None = None) -> tuple[Deployment, list[str]]:
    """The combined deployment that reproduces `pd` on one server, and notes on what had to differ.

    Same model, model settings, server environment and CUDA-graph settings; the server sits on the
    first prefill's host and GPUs (or `gpus`), listens on the router's port when the router shares
    that host (clients keep their endpoint), else on the prefill's port. `env` adds or replaces
    environment switches on purpose; every such difference is noted. Raises SpecError.
    """
    if pd.topology != "pd" or not pd.prefill or not pd.decode:
        raise SpecError([Problem(field="topology", message=f"the serving release is '{pd.topology}', not PD",
                                 fix="deploy the PD release to examine first (playbooks/deploy.yml -e topology=pd)")])
    prefill, decode = pd.prefill[0], pd.decode[0]
    notes: list[str] = []
    if len(pd.prefill) > 1 or len(pd.decode) > 1:
        notes.append(f"{len(pd.prefill)} prefill and {len(pd.decode)} decode servers are replaced by one combined "
                     "server built from prefill[0] and decode[0]")
    # What each server really gets (server_env, then its own env, then the experiment's switches for its
    # role), compared key by key; server_env_extra (every server) carries over to the combined one as is.
    by_role = pd.server_env_extra_by_role
    seen_p = {**pd.server_env, **prefill.env, **by_role.get("prefill", {})}
    seen_d = {**pd.server_env, **decode.env, **by_role.get("decode", {})}
    merged_env = {**seen_p, **seen_d}
    for key in sorted(set(seen_p) | set(seen_d)):
        if seen_p.get(key) != seen_d.get(key):
            notes.append(f"env {key} differs: prefill {seen_p.get(key)!r}, decode {seen_d.get(key)!r}; the combined "
                         f"server uses {'decode' if key in seen_d else 'prefill'}'s")
    for key, value in (env or {}).items():
        was = merged_env.get(key)
        if was != str(value):
            notes.append(f"env {key} set on purpose for the combined server: {str(value)!r} (PD: {was!r})")
        merged_env[key] = str(value)
    # The combined server's own env: what server_env does not already give it.
    merged_env = {k: v for k, v in merged_env.items() if pd.server_env.get(k) != v}
    if prefill.cuda_graph != decode.cuda_graph:
        notes.append(f"CUDA graphs differ: prefill {prefill.cuda_graph.model_dump()}, decode "
                     f"{decode.cuda_graph.model_dump()}; the combined server uses decode's")
    extra = _combined_extra_args(prefill.extra_args, decode.extra_args, notes)
    chosen = list(gpus) if gpus else list(prefill.gpus)
    if gpus and list(gpus) != list(prefill.gpus):
        notes.append(f"GPUs {chosen} chosen for the combined server (the prefill has {list(prefill.gpus)})")
    router_here = pd.router is not None and pd.router.host == prefill.host
    chosen_port = port or (pd.router.port if router_here and pd.router else prefill.port)
    try:
        combined = CombinedSpec(
            host=prefill.host, gpus=chosen, tp_size=len(chosen), port=chosen_port,
            mem_fraction_static=prefill.mem_fraction_static, cuda_graph=decode.cuda_graph,
            env=merged_env, extra_args=extra,
            **{k: getattr(prefill, k) for k in _WORKER_MODEL_SETTINGS if getattr(prefill, k) is not None},
        )
    except ValidationError as exc:
        raise SpecError([Problem(field=_CHOICE_FIELDS.get(str(e["loc"][0]), f"combined.{e['loc'][0]}"),
                                 host=prefill.host, message=f"{e['msg']} (got {e.get('input')!r})",
                                 fix="give GPU indices, a port and environment names the host accepts")
                         for e in exc.errors()]) from None
    data = pd.model_dump(mode="json")
    for name, host in pd.hosts.items():  # not dumped (spec.json does not record it), yet still meant
        data["hosts"][name]["service_user_root_ok"] = host.service_user_root_ok
    data.update(topology="combined", combined=combined.model_dump(mode="json"))
    spec = Deployment.model_validate(data)
    problems = check_deployment(spec)
    if problems:
        choose = "(dsv4_isolate_gpus / dsv4_isolate_port choose the combined server's GPUs and port)"
        raise SpecError([p.model_copy(update={"fix": f"{p.fix} {choose}"}) for p in problems])
    return spec, notes


def _combined_extra_args(prefill: list[str], decode: list[str], notes: list[str]) -> list[str]:
    """The decode's extra_args (the same as the prefill's in a sane deployment) without PD-only flags."""
    if prefill != decode:
        notes.append(f"extra_args differ: prefill {prefill}, decode {decode}; the combined server uses decode's")
    out: list[str] = []
    skip_value = False
    for arg in decode:
        if skip_value:
            skip_value = False
            if not arg.startswith("--"):
                continue
        if arg.startswith(_PD_ONLY_FLAG):
            notes.append(f"extra arg {arg.split('=', 1)[0]} is PD-only and left out of the combined server")
            skip_value = "=" not in arg
            continue
        out.append(arg)
    return out


def isolation_plan(release_spec: str, play_hosts: list[str], *, release_id: str | None = None,
                   gpus: Sequence[int] | None = None, port: int | None = None, env: Mapping[str, str] | None = None,
                   root_ok: Sequence[str] = (), now: float | None = None) -> dict[str, Any]:
    """What the experiment needs, from the serving release's spec.json text (and its id).

    `root_ok` names the hosts whose inventory sets ``service_user_root_ok`` (spec.json does not record
    it, so the twin would otherwise refuse a root service user the serving release was allowed).
    `original`: its gate targets and each host's layout (GPUs, ports, install root); `combined`:
    the plan of the temporary combined release (as `make_plan` returns it); `settings`: what each
    side runs, side by side; `notes`: every way the combined server had to differ.
    """
    data = json.loads(release_spec)
    for name, host in (data["deployment"].get("hosts") or {}).items():
        if name in root_ok:
            host["service_user_root_ok"] = True
    pd = Deployment.model_validate(data["deployment"])
    spec, notes = combined_from_pd(pd, gpus=gpus, port=port, env=env)
    combined = make_plan(spec, play_hosts, now=now)
    original = {"release_id": release_id, **gate_targets(pd), "hosts": host_layouts(pd, play_hosts)}
    return {"original": original, "combined": combined, "settings": compare_settings(pd, spec), "notes": notes}


def compare_settings(pd: Deployment, combined: Deployment) -> list[dict[str, Any]]:
    """Rows `{setting, pd, combined, same}`: what the servers of each side are given.

    `same` compares each PD server's value with the combined server's; it is None for the layout
    rows (GPUs, memory fraction), which differ between topologies by design.
    """
    assert combined.combined is not None
    server = combined.combined
    workers = [("prefill", pd.prefill[0], pd), ("decode", pd.decode[0], pd)]

    def graphs(spec: Deployment, worker: Any, role: str) -> str:
        version = spec.host(worker.host).sglang_version
        args = flags.table(version).cuda_graph_args(role, worker.cuda_graph.enabled, worker.cuda_graph.max_bs)
        return " ".join(args) or "(defaults)"

    getters: list[tuple[str, Any, bool]] = [
        ("model", lambda s, w, r: f"{s.model.path} as {s.model.served_name}", True),
        ("json_model_override_args", lambda s, w, r: _json(s.model_override_args(w)), True),
        ("environment", lambda s, w, r: ", ".join(f"{k}={v}" for k, v in sorted({**s.server_env, **w.env}.items()))
         or "(none)", True),
        # The combined server's graphs follow decode's (max_bs is a decode batch size).
        ("CUDA graphs", lambda s, w, r: graphs(s, w, r), False),
        ("GPUs (tp)", lambda s, w, r: f"{w.gpus} ({w.tp_size})", None),
        ("mem_fraction_static", lambda s, w, r: repr(w.mem_fraction_static), None),
        ("sglang", lambda s, w, r: s.host(w.host).sglang_version, True),
    ]
    rows = []
    for setting, get, compare in getters:
        pd_values = {role: get(spec, w, role) for role, w, spec in workers}
        mine = get(combined, server, "combined")
        if compare is None:
            same = None
        elif compare:
            same = all(v == mine for v in pd_values.values())
        else:
            same = pd.decode[0].cuda_graph == server.cuda_graph and pd.prefill[0].cuda_graph == server.cuda_graph
        rows.append({"setting": setting, "pd": pd_values, "combined": mine, "same": same})
    return rows


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def side_summary(gates: Sequence[Mapping[str, Any]], suite: Sequence[str], error: str | None = None) -> dict[str, Any]:
    """One side of the experiment from its gate results: ready, suite ran, passed, recall curve."""
    by_name = {g["name"]: g for g in gates}
    readiness = by_name.get("readiness")
    ready = readiness is not None and readiness["status"] == "passed"
    results = [by_name[s] for s in suite if s in by_name]
    skipped = [g for g in results if g["status"] == "skipped"]
    if error is None and skipped:
        # A suite that did not run (e.g. soak_enabled false) cannot take part in the comparison.
        error = "; ".join(f"{g['name']} was skipped: {g['summary']}" for g in skipped)
    ran = ready and error is None and len(results) == len(suite)
    needle = by_name.get("needle")
    curve = list((needle or {}).get("evidence", {}).get("curve") or [])
    return {
        "ready": ready,
        "ran": ran,
        "passed": all(g["status"] == "passed" for g in results) if ran else None,
        "failed_suites": [g["name"] for g in results if g["status"] == "failed"],
        "error": error,
        "gates": list(gates),
        "recall_curve": curve,
        "recall_breaks_at": breaks_at(curve),
    }


def breaks_at(curve: Sequence[Mapping[str, Any]]) -> int | None:
    """The first context length (target tokens) at which not every cell recalled; None if none did."""
    for point in sorted(curve, key=lambda p: p["context_tokens"]):
        if point.get("fraction", 0) < 1:
            return int(point["context_tokens"])
    return None


def decide(pd: Mapping[str, Any], combined: Mapping[str, Any]) -> tuple[str, str]:
    """The verdict and one sentence saying why, from two `side_summary` results."""
    for name, side in (("PD", pd), ("combined", combined)):
        if not side["ran"]:
            why = side.get("error") or _first_failure(side) or "its suite did not run to the end"
            if not side["ready"] and not side.get("error"):
                why = f"it never became ready: {why}"
            return "inconclusive", f"the {name} side could not be tested: {why}"
    # Parity is judged by comparing the two sides' records (parity_suite.with_parity), never by each side's own
    # gate status: a side's parity gate fails when it could not measure (every prompt too long, an error), which
    # says nothing about where a bug is.
    ran = [name for name in SUITES if name != PARITY and name in _ran(pd) and name in _ran(combined)]
    if ran:
        judged = [_suite_verdict(name, pd, combined) for name in ran]
        # A suite that could not measure on a side leaves the whole experiment undecided: whatever the
        # other suites say could be the half that was measured.
        blind = [why for verdict, why, measured in judged if not measured]
        if blind:
            return "inconclusive", "; ".join(blind)
        return combine_suites([(verdict, why) for verdict, why, _ in judged])
    if PARITY in _ran(pd) and PARITY in _ran(combined):
        return "clean", "no suite but parity ran"
    return _flags_verdict(pd, combined)


def _ran(side: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {g["name"]: g for g in side["gates"] if g["name"] in SUITES}


def _suite_verdict(name: str, pd: Mapping[str, Any], combined: Mapping[str, Any]) -> tuple[str, str, bool]:
    """One suite's (verdict, why, measured): soak and needle by the procedures of dsv4deploy.isolate.compare
    and .needle_compare, smoke (one request, nothing to count) by its two results."""
    mine, theirs = _ran(pd)[name], _ran(combined)[name]
    for side, gate in (("PD", mine), ("combined", theirs)):
        if gate["status"] == "error" or (name in ("soak", "needle") and not gate.get("evidence")):
            return "inconclusive", f"{name}: the {side} side could not measure: {gate['summary']}", False
    if name == "soak":
        verdict, why, evidence = compare_soak(mine["evidence"], theirs["evidence"])
        return verdict, why, bool(evidence.get("pd_worse_p") is not None)
    if name == "needle":
        verdict, why, evidence = compare_needle(mine, theirs)
        return verdict, why, bool(evidence)
    one = {**pd, "failed_suites": [name] if mine["status"] == "failed" else [], "passed": mine["status"] == "passed"}
    other = {**combined, "failed_suites": [name] if theirs["status"] == "failed" else [],
             "passed": theirs["status"] == "passed"}
    return (*_flags_verdict(one, other), True)


def _flags_verdict(pd: Mapping[str, Any], combined: Mapping[str, Any]) -> tuple[str, str]:
    """The verdict from the two sides' pass/fail alone (smoke: one request, nothing to count)."""
    pd_failed, combined_failed = not pd["passed"], not combined["passed"]
    if pd_failed and combined_failed:
        return "shared_path", (f"fails in PD ({_failures(pd)}) and on the combined server ({_failures(combined)}): "
                               "the bug is in the code both share, not in the PD transfer")
    if pd_failed:
        return "pd_specific", (f"fails in PD ({_failures(pd)}) and passes on the combined server with the same "
                               "settings: the bug is in the PD path (KV transfer)")
    if combined_failed:
        return "inconclusive", (f"passes in PD and fails on the combined server ({_failures(combined)}): the "
                                "combined server differs in more than the PD path; look at its notes")
    return "clean", "passes in PD and on the combined server"


def _failures(side: Mapping[str, Any]) -> str:
    failed = [g for g in side["gates"] if g["name"] in side["failed_suites"]]
    return "; ".join(f"{g['name']}: {g['summary']}" for g in failed)


def _first_failure(side: Mapping[str, Any]) -> str | None:
    failed = next((g for g in side["gates"] if g["status"] == "failed"), None)
    return f"{failed['name']} failed: {failed['summary']}" if failed else None
