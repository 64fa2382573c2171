"""A torch forward pass of the test model, written here from sglang's Llama arithmetic (neox RoPE on the
first ``partial_rotary_factor`` of each head in the model's dtype, RMSNorm in float32, causal attention
scaled by 1/sqrt(head_dim)), to check the built folder offline before any server serves it.
(transformers' Llama rotates the whole head whatever ``partial_rotary_factor`` says, so it cannot be the
reference.)

    python -m tests.real_engine.testmodel.reference DIR [ROPE_THETA]   # greedy answers to needle prompts
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


class Reference:
    """The model of ``folder`` in ``dtype``; ``rope_theta`` replaces the config's (what an override would do)."""

    def __init__(self, folder: Path, dtype: torch.dtype = torch.bfloat16, rope_theta: float | None = None) -> None:
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        self.cfg = json.loads((folder / "config.json").read_text())
        self.w = {k: v.to(dtype) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.dtype = dtype
        d = self.cfg["head_dim"]
        self.rot = int(self.cfg["partial_rotary_factor"] * d)
        theta = rope_theta or self.cfg["rope_theta"]
        inv = 1.0 / theta ** (torch.arange(0, self.rot, 2, dtype=torch.float32) / self.rot)
        angles = torch.outer(torch.arange(self.cfg["max_position_embeddings"], dtype=torch.float32), inv)
        self.cos, self.sin = angles.cos().to(dtype), angles.sin().to(dtype)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        return x32.to(self.dtype) * weight

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        rot, rest = x[..., : self.rot], x[..., self.rot:]
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        x1, x2 = rot.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest), dim=-1)

    def logits(self, ids: list[int]) -> torch.Tensor:
        """The last position's logits for the token ids ``ids``."""
        cfg, w = self.cfg, self.w
        heads, d = cfg["num_attention_heads"], cfg["head_dim"]
        pos = torch.arange(len(ids))
        x = w["model.embed_tokens.weight"][torch.tensor(ids)]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = self._norm(x, w[p + "input_layernorm.weight"])
            q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
            q, k, v = (t.view(len(ids), heads, d) for t in (q, k, v))
            q, k = self._rope(q, pos), self._rope(k, pos)
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
            x = x + out.transpose(0, 1).reshape(len(ids), heads * d) @ w[p + "self_attn.o_proj.weight"].T
        h = self._norm(x[-1:], w["model.norm.weight"])
        return (h @ w["lm_head.weight"].T)[0].float()

    def answer(self, content: str, max_tokens: int = 32) -> str:
        """The greedy answer to one user message (the chat template's rendering)."""
        ids = self.tokenizer.encode(f"<|user|>\n{content}<|end|>\n<|assistant|>\n", add_special_tokens=False).ids
        out: list[int] = []
        eos = self.cfg["eos_token_id"]
        with torch.no_grad():
            while len(out) < max_tokens:
                token = int(self.logits(ids + out).argmax())
                if token == eos:
                    break
                out.append(token)
        return self.tokenizer.decode(out)


def main(folder: Path, rope_theta: float | None = None) -> None:
    """Print greedy answers to needle prompts of 300-3500 tokens at depths 0, 0.5, 1, and the recall."""
    from tests.real_engine.testmodel.vocab import haystack_module

    hs = haystack_module()
    model = Reference(folder, rope_theta=rope_theta)
    print("Say OK ->", repr(model.answer("Say OK")))
    recalled = asked = 0
    for length in (300, 1200, 3500):
        for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
            hay = hs.build_haystack(length, depth, seed=11, chars_per_token=4.4)
            answer = model.answer(hay.content)
            asked += 1
            recalled += hay.value in answer
            print(length, depth, repr(hay.value), repr(answer), hay.value in answer)
    print(f"recalled {recalled} of {asked}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else None)
