"""Token ids and log probabilities of an answer, as sglang's ``/generate`` returns them.

With ``return_logprob`` the real server adds to ``meta_info`` ``output_token_logprobs`` (one
``[logprob, token_id, text]`` per output token; text ``null`` unless ``return_text_in_logprobs``) and, with
``top_logprobs_num`` k, ``output_top_logprobs`` (per output token the k most likely
``[logprob, token_id, text]``, the greedy choice first). Here each figure is a function of what the model
sees (the KV's fingerprint) and the text so far: the same prompt and KV give the same figures on any
server, and a KV that lost entries (the ``pd_transfer_truncate`` fault) shifts every figure after it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .recall import PromptKV, unit_hash
from .tokenizer import tokenize

VOCAB = 129280  # DeepSeek-V4's vocabulary size: token ids fall below it


def kv_fingerprint(kv: PromptKV) -> str:
    """What the model attends to: the prompt's digest and the index entries the KV holds."""
    blob = f"{kv.digest}|{kv.token_count}|{sorted(kv.index_entries)}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def token_id(token: str) -> int:
    """A stable id for a token of the simulated tokenizer."""
    return 1000 + int(hashlib.sha256(token.encode()).hexdigest()[:8], 16) % (VOCAB - 1000)


def output_ids(text: str, count: int) -> list[int]:
    """The ids of the first ``count`` output tokens of ``text`` (padded with an end id)."""
    ids = [token_id(t) for t in tokenize(text)[:count]]
    return ids + [1] * (count - len(ids))


def logprob_fields(text: str, count: int, fingerprint: str, top_n: int, with_text: bool) -> dict[str, Any]:
    """``output_token_logprobs`` and (``top_n`` > 0) ``output_top_logprobs`` for ``count`` output tokens."""
    tokens = (tokenize(text)[:count] + ["<｜end▁of▁sentence｜>"] * count)[:count]
    chosen: list[list[Any]] = []
    tops: list[list[list[Any]]] = []
    for i, tok in enumerate(tokens):
        # The greedy token's log probability: confident, as a trained model mostly is.
        best = -round(0.002 + 0.4 * unit_hash(fingerprint, i, tok) ** 2, 6)
        chosen.append([best, token_id(tok), tok if with_text else None])
        if top_n > 0:
            row = [[best, token_id(tok), tok if with_text else None]]
            level = best
            for j in range(1, top_n):
                level -= round(0.5 + 2.5 * unit_hash(fingerprint, i, tok, j), 6)
                alt = f"{tok}~{j}"
                row.append([round(level, 6), token_id(alt), alt if with_text else None])
            tops.append(row)
    out: dict[str, Any] = {"output_token_logprobs": chosen, "input_token_logprobs": []}
    if top_n > 0:
        out["output_top_logprobs"] = tops
        out["input_top_logprobs"] = []
    return out
