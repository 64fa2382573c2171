"""The real-engine tier's model folder: a tiny randomly initialised Llama, written on the spot.

Nothing is downloaded and no binary is committed: ``config.json`` describes a small
``LlamaForCausalLM`` (sglang serves it with ``--load-format dummy``, random weights), the tokenizer is
a byte-level BPE trained here with the ``tokenizers`` library, and ``tokenizer_config.json`` carries
a chat template, so the chat API works. Its answers are noise, which is the point for the gates
that must judge them honestly.

Run as ``python -m tests.real_engine.model DIR`` (with the tier's python) to write the folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 512
CONTEXT = 8192
# A Llama chat template of the plain kind: role headers, the generation prompt last.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<|begin|>", "<|end|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>"]
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Say OK when you are ready. "
    "A deployment is promoted when every gate passes; a failed gate rolls every host back. "
    "Needles hide in haystacks of filler text, and the model must recall the secret number. "
    "Tools are called with arguments in JSON: {\"city\": \"Paris\", \"unit\": \"celsius\"}. "
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`"
)

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": VOCAB_SIZE,
    "max_position_embeddings": CONTEXT,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
}


def write_model(folder: Path) -> Path:
    """Write the model folder (idempotent: an existing complete folder is left as it is)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([CORPUS] * 20, trainer=trainer)
    if tokenizer.get_vocab_size() > VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, the model {VOCAB_SIZE}")
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}, indent=2) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "pad_token": SPECIAL[2],
        "model_max_length": CONTEXT, "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "pad_token": SPECIAL[2]}, indent=2) + "\n")
    done.touch()
    return folder


if __name__ == "__main__":
    print(write_model(Path(sys.argv[1])))
