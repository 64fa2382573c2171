"""What the servers will read from the model folder, judged on the host before anything stops (standard
library only; the `model` need of module_utils/access.py).

A folder sglang cannot load makes the new release fail readiness after the serving one has stopped. Here:
config.json (readable, with `architectures` one of the profile's, and `max_position_embeddings` at least
the servers' context_length), the weights (their index or a single safetensors file) and the tokenizer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

WEIGHTS = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json")
TOKENIZER = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
# Where transformers keeps the context limit, newest first (multimodal configs nest it in text_config).
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length")


def _first(folder: str, names: tuple[str, ...]) -> str:
    return next((n for n in names if os.path.isfile(os.path.join(folder, n))), "")


def _model_limit(config: dict) -> int | None:
    for source in (config, config.get("text_config") or {}):
        for key in _CONTEXT_KEYS:
            if isinstance(source.get(key), int):
                return source[key]
    return None


def check_folder(label: str, folder: str, want: dict, user: str, can_read: Callable[[str], bool]) -> list[str]:
    """Problems of the model folder `folder` for a service running as `user`, each '<label>: ...; fix: ...'.

    `want` holds `profile`, `architectures` (any one is enough; empty: not checked), `context_length`
    (None: not checked) and `weights` (false: `--load-format dummy`, no weight files read); `can_read(path)`
    says whether `user` may read a file.
    """
    if not os.path.isdir(folder):
        return [f"{label}: not a folder; fix: set model.path to the folder the checkpoint was downloaded to "
                "(the one holding config.json)"]
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        return [f"{label}: holds no config.json, so it is not a checkpoint sglang can load; fix: set model.path "
                "to the folder the checkpoint was downloaded to (the one holding config.json)"]
    out = [f"{label}: user {user} cannot read {os.path.join(folder, name)}; fix: chmod -R o+rX {folder} "
           f"(or make {user} its owner or a member of its group)"
           for name in ("config.json", _first(folder, WEIGHTS), _first(folder, TOKENIZER))
           if name and not can_read(os.path.join(folder, name))]
    if not _first(folder, WEIGHTS) and want.get("weights", True):
        out.append(f"{label}: holds no weights ({' or '.join(WEIGHTS)}); fix: finish the download (e.g. "
                   f"huggingface-cli download REPO --local-dir {folder})")
    if not _first(folder, TOKENIZER):
        out.append(f"{label}: holds no tokenizer ({' or '.join(TOKENIZER)}); fix: download the tokenizer files "
                   "with the checkpoint")
    try:
        with open(config_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        return [*out, f"{label}: config.json cannot be read as JSON ({exc}); fix: download it again"]
    if not isinstance(config, dict):
        return [*out, f"{label}: config.json is not a JSON object; fix: download it again"]
    out += _architecture(label, config, want)
    out += _context(label, config, want)
    return out


def _architecture(label: str, config: dict, want: dict) -> list[str]:
    expected = list(want.get("architectures") or [])
    found = config.get("architectures") or []
    if not expected or set(found) & set(expected):
        return []
    return [f"{label}: config.json says architectures {found}, model profile {want.get('profile')} is for "
            f"{', '.join(expected)}; fix: point model.path at a {expected[0]} checkpoint, or set model.profile "
            "to this model's profile (memory_profile.models.NAME with its architectures)"]


def _context(label: str, config: dict, want: dict) -> list[str]:
    asked, limit = want.get("context_length"), _model_limit(config)
    if not asked or limit is None or asked <= limit:
        return []
    return [f"{label}: context_length {asked} is above the model's max_position_embeddings {limit} (sglang refuses "
            f"to start: 'User-specified context_length ({asked}) is greater than the derived context_length "
            f"({limit})'); fix: set context_length to {limit} or less, or leave it unset"]
