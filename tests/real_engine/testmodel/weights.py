"""The test model's weights, set by hand: a two-layer Llama with no MLP that finds and copies a needle.

The residual stream holds named slots (``Layout``): a constant, the current token's features, the features
of the tokens 1, 2 and 3 back, and the answer. A token's features are a one-hot code when it can be part of a
needle's value (``Vocab.value_tokens``), and two flags saying what else it is (a value's start, a role
marker, the assistant's, the end of turn, other text). Every embedding has the same norm, so each RMSNorm is a known
constant and its weight undoes it.

- Layer 0, heads 1-3: attend exactly 1, 2 and 3 tokens back through RoPE alone (rope.py) and write that
  token's features into the slot ``back`` 1, 2 or 3.
- Layer 1, head 1 (copy): from the last three tokens' value codes to the position whose three preceding
  tokens match them, in the rotary-free part of the head (``partial_rotary_factor``), so the match is the
  same at any distance; it writes the token found there into the answer. A copied token that is not part
  of a value writes "end".
- Layer 1, head 2 (value start): right after the assistant's marker it attends to the one token that can
  start a value; anywhere else it rests on the role markers, whose value is zero.
- The unembedding reads the answer slot: a value token's code is that token's logit, "end" is the end of
  turn's, and right after the assistant's marker (or the model's own end of turn) a smaller constant is
  `` OK``'s (the answer when the prompt holds no value). The MLPs are zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tests.real_engine.testmodel import rope
from tests.real_engine.testmodel.vocab import Vocab

ROTARY_DIM = 64
HEAD_DIM = 256
HEADS = 3
ROPE_THETA = 10000.0
HORIZON = 8192  # offsets the RoPE heads are solved over: the model's max_position_embeddings
# Under twice the RoPE base the heads attend this far back instead (rope.py), so that any prompt longer than
# 64 tokens shows the base: short offsets scanned for a margin close to the unconstrained one (1.47, 1.37,
# 1.31 for heads 1, 2, 3 back): 1.21, 1.24, 1.31.
DETUNED = 2 * ROPE_THETA
LURES = {1: 32, 2: 48, 3: 64}
# Attention score gaps (after sglang's 1/sqrt(head_dim) scaling): per RoPE margin, per matched token,
# the value start over a resting head, and the resting head over everything else.
ROPE_GAP, MATCH_GAP, START_SCORE, REST_SCORE = 16.0, 24.0, 40.0, 16.0
START_WEIGHT, DEFAULT_WEIGHT, LOGIT_SCALE = 3.0, 1.5, 3.0
FLAGS = ("nonvalue", "start", "inner", "assistant", "sink", "plain", "end")


@dataclass(frozen=True)
class Layout:
    """Where each slot of the residual stream is, for ``codes`` value tokens."""

    codes: int

    @property
    def features(self) -> int:
        return self.codes + len(FLAGS)

    def flag(self, name: str) -> int:
        return self.codes + FLAGS.index(name)

    def slot(self, back: int) -> int:
        """Start of the features of the token ``back`` tokens back (0: the current token)."""
        return 1 + back * self.features

    @property
    def answer(self) -> int:
        return self.slot(4)

    @property
    def end(self) -> int:
        return self.answer + self.codes

    @property
    def hidden(self) -> int:
        return 64 * math.ceil((self.end + 1) / 64)


def config(vocab: Vocab, layout: Layout) -> dict:
    """config.json: a LlamaForCausalLM sglang serves with --load-format auto."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": layout.hidden,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "head_dim": HEAD_DIM, "partial_rotary_factor": ROTARY_DIM / HEAD_DIM,
        "vocab_size": vocab.size, "max_position_embeddings": HORIZON, "rms_norm_eps": 1e-6,
        "rope_theta": ROPE_THETA, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
        "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": vocab.eos, "pad_token_id": 2,
    }


