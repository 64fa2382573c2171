"""The accuracy and parity gates run from a rollout plan and the gate settings (the runner's hook).

Kept apart from :mod:`dsv4deploy.gates.runner` so that the two gates' plumbing (which reference score
applies, which settings decide whether two releases' parity records can be compared) reads in one place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dsv4deploy.gates.accuracy import STATUS as OUTCOME_STATUS
from dsv4deploy.gates.accuracy import AccuracyPlan, reference_score, run_accuracy
from dsv4deploy.gates.canary import PARITY, CanaryPlan
from dsv4deploy.gates.override_proof import judge
from dsv4deploy.gates.parity import TOLERANCE, collect, compare, left_out, markdown_table
from dsv4deploy.gates.questions import BUILTIN
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, make_result


def accuracy_reference(plan: Mapping[str, Any], settings: Any) -> tuple[str, float, str]:
    """The task, the expected score and where it comes from: ``accuracy_expected``, else the model profile's
    reference score for the task (0.0 and '' when there is neither)."""
    task = settings.accuracy_task or ("builtin" if settings.accuracy_questions == BUILTIN else "gsm8k")
    reference = reference_score(plan.get("reference_scores"), task)
    if settings.accuracy_expected is not None:
        return task, settings.accuracy_expected, "accuracy_expected"
    if reference is not None:
        return task, reference[0], f"model profile, task {task}: {reference[1]}"
    return task, 0.0, ""


def accuracy_sampling(settings: Any) -> dict[str, Any]:
    """The recipe's sampling settings the questions are asked with."""
    sampling: dict[str, Any] = {"temperature": settings.accuracy_temperature}
    if settings.accuracy_top_p is not None:
        sampling["top_p"] = settings.accuracy_top_p
    return sampling


def accuracy_gate(plan: Mapping[str, Any], settings: Any, *, api_key: str | None = None,
                  progress: Progress | None = None) -> GateResult:
    """The accuracy gate: the question set, judged against the profile's score for its task (or
    ``accuracy_expected``); without either the score is recorded and not judged."""
    task, expected, source = accuracy_reference(plan, settings)
    sampling = accuracy_sampling(settings)
    judged = expected > settings.accuracy_margin
    acc = AccuracyPlan(questions=settings.accuracy_questions, count=settings.accuracy_count,
                       concurrency=settings.accuracy_concurrency, expected=expected if judged else 0.99,
                       expected_source=source, margin=settings.accuracy_margin, alpha=settings.accuracy_alpha,
                       beta=settings.accuracy_beta, seed=settings.accuracy_seed, sampling=sampling,
                       max_tokens=settings.accuracy_max_tokens, stop_when_decided=judged)
    result = run_accuracy(plan["endpoint"], plan["served_model_name"], acc, deadline_s=settings.accuracy_deadline_s,
                          api_key=api_key, progress=progress)
    if judged or (result.status is GateStatus.FAILED and "cannot be read" in result.summary):
        return result
    note = (f"recorded, not judged: the model profile has no reference score for task {task!r}; set "
            "accuracy_expected (a fraction) or the profile's reference_scores")
    evidence = {**result.evidence, "expected": None, "floor": None, "decision": None, "note": note}
    score = result.evidence.get("score")
    line = f"score {score:.1%} (n={result.evidence.get('n')}); {note}" if score is not None else note
    return result.model_copy(update={"status": GateStatus.PASSED, "summary": line, "evidence": evidence})


def model_settings(plan: Mapping[str, Any]) -> dict[str, Any]:
    """What decides a release's outputs, per role: model, overrides (index_topk among them), KV dtype,
    page size, context length, chat template. The sglang version and environment switches are not here:
    changing only them is what the parity gate checks."""
    out: dict[str, Any] = {"served_model_name": plan.get("served_model_name"), "topology": plan.get("topology")}
    overrides = plan.get("expected_overrides") or {}
    expected = plan.get("expected_settings") or {}
    for worker in plan.get("workers") or []:
        role = worker["role"]
        out[f"{role}.overrides"] = json.dumps(overrides.get(worker["name"]) or {}, sort_keys=True)
        for key, value in sorted((expected.get(worker["name"]) or {}).items()):
            out[f"{role}.{key}"] = value
    return out


def parity_topology(plan: Mapping[str, Any]) -> str:
    """Where the record was taken: topology and each worker's role, host and URL (records of other
    layouts are not compared)."""
    workers = ",".join(sorted(f"{w['role']}@{w['host']}={w['url']}" for w in plan.get("workers") or []))
    return f"{plan.get('topology')}|{plan.get('endpoint')}|{workers}"


