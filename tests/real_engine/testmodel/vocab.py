"""The test model's tokenizer and what its weights need to know about it.

A byte-level BPE trained here, in well under a second, on the needle gate's own prompt text (haystacks
from dsv4deploy.gates.haystack) and on its word pools, with digits split one by one. Trained so that every
pool word is one token, the tokens of a needle's value form a small set (``value tokens``) that the weights
give a one-hot code each, and the token a value starts with occurs in a haystack only where the value is.
``check_premise`` proves that on the gate's own prompts and fails loudly when the pools no longer allow it.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[3]
SPECIAL = ["<|begin|>", "<|end|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>"]
BOS, EOS, PAD = SPECIAL[0], SPECIAL[1], SPECIAL[2]
ASSISTANT = "<|assistant|>"
VOCAB_LIMIT = 2048
# The answer when nothing in the prompt can start a value (the smoke gate's "Say OK").
DEFAULT_ANSWER = "ĠOK"


def gate_module(name: str) -> ModuleType:
    """``dsv4deploy.gates.NAME``, loaded from its file: the tier's python has sglang, not the tool's deps (the
    modules loaded this way import only the standard library)."""
    key = f"dsv4deploy_gates_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, REPO / "dsv4deploy" / "gates" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def haystack_module() -> ModuleType:
    """dsv4deploy.gates.haystack (the needle gate's prompts)."""
    return gate_module("haystack")


def accuracy_prompt(question: str) -> str:
    """What the accuracy gate sends for ``question``: the question, then its instruction on a line of its own."""
    return f"{question}\n{gate_module('questions').INSTRUCTION}"


def _corpus() -> list[str]:
    """The gate's prompt text: haystacks of every kind of needle, plus the pools' words many times over."""
    hs = haystack_module()
    texts = [hs.build_haystack(300, (i % 11) / 10, seed=i, trial=i % 5).content for i in range(200)]
    for word in (*hs.CODE_WORDS, *hs.FIRST_NAMES, *hs.LAST_NAMES):
        # As a value uses it: after a space (its first word) and after a hyphen (a code's last word).
        texts.append(f" {word}-{word} {word}" * 400)
    texts.append(" OK" * 800)
    # The accuracy gate's instruction, after a question: its words merge into tokens of their own, so a lone
    # space (a number's first token) occurs nowhere but before a value's digits.
    texts.append(accuracy_prompt("") * 400)
    return texts


def train_tokenizer():  # type: ignore[no-untyped-def]
    """The tokenizer (``tokenizers.Tokenizer``), deterministic for the same pools."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    # Digits one by one: a number's tokens are then the ten digits whatever its value.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_LIMIT, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return tokenizer


@dataclass(frozen=True)
class Vocab:
    """Token ids the weights are built around."""

    size: int
    value_tokens: tuple[int, ...]  # every token a value can contain, in id order (one-hot code each)
    value_starts: frozenset[int]  # the tokens a value can begin with
    sinks: frozenset[int]  # role and end markers: where a head with nothing to do attends
    assistant: int
    eos: int
    default_answer: int


def _one_token(tokenizer, text: str) -> int:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    if len(ids) != 1:
        raise PremiseError(f"{text!r} is {len(ids)} tokens {tokenizer.encode(text).tokens}, the construction "
                           f"needs one: the word pools of dsv4deploy/gates/haystack.py changed; widen the "
                           f"tokenizer's training (tests/real_engine/testmodel/vocab.py)")
    return ids[0]


class PremiseError(RuntimeError):
    """The gate's prompts break what the hand-set weights assume."""


def vocab_of(tokenizer) -> Vocab:  # type: ignore[no-untyped-def]
    """The value tokens and markers of ``tokenizer`` (each pool word must be one token)."""
    hs = haystack_module()
    starts = {_one_token(tokenizer, " ")}  # a number's first token: the space split from its digits
    starts |= {_one_token(tokenizer, f" {w}") for w in (*hs.CODE_WORDS, *hs.FIRST_NAMES)}
    inner = {_one_token(tokenizer, "-"), *(_one_token(tokenizer, str(d)) for d in range(10))}
    inner |= {_one_token(tokenizer, w) for w in hs.CODE_WORDS}
    inner |= {_one_token(tokenizer, f" {w}") for w in hs.LAST_NAMES}
    if starts & inner:
        raise PremiseError(f"tokens both start a value and continue one: {sorted(starts & inner)}")
    ids = tokenizer.token_to_id
    return Vocab(size=tokenizer.get_vocab_size(), value_tokens=tuple(sorted(starts | inner)),
                 value_starts=frozenset(starts), sinks=frozenset(ids(t) for t in SPECIAL if t != PAD),
                 assistant=ids(ASSISTANT), eos=ids(EOS), default_answer=ids(DEFAULT_ANSWER))


def render(content: str) -> str:
    """One user message through the model's chat template, with the generation prompt."""
    return f"<|user|>\n{content}<|end|>\n<|assistant|>\n"


def ideal_answer(ids: list[int], vocab: Vocab, max_tokens: int = 32) -> list[int]:
    """What the construction computes, token by token, without floating point: the one value-start token
    after the assistant turn, then the token after the best match of the last three emitted value tokens
    (a tie is an error: the weights would split their attention); a copied non-value token ends the answer."""
    import numpy as np

    values = np.array(ids)
    code = {t: i for i, t in enumerate(vocab.value_tokens)}
    starts = [i for i, t in enumerate(ids) if t in vocab.value_starts]
    if len(starts) != 1:
        raise PremiseError(f"{len(starts)} tokens that can start a value in one prompt, the construction needs "
                           f"exactly one: {[ids[i] for i in starts]}")
    out = [ids[starts[0]]]
    context = [*ids, out[0]]
    while len(out) < max_tokens:
        score = np.zeros(len(values) + 1, dtype=int)
        for back in range(3):  # the key at s sees tokens s-1, s-2, s-3; the query its last three
            token = context[-1 - back]
            if token in code:
                hit = np.zeros(len(values) + 1, dtype=int)
                hit[back + 1:] = values[: len(values) - back] == token
                score += hit
        score = score[: len(values)]
        best = int(score.max())
        if best == 0:
            break
        where = np.flatnonzero(score == best)
        if len(where) > 1:
            raise PremiseError(f"after {out} the copy matches {len(where)} places equally ({where[:5]})")
        nxt = ids[int(where[0])]
        if nxt not in code:
            break
        out.append(nxt)
        context.append(nxt)
    return out


def check_premise(tokenizer, vocab: Vocab, samples: int = 120) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Ask the gate's own prompts (its haystack generator, sizes 300-3500 tokens, every depth) of the ideal
    construction: raises PremiseError when a value cannot be found or copied; returns the share recalled."""
    hs = haystack_module()
    recalled = ties = 0
    for i in range(samples):
        hay = hs.build_haystack((300, 1200, 3500)[i % 3], (i % 7) / 6, seed=1000 + i, trial=i % 4, jitter=0.05,
                                chars_per_token=4.4)
        ids = tokenizer.encode(render(hay.content), add_special_tokens=False).ids
        try:
            answer = tokenizer.decode(ideal_answer(ids, vocab))
        except PremiseError as tie:
            if "equally" not in str(tie):
                raise
            ties += 1  # a value repeating three tokens of itself (a number like 123123): a miss, not a break
            continue
        recalled += hay.value in answer
    share = recalled / samples
    if share < 0.95:
        raise PremiseError(f"the ideal construction recalls {recalled} of {samples} of the gate's prompts "
                           f"({ties} ambiguous copies): the pools no longer fit the model")
    return {"samples": samples, "recalled": recalled, "ambiguous": ties}