def build(vocab: Vocab) -> tuple[dict[str, np.ndarray], dict]:
    """(float32 tensors under the Hugging Face Llama names, config.json)."""
    lay = Layout(len(vocab.value_tokens))
    h, d, n = lay.hidden, HEAD_DIM, HEADS * HEAD_DIM
    code = {t: i for i, t in enumerate(vocab.value_tokens)}
    embed = np.zeros((vocab.size, h))
    embed[:, 0] = 1.0
    for token in range(vocab.size):
        cur = lay.slot(0)
        if token in code:
            embed[token, cur + code[token]] = 1.0
            embed[token, cur + lay.flag("start" if token in vocab.value_starts else "inner")] = 1.0
        elif token == vocab.assistant:
            embed[token, cur + lay.flag("assistant")] = embed[token, cur + lay.flag("sink")] = 1.0
        elif token == vocab.eos:
            embed[token, cur + lay.flag("nonvalue")] = embed[token, cur + lay.flag("end")] = 1.0
        else:
            embed[token, cur + lay.flag("nonvalue")] = 1.0
            embed[token, cur + lay.flag("sink" if token in vocab.sinks else "plain")] = 1.0
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": embed}
    rotary_scale = math.sqrt(d)  # undo sglang's 1/sqrt(head_dim)

    # Layer 0: heads attending 1, 2, 3 back.
    q0, k0, v0, o0 = *(np.zeros((n, h)) for _ in range(3)), np.zeros((h, n))
    for head, back in enumerate((1, 2, 3)):
        coeffs, margin = rope.solve(back, ROPE_THETA, ROTARY_DIM, HORIZON, DETUNED, LURES[back])
        if rope.attended(coeffs, ROPE_THETA, ROTARY_DIM, HORIZON) != back or margin < 1.0:
            raise RuntimeError(f"the RoPE head {back} back has margin {margin:.3f}: scipy's solver changed?")
        if rope.attended(coeffs, DETUNED, ROTARY_DIM, HORIZON) == back:
            raise RuntimeError(f"the RoPE head {back} back still works under base {DETUNED:g}")
        base = head * d
        q0[base:base + ROTARY_DIM, 0] = coeffs * ROPE_GAP * rotary_scale / margin
        k0[base:base + ROTARY_DIM // 2, 0] = 1.0
        for f in range(lay.features):
            v0[base + f, lay.slot(0) + f] = 1.0
            o0[lay.slot(back) + f, base + f] = 1.0
    _layer(t, 0, q0, k0, v0, o0, norm=math.sqrt(3 / h))

    # Layer 1: the copy head and the value-start head.
    q1, k1, v1, o1 = *(np.zeros((n, h)) for _ in range(3)), np.zeros((h, n))
    c = lay.codes
    for k in range(3):  # query: tokens 0, 1, 2 back; key: 1, 2, 3 back
        for a in range(c):
            q1[ROTARY_DIM + k * c + a, lay.slot(k) + a] = MATCH_GAP * rotary_scale
            k1[ROTARY_DIM + k * c + a, lay.slot(k + 1) + a] = 1.0
    for a in range(c):
        v1[a, lay.slot(0) + a] = 1.0
        o1[lay.answer + a, a] = 1.0
    v1[c, lay.slot(0) + lay.flag("nonvalue")] = 1.0
    o1[lay.end, c] = 1.0
    base = d
    q1[base + ROTARY_DIM, lay.slot(1) + lay.flag("assistant")] = START_SCORE * rotary_scale
    q1[base + ROTARY_DIM + 1, 0] = REST_SCORE * rotary_scale
    k1[base + ROTARY_DIM, lay.slot(0) + lay.flag("start")] = 1.0
    k1[base + ROTARY_DIM + 1, lay.slot(0) + lay.flag("sink")] = 1.0
    for a in range(c):
        v1[base + a, lay.slot(0) + a] = 1.0
        o1[lay.answer + a, base + a] = START_WEIGHT
    _layer(t, 1, q1, k1, v1, o1, norm=math.sqrt(9 / h))

    t["model.norm.weight"] = np.ones(h)
    head = np.zeros((vocab.size, h))
    for token, a in code.items():
        head[token, lay.answer + a] = LOGIT_SCALE
    head[vocab.eos, lay.end] = LOGIT_SCALE
    head[vocab.default_answer, lay.slot(1) + lay.flag("assistant")] = LOGIT_SCALE * DEFAULT_WEIGHT
    # After its own end of turn (a client that sets ignore_eos, as the perf gate does) it says " OK" again, so
    # such a stream carries text and its inter-token latency can be measured.
    head[vocab.default_answer, lay.slot(0) + lay.flag("end")] = LOGIT_SCALE * DEFAULT_WEIGHT
    t["lm_head.weight"] = head
    return {k: v.astype(np.float32) for k, v in t.items()}, config(vocab, lay)


def _layer(t: dict[str, np.ndarray], i: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
           norm: float) -> None:
    p = f"model.layers.{i}."
    h = q.shape[1]
    t[p + "input_layernorm.weight"] = np.full(h, norm)
    t[p + "post_attention_layernorm.weight"] = np.ones(h)
    t[p + "self_attn.q_proj.weight"], t[p + "self_attn.k_proj.weight"] = q, k
    t[p + "self_attn.v_proj.weight"], t[p + "self_attn.o_proj.weight"] = v, o
    # No MLP: zero weights add nothing to the residual stream (silu(0) * 0).
    t[p + "mlp.gate_proj.weight"] = np.zeros((64, h))
    t[p + "mlp.up_proj.weight"] = np.zeros((64, h))
    t[p + "mlp.down_proj.weight"] = np.zeros((h, 64))