def record_differs(record: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """What makes two parity records not comparable: the model-affecting settings that differ, the topology
    first ([] when they can be compared)."""
    ours, theirs = record.get("settings") or {}, baseline.get("settings") or {}
    differ = [k for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
    if baseline.get("topology") != record.get("topology"):
        differ.insert(0, "topology (hosts, ports or roles)")
    return differ


def parity_tolerance(settings: Any) -> float:
    """``parity_tolerance``, else the tolerance of ``parity_hardware``."""
    return settings.parity_tolerance if settings.parity_tolerance is not None else TOLERANCE[settings.parity_hardware]


def bake_canary(plan: Mapping[str, Any], settings: Any, bake: Any,
                parity_baseline: Mapping[str, Any] | None) -> CanaryPlan:
    """The bake's quality canaries (``bake.canary_questions``, ``bake.canary_prompts``): the accuracy gate's
    question set, reference and sampling; the parity record given (this deploy's own, else the last good
    release's) when it was taken with the same model-affecting settings and topology."""
    _, expected, _ = accuracy_reference(plan, settings)
    skipped = []
    record = dict(parity_baseline or {})
    if bake.canary_prompts and record:
        here = {"settings": model_settings(plan), "topology": parity_topology(plan)}
        differ = record_differs(here, record)
        if differ:
            whose = f"release {record['release']}'s" if record.get("release") else "this deploy's"
            skipped.append(f"{PARITY} not run: {whose} parity record was taken with other settings "
                           f"({', '.join(differ[:3])})")
            record = {}
    return CanaryPlan(questions=bake.canary_questions, prompts=bake.canary_prompts,
                      question_source=settings.accuracy_questions,
                      expected=expected if expected > settings.accuracy_margin else None,
                      margin=settings.accuracy_margin, sampling=accuracy_sampling(settings),
                      max_tokens=settings.accuracy_max_tokens, parity_record=record or None,
                      tolerance=parity_tolerance(settings), deadline_s=bake.probe_deadline_s, skipped=tuple(skipped))


def parity_gate(plan: Mapping[str, Any], settings: Any, *, baseline: Mapping[str, Any] | None = None,
                api_key: str | None = None) -> GateResult:
    """Record the fixed set's greedy outputs and logprobs; compare them with the last good release's record
    (``baseline``: what this gate's ``evidence.record`` was then) when every model-affecting setting and
    the topology are equal, else say which differs (skipped)."""
    watch = Stopwatch(settings.parity_deadline_s)
    tolerance = parity_tolerance(settings)
    record = {"outputs": collect(plan["endpoint"], api_key=api_key), "settings": model_settings(plan),
              "topology": parity_topology(plan), "tolerance": tolerance}
    errors = [f"{pid}: {o['error']}" for pid, o in record["outputs"].items() if "error" in o]
    evidence: dict[str, Any] = {"record": record, "requests": len(record["outputs"]), "tolerance": tolerance,
                                "hardware": settings.parity_hardware}
    if errors:
        return make_result("parity", GateStatus.FAILED, watch,
                           f"parity could not be measured: {'; '.join(errors[:3])}",
                           {**evidence, "failures": [{"what": e, "status": None, "body": ""} for e in errors]})
    skipped = left_out(record["outputs"])
    if len(skipped) == len(record["outputs"]):
        return make_result("parity", GateStatus.FAILED, watch,
                           f"parity could not be measured: every prompt is longer than the served context "
                           f"({record['outputs'][skipped[0]]['skipped']})", evidence)
    if not baseline:
        shorter = (f" ({len(skipped)} longer than the served context left out: {', '.join(skipped)})"
                   if skipped else "")
        return make_result("parity", GateStatus.PASSED, watch,
                           f"recorded {len(record['outputs']) - len(skipped)} prompts' greedy outputs and top-5 "
                           f"logprobs{shorter}; no last good release's record on these hosts to compare with",
                           evidence)
    differ = record_differs(record, baseline)
    if differ:
        theirs = baseline.get("settings") or {}
        shown = "; ".join(f"{k}: {theirs.get(k)!r} -> {record['settings'].get(k)!r}" for k in differ[:3])
        return make_result("parity", GateStatus.SKIPPED, watch,
                           f"not compared with the last good release: a model-affecting setting differs ({shown})",
                           {**evidence, "differs": differ})
    decision, rows, per_length = compare(record["outputs"], baseline.get("outputs") or {}, tolerance,
                                         names=("this release", "the last good release"))
    evidence.update(decision=decision.evidence(), prompts=rows, by_length=per_length,
                    table=markdown_table(per_length))
    return make_result("parity", OUTCOME_STATUS[decision.outcome], watch, decision.reason, evidence)


def override_behaviour(plan: Mapping[str, Any], settings: Any, baseline: Mapping[str, Any] | None,
                       api_key: str | None = None) -> dict[str, dict[str, Any]] | None:
    """What the answers show of each override (dsv4deploy.gates.override_proof) against the last good release's
    parity record; None without one."""
    if not baseline:
        return None
    return judge(model_settings(plan), parity_topology(plan), baseline, parity_tolerance(settings),
                 lambda prompts: collect(plan["endpoint"], api_key=api_key, prompts=prompts))
