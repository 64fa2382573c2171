"""Which facts in a long prompt the simulated DeepSeek-V4 attention can still see.

A fact is visible when it lies in the sliding window (the last 128 tokens) or when the sparse
indexer selects its compressed (c4: one entry per 4 tokens) index entry. The indexer's top-k
holds up to a context length that grows with ``index_topk`` and collapses beyond it, as in the
seeds: with 512, found up to ~2K tokens and lost beyond ~4K; with 1024, 5.5K found and 10K lost.
Between the two bounds the outcome is pseudo-random but deterministic (a hash of prompt and
settings), so a rerun gives the same answer.

A fact is any sentence carrying a distinctive value: a code (``ZEBRA-4492-OMEGA``), a number of
three or more digits, or a name (two or more capitalised words inside the sentence). Its key is
the sentence's content words; a question finds it by the content words they share (``model.py``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

WINDOW_SIZE = 128
C4_RATIO = 4
# index_topk -> (context length recalled reliably, context length beyond which it is lost)
RECALL_BOUNDS: dict[int, tuple[int, int]] = {512: (2048, 4096), 1024: (6144, 9728)}

_VALUE = re.compile(
    r"(?P<code>\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\b)"
    r"|(?P<number>(?<![\w.-])\d{3,}(?:[.,]\d+)?(?![\w-]))"
    r"|(?P<name>(?<=[a-z,:;] )[A-Z][a-z]+(?: [A-Z][a-z]+)+)"
)
SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+(?=\s|$)|(?=\n)|$)")
_WORD = re.compile(r"[A-Za-z][A-Za-z_']+")
# Words that carry no topic: function words and the verbs of asking.
_STOP_TEXT = (
    "a an and are as at be been being but by can could did do does for from had has have he her his how i if "
    "in into is it its me my no not of on or our she so than that the their them then there these they this "
    "those to was we were what when where which who whom whose why will with would you your "
    "tell give say answer reply only just alone nothing else please need know text above earlier mentioned "
    "somewhere remind recall state quote")
STOPWORDS = frozenset(_STOP_TEXT.split())


def content_words(text: str) -> frozenset[str]:
    """The words that carry meaning: lower-cased, three letters or more, no function words."""
    return frozenset(w for w in (m.group(0).lower() for m in _WORD.finditer(text))
                     if len(w) >= 3 and w not in STOPWORDS)


@dataclass(frozen=True)
class Fact:
    """A distinctive ``value`` at token ``position``; ``key`` is its sentence's content words."""

    key: str  # sorted content words, space-separated
    value: str
    position: int

    @property
    def words(self) -> frozenset[str]:
        """The key as a set of words."""
        return frozenset(self.key.split())


def find_facts(text: str) -> list[tuple[int, str, str]]:
    """``(character offset, key, value)`` of every distinctive value in ``text``, in order."""
    found = []
    for sentence in SENTENCE.finditer(text):
        body = sentence.group(0)
        for value in _VALUE.finditer(body):
            words = content_words(f"{body[:value.start()]} {body[value.end():]}")
            if words:
                found.append((sentence.start() + value.start(), " ".join(sorted(words)), value.group(0)))
    return found


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


def compute_kv(prompt: str, token_count: int) -> PromptKV:
    """Prefill: locate facts (by token position) and build the c4 index entries.

    ``token_count`` is the whole prompt's count (chat markers included); positions are token
    offsets of each fact's value inside ``prompt``, shifted so the prompt ends at ``token_count``.
    """
    from .tokenizer import count_tokens

    position, last = token_count - count_tokens(prompt), 0
    facts = []
    for offset, key, value in find_facts(prompt):
        position += count_tokens(prompt[last:offset])  # counted piecewise: one pass over the prompt
        last = offset
        facts.append(Fact(key, value, position))
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
