"""The real-engine tier's model folder: a hand-built Llama test instrument, written on the spot.

Nothing is downloaded and no binary is committed. In a few seconds this writes a ``LlamaForCausalLM``
(2 layers, no MLP) whose weights are set by hand (tests/real_engine/testmodel) so that, served by the
unmodified sglang with ``--load-format auto``, it answers a needle-in-a-haystack prompt of the needle
gate with the planted value, and ``Say OK`` with `` OK``. It is not a language model: it cannot do anything
else, and that is what makes the gates' verdicts on it meaningful (a recall that fails is the serving
path's fault). The tokenizer is a byte-level BPE trained here on the gate's own prompt text; the build
first proves, on the gate's own prompts, that the pools still fit the construction (vocab.check_premise)
and fails loudly otherwise. The same pools give byte-identical files.

Run as ``python -m tests.real_engine.model DIR`` (with the tier's python) to write the folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.real_engine.testmodel import vocab as vocab_mod
from tests.real_engine.testmodel import weights

# A plain chat template: role headers, the generation prompt last.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def write_model(folder: Path) -> Path:
    """Write the model folder (idempotent: an existing complete folder is left as it is)."""
    import torch
    from safetensors.torch import save_file

    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = vocab_mod.train_tokenizer()
    vocab = vocab_mod.vocab_of(tokenizer)
    premise = vocab_mod.check_premise(tokenizer, vocab)
    tensors, config = weights.build(vocab)
    tokenizer.save(str(folder / "tokenizer.json"))
    save_file({k: torch.from_numpy(v).to(torch.bfloat16).contiguous() for k, v in sorted(tensors.items())},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"bos_token": vocab_mod.BOS, "eos_token": vocab_mod.EOS, "pad_token": vocab_mod.PAD}
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 0, "eos_token_id": vocab.eos, "pad_token_id": 2}, indent=2) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", **special, "add_bos_token": False,
        "model_max_length": weights.HORIZON, "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    (folder / "premise.json").write_text(json.dumps(premise, indent=2) + "\n")
    done.touch()
    return folder


if __name__ == "__main__":
    print(write_model(Path(sys.argv[1])))
