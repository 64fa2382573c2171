"""Which facts in a long prompt the simulated DeepSeek-V4 attention can still see.

A fact is visible when it lies in the sliding window (the last 128 tokens) or when the sparse
indexer selects its compressed (c4: one entry per 4 tokens) index entry. The indexer's top-k
holds up to a context length that grows with ``index_topk`` and collapses beyond it, as in the
seeds: with 512, found up to ~2K tokens and lost beyond ~4K; with 1024, 5.5K found and 10K lost.
Between the two bounds the outcome is pseudo-random but deterministic (a hash of prompt and
settings), so a rerun gives the same answer.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

WINDOW_SIZE = 128
C4_RATIO = 4
# index_topk -> (context length recalled reliably, context length beyond which it is lost)
RECALL_BOUNDS: dict[int, tuple[int, int]] = {512: (2048, 4096), 1024: (6144, 9728)}

_FACT = re.compile(r"\bThe ([^.?!\n]{1,200}?) is ([^\s]+?)\.(?=\s|$)")


@dataclass(frozen=True)
class Fact:
    """``The <key> is <value>.`` found at token position ``position`` of the prompt."""

    key: str
    value: str
    position: int


@dataclass
class PromptKV:
    """The simulated KV cache of a prompt: what prefill computes and PD transfers to decode."""

    token_count: int
    facts: list[Fact]
    index_entries: set[int] = field(default_factory=set)  # c4 block ids present
    digest: str = ""
    settings: dict = field(default_factory=dict)  # the prefill's model-affecting settings

    def to_json(self) -> dict:
        """Wire form for the bootstrap connection."""
        return {
            "token_count": self.token_count,
            "facts": [[f.key, f.value, f.position] for f in self.facts],
            "index_entries": sorted(self.index_entries),
            "digest": self.digest,
            "settings": self.settings,
        }

    @classmethod
    def from_json(cls, data: dict) -> PromptKV:
        """Inverse of :meth:`to_json`."""
        return cls(
            token_count=int(data["token_count"]),
            facts=[Fact(k, v, int(p)) for k, v, p in data["facts"]],
            index_entries={int(i) for i in data["index_entries"]},
            digest=str(data.get("digest", "")),
            settings=dict(data.get("settings") or {}),
        )


def normalize_key(key: str) -> str:
    """Case- and space-insensitive form of a fact key."""
    return " ".join(key.lower().split())


def compute_kv(prompt: str, token_count: int) -> PromptKV:
    """Prefill: locate fact sentences (by token position) and build the c4 index entries.

    ``token_count`` is the whole prompt's count (chat markers included); positions are token
    offsets of each fact inside ``prompt``, shifted so the prompt ends at ``token_count``.
    """
    from .tokenizer import count_tokens

    shift = token_count - count_tokens(prompt)
    facts = [
        Fact(normalize_key(m.group(1)), m.group(2), shift + count_tokens(prompt[: m.start()]))
        for m in _FACT.finditer(prompt)
    ]
    blocks = set(range((token_count + C4_RATIO - 1) // C4_RATIO))
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    return PromptKV(token_count, facts, blocks, digest)


def truncate_distant_entries(kv: PromptKV) -> PromptKV:
    """The pd_transfer_truncate fault: keep only index entries inside the sliding window."""
    first_kept = max(0, kv.token_count - WINDOW_SIZE) // C4_RATIO
    kept = {b for b in kv.index_entries if b >= first_kept}
    return PromptKV(kv.token_count, kv.facts, kept, kv.digest, kv.settings)


def unit_hash(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def selection_probability(context_len: int, index_topk: int) -> float:
    """Probability that the sparse indexer keeps a distant fact at this context length."""
    reliable, lost = RECALL_BOUNDS.get(index_topk, RECALL_BOUNDS[512])
    if context_len <= reliable:
        return 1.0
    if context_len >= lost:
        return 0.0
    return (lost - context_len) / (lost - reliable)


def fact_visible(kv: PromptKV, fact: Fact, index_topk: int, salt: str = "") -> bool:
    """Whether attention sees ``fact``: sliding window, else a present and selected index entry."""
    if kv.token_count - fact.position <= WINDOW_SIZE:
        return True
    if fact.position // C4_RATIO not in kv.index_entries:
        return False
    p = selection_probability(kv.token_count, index_topk)
    return unit_hash(kv.digest, fact.position, index_topk, salt) < p
