"""PD parity: greedy tokens and top-5 logprobs of a fixed prompt set, compared between two servings.

The fixed set (:func:`fixed_prompts`) runs from a few dozen words to past what the sparse top-k covers
(``index_topk`` 512 with c4 compression reaches about 2K tokens before the indexer has to choose), plus
multi-turn tool-call conversations. Each prompt is completed greedily through sglang's ``/generate`` with
``return_logprob`` and ``top_logprobs_num`` 5 (``meta_info.output_token_logprobs``: ``[logprob, id, text]``
per output token; ``output_top_logprobs``: the five best per token). Two such records (PD against
combined in the isolation playbook, a release against the last good one in the deploy gate) are compared
per prompt: the first divergent token, and the largest logprob difference over the shared prefix (the
chosen tokens' and every top-5 token both sides list).

Tolerance is per hardware (:data:`TOLERANCE`): greedy decoding is not bit-exact across batch shapes on
GPUs, so a GPU gets sglang CI's ``pd_parity_kit`` tolerance (0.05 in logprob); a divergence where the two
best tokens are within the tolerance of each other (a near tie that such noise may flip) is reported, not
failed. The verdict rests on the count of prompts out of tolerance, with its exact interval
(:class:`dsv4deploy.gates.evidence.Decision`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from dsv4deploy.gates.evidence import Decision, Outcome, exact_interval
from dsv4deploy.gates.http import check_url, describe_error, make_client

#: Logprob tolerance per hardware, and why. GPU: sglang CI's pd_parity_kit (batch shapes change the
#: reduction order, so greedy runs are not bit-exact). CPU: the real-engine tier runs one request at a
#: time on one thread pool; 0.01 leaves room for the order of its reductions.
TOLERANCE = {"gpu": 0.05, "cpu": 0.01}
#: Nominal prompt lengths in words (a word is about 1.3 tokens): short, past the 128-token sliding
#: window, and past the 2K tokens index_topk 512 covers.
LENGTHS = (24, 200, 800, 1600, 2400, 3200)
TOP_N = 5
NEW_TOKENS = 24
_FILLER = ("The committee reviewed the quarterly figures for the northern depots and noted steady progress.",
           "Shipments through the river port were delayed twice by fog, and the schedule was revised.",
           "A new inspector joined the team in spring and rewrote the checklist for the cold stores.",
           "Most of the vans were serviced in March, and the older ones were sold at auction.",
           "The staff canteen changed its supplier, and the menu now rotates every two weeks.")
_TOOLS = (
    ("What's the weather in Oslo tomorrow?", "get_weather", '{"city": "Oslo", "days": 1}',
     '{"forecast": "light snow", "high_c": -2}', "And should I take the bus or walk?"),
    ("Book a table for 4 at Luigi's at 19:30.", "book_table", '{"restaurant": "Luigi\'s", "guests": 4, '
     '"time": "19:30"}', '{"status": "confirmed", "table": 12}', "Great, send the confirmation to Ana."),
    ("Convert 250 euros to yen.", "convert_currency", '{"amount": 250, "from": "EUR", "to": "JPY"}',
     '{"result": 40125.5}', "Now convert the same amount to dollars."),
)

#: How many prompts the fixed set has.
PROMPT_COUNT = len(LENGTHS) + len(_TOOLS)


def fixed_prompts() -> list[dict[str, Any]]:
    """The fixed set: ``{id, kind, length, text}``, plain prompts by length, then tool-call conversations."""
    prompts = []
    for length in LENGTHS:
        words: list[str] = ["The access code of the north gate is KX-55-TQ."]
        i = 0
        while sum(len(s.split()) for s in words) < length:
            words.append(_FILLER[i % len(_FILLER)])
            i += 1
        text = " ".join(words) + "\nWhat is the access code of the north gate? Answer briefly."
        prompts.append({"id": f"plain-{length}", "kind": "plain", "length": length, "text": text})
    for n, (ask, tool, args, result, follow) in enumerate(_TOOLS, 1):
        text = (f"System: You can call the tool {tool}.\nUser: {ask}\n"
                f"Assistant: <tool_call>{tool} {args}</tool_call>\nTool: {result}\nUser: {follow}\nAssistant:")
        prompts.append({"id": f"tools-{n}", "kind": "tools", "length": len(text.split()), "text": text})
    return prompts


#: What sglang answers (400) to a prompt over the served context length (`--context-length`, or the model's).
TOO_LONG = "longer than the model's context length"


def generate_one(client: httpx.Client, endpoint: str, text: str, new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """One greedy completion with top-5 logprobs: ``{tokens, logprobs, top}``, ``{skipped}`` for a prompt
    longer than the served context (the set is fixed; a deployment may serve a shorter context), or ``{error}``."""
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens},
            "return_logprob": True, "top_logprobs_num": TOP_N}
    try:
        resp = client.post(f"{endpoint}/generate", json=body)
    except httpx.HTTPError as exc:
        return {"error": describe_error(exc)}
    if resp.status_code == 400 and TOO_LONG in resp.text:
        return {"skipped": f"longer than the served context ({_server_message(resp)})"}
    if resp.status_code != 200:
        return {"error": f"HTTP {resp.status_code}: {resp.text[:300]}"}
    try:
        meta = resp.json()["meta_info"]
        chosen = meta["output_token_logprobs"]
        top = meta.get("output_top_logprobs") or [[] for _ in chosen]
    except (ValueError, KeyError, TypeError):
        return {"error": f"no output_token_logprobs in the answer: {resp.text[:300]}"}
    return {"tokens": [int(c[1]) for c in chosen], "logprobs": [float(c[0]) for c in chosen],
            "top": [[[float(e[0]), int(e[1])] for e in row[:TOP_N]] for row in top],
            "text": str(resp.json().get("text", ""))[:200]}


def collect(endpoint: str, *, api_key: str | None = None, prompts: Sequence[Mapping[str, Any]] | None = None,
            concurrency: int = 1, timeout_s: float = 120.0) -> dict[str, Any]:
    """The record of one serving: ``{prompt id: generate_one's answer + length and kind}``.

    One request at a time by default, so that batch shapes stay alike between the two sides."""
    endpoint = check_url(endpoint, "endpoint")
    prompts = list(prompts or fixed_prompts())
    with make_client(api_key, timeout_s) as client, ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(lambda p: generate_one(client, endpoint, p["text"]), prompts))
    return {p["id"]: {**a, "length": p["length"], "kind": p["kind"]} for p, a in zip(prompts, answers, strict=True)}


def compare_prompt(a: Mapping[str, Any], b: Mapping[str, Any], tolerance: float) -> dict[str, Any]:
    """One prompt's comparison: tokens equal, the first divergent token, the largest logprob difference."""
    shared = 0
    for x, y in zip(a["tokens"], b["tokens"], strict=False):
        if x != y:
            break
        shared += 1
    longest = max(len(a["tokens"]), len(b["tokens"]))
    divergent = shared if shared < longest else None
    delta = 0.0
    for i in range(shared):
        delta = max(delta, abs(a["logprobs"][i] - b["logprobs"][i]))
        top_a = dict((tid, lp) for lp, tid in (a["top"][i] if i < len(a["top"]) else []))
        for lp, tid in b["top"][i] if i < len(b["top"]) else []:
            if tid in top_a:
                delta = max(delta, abs(top_a[tid] - lp))
    near_tie = divergent is not None and _near_tie(a, b, divergent, tolerance)
    ok = delta <= tolerance and (divergent is None or near_tie)
    return {"tokens_equal": shared, "tokens": longest, "first_divergent": divergent, "near_tie": near_tie,
            "max_delta": round(delta, 6), "within_tolerance": ok}


def _near_tie(a: Mapping[str, Any], b: Mapping[str, Any], at: int, tolerance: float) -> bool:
    """At the divergent token, each side lists the other's choice within ``tolerance`` of its own."""
    if at >= len(a["tokens"]) or at >= len(b["tokens"]) or at >= len(a["top"]) or at >= len(b["top"]):
        return False
    top_a = {tid: lp for lp, tid in a["top"][at]}
    top_b = {tid: lp for lp, tid in b["top"][at]}
    other_a, other_b = top_a.get(b["tokens"][at]), top_b.get(a["tokens"][at])
    return (other_a is not None and other_b is not None
            and a["logprobs"][at] - other_a <= tolerance and b["logprobs"][at] - other_b <= tolerance)


def _server_message(resp: httpx.Response) -> str:
    """The innermost message of sglang's (or its router's) error body, else the body's start."""
    match = re.findall(r"The input \(\d+ tokens\) is longer than the model's context length \(\d+ tokens\)",
                       resp.text)
    return match[-1] if match else resp.text[:200]


def left_out(outputs: Mapping[str, Any]) -> list[str]:
    """The prompts of a record that were not asked: longer than the served context."""
    return [pid for pid, o in outputs.items() if "skipped" in o]


def compare(a: Mapping[str, Any], b: Mapping[str, Any], tolerance: float,
            names: tuple[str, str] = ("PD", "combined")) -> tuple[Decision, list[dict[str, Any]], list[dict[str, Any]]]:
    """Compare two records: the decision, one row per prompt, and a table per prompt length."""
    rows: list[dict[str, Any]] = []
    errors = []
    skipped = []  # too long for the context on both sides: not a trial
    for pid in [p for p in a if p in b]:
        x, y = a[pid], b[pid]
        if "error" in x or "error" in y:
            errors.append(f"{pid}: {names[0] if 'error' in x else names[1]} side {x.get('error') or y.get('error')}")
            continue
        if "skipped" in x and "skipped" in y:
            skipped.append(pid)
            continue
        if "skipped" in x or "skipped" in y:  # one side serves a shorter context: not the same settings
            errors.append(f"{pid}: {names[0] if 'skipped' in x else names[1]} side only: "
                          f"{x.get('skipped') or y.get('skipped')}")
            continue
        rows.append({"prompt": pid, "kind": x.get("kind"), "length": x.get("length"),
                     **compare_prompt(x, y, tolerance)})
    missing = sorted(set(a) ^ set(b))
    if errors or missing or not rows:
        why = "; ".join(errors[:3] + ([f"prompts on one side only: {', '.join(missing)}"] if missing else []))
        decision = Decision(Outcome.ERROR, f"parity could not be measured: {why or 'no prompt answered'}")
        return decision, rows, table(rows)
    bad = [r for r in rows if not r["within_tolerance"]]
    interval = exact_interval(len(bad), len(rows))
    head = f"{len(bad)} of {len(rows)} prompts out of tolerance {tolerance:g} ({names[0]} against {names[1]})"
    if skipped:
        head += f"; {len(skipped)} longer than the served context left out ({', '.join(skipped)})"
    if bad:
        first = bad[0]
        where = (f"first divergent token {first['first_divergent']}" if first["first_divergent"] is not None
                 else "same tokens")
        reason = (f"{head}: {first['prompt']} ({where}, max logprob delta {first['max_delta']:.3g}); "
                  f"shortest failing length {min(r['length'] for r in bad)} words")
        return Decision(Outcome.FAILED, reason, len(bad), len(rows), interval,
                        detail={"tolerance": tolerance}), rows, table(rows)
    return Decision(Outcome.PASSED, f"{head}: greedy tokens equal, logprobs within tolerance", 0, len(rows),
                    interval, detail={"tolerance": tolerance}), rows, table(rows)


def table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per prompt length (and the tool conversations together): tokens equal of all, and the max delta."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        key = "tool conversations" if row.get("kind") == "tools" else f"{row.get('length')} words"
        groups.setdefault(key, []).append(row)
    return [{"length": key, "prompts": len(g), "tokens_equal": sum(r["tokens_equal"] for r in g),
             "tokens": sum(r["tokens"] for r in g), "max_delta": max(r["max_delta"] for r in g),
             "out_of_tolerance": sum(not r["within_tolerance"] for r in g)} for key, g in groups.items()]


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-length table as markdown."""
    lines = ["| prompt length | prompts | tokens equal | max logprob delta | out of tolerance |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['length']} | {r['prompts']} | {r['tokens_equal']}/{r['tokens']} | {r['max_delta']:.3g} | "
              f"{r['out_of_tolerance']} |" for r in rows]
    return "\n".join(lines)
