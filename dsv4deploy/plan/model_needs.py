"""What the servers will read from the model: checked on the controller against the model's profile, and
on each host in preflight (the `model` and `read` needs judged by module_utils/model_folder.py).

Found by the servers, a wrong model path would show only after the serving release had stopped (under
`recreate`: an outage until the old release loaded again). So every server host gets, before anything stops:
- the model folder: absolute, present, holding config.json, the weights' index and tokenizer files, all
  readable by the service user; config.json's `architectures` one of the profile's, and the servers'
  `context_length` within the model's `max_position_embeddings`;
- the chat template, when it is a file: present and readable by the service user.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from dsv4deploy.spec import Deployment, Problem

# sglang takes --chat-template as a file path or as the name of a built-in template ("chatml").
_TEMPLATE_SUFFIXES = (".jinja", ".j2", ".json")


def template_is_file(value: str | None) -> bool:
    """Whether a chat_template names a file (sglang reads it) rather than a built-in template."""
    return bool(value) and ("/" in value or value.endswith(_TEMPLATE_SUFFIXES))


def profile_problems(spec: Deployment, profile: Any) -> list[Problem]:
    """tp_size and context_length of each server against the model profile (`memory.ModelProfile`)."""
    out: list[Problem] = []
    heads = profile.attention_heads
    limit = profile.max_context_length
    for path, worker in spec.workers():
        if heads and heads % worker.tp_size:
            fits = [str(t) for t in (1, 2, 4, 8, 16, 32, 64) if heads % t == 0 and t <= max(heads, 1)]
            out.append(Problem(field=f"{path}.tp_size", host=worker.host,
                               message=f"tp_size {worker.tp_size} does not divide the {heads} attention heads of "
                                       f"model profile {spec.model.profile}: sglang refuses to start",
                               fix=f"set tp_size to one of {', '.join(fits)} (and list as many GPUs)"))
        context = spec.effective(worker, "context_length")
        if limit and context and context > limit:
            out.append(Problem(field=f"{path}.context_length" if worker.context_length else "context_length",
                               host=worker.host,
                               message=f"context_length {context} is above the model's maximum {limit} "
                                       f"(max_position_embeddings of profile {spec.model.profile})",
                               fix=f"set context_length to {limit} or less, or leave it unset (the model's own)"))
    return out


def model_facts(spec: Deployment, profile: Any | None) -> dict[str, Any]:
    """What the host-side check needs to know of the model (the same for every server: prefill and
    decode agree on context_length and chat_template, validation says so)."""
    workers = spec.workers()
    first = workers[0][1] if workers else None
    return {
        "path": spec.model.path,
        # `--load-format dummy` (random weights, for tests) reads no weight files.
        "weights": not any(_dummy_weights(w.extra_args) for _, w in workers),
        "profile": spec.model.profile,
        "architectures": list(profile.architectures) if profile is not None else [],
        "context_length": spec.effective(first, "context_length") if first is not None else None,
        "chat_template": spec.effective(first, "chat_template") if first is not None else None,
    }


def _dummy_weights(args: list[str]) -> bool:
    return "--load-format=dummy" in args or ("--load-format", "dummy") in pairwise(args)


def needs_for(service: str, facts: dict[str, Any], common: dict[str, Any]) -> list[dict[str, Any]]:
    """The model folder and chat template needs of one server, as `access.PathNeed` data (`common`:
    service, hidden, no_dac_override)."""
    needs = [{**common, "path": facts["path"], "need": "model", "what": f"model.path of {service}",
              "model": {k: facts[k] for k in ("profile", "architectures", "context_length", "weights")}}]
    template = facts.get("chat_template")
    if template_is_file(template):
        needs.append({**common, "path": template, "need": "read", "what": f"chat_template of {service}"})
    return needs
