"""Loading the spec from Ansible variables, and pydantic's errors told as `Problem`s.

`load_spec` turns variables (inventory plus `-e`) into a validated `Deployment` or raises
`SpecError`, whose problems each name the field, the host and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from dsv4deploy.spec.checks import check_deployment
from dsv4deploy.spec.homes import home_path_problems
from dsv4deploy.spec.models import DEPLOYMENT_KEYS, HOST_KEYS, Deployment, Problem, SpecError
from dsv4deploy.spec.values import slot_named_roots


def load_spec(common: Mapping[str, Any], hostvars: Mapping[str, Mapping[str, Any]]) -> Deployment:
    """Build and validate the deployment from Ansible variables.

    `common` holds the deployment-wide variables (group_vars/all plus `-e`), `hostvars` each
    inventory host's variables. Raises SpecError listing every problem found.
    """
    data: dict[str, Any] = {k: common[k] for k in DEPLOYMENT_KEYS if common.get(k) is not None}
    data["hosts"] = {
        name: {"name": name, "address": hv.get("ansible_host", name if _looks_like_ip(name) else "127.0.0.1"),
               **{k: hv[k] for k in HOST_KEYS if hv.get(k) is not None}}
        for name, hv in hostvars.items()
    }
    try:
        spec = Deployment.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_problems_from_pydantic(exc.errors(), data)) from None
    for name, hv in hostvars.items():
        spec.hosts[name]._addressed = "ansible_host" in hv or _looks_like_ip(name)
    problems = (check_deployment(spec) + home_path_problems(spec, hostvars)) or slot_named_roots(spec)
    if problems:
        raise SpecError(problems)
    return spec


def _looks_like_ip(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 4 and all(p.isdigit() for p in parts)


def _problems_from_pydantic(errors: list[Mapping[str, Any]], data: Mapping[str, Any]) -> list[Problem]:
    """pydantic's errors told as problems; an unknown key that is a misspelling of a missing one is said once,
    with "did you mean" (`mem_fraction_statc` for `mem_fraction_static`), not as two problems."""
    missing = {tuple(e["loc"]) for e in errors if e["type"] == "missing"}
    renamed: dict[tuple[Any, ...], str] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and isinstance(loc[-1], str):
            meant = _closest_key(loc[-1], [m[-1] for m in missing if m[:-1] == loc[:-1] and isinstance(m[-1], str)])
            if meant:
                renamed[loc] = meant
    said = {(*loc[:-1], meant) for loc, meant in renamed.items()}
    return [_problem_from_pydantic(err, data, renamed.get(tuple(err["loc"])))
            for err in errors if tuple(err["loc"]) not in said or err["type"] != "missing"]


def _closest_key(key: str, candidates: list[str]) -> str | None:
    import difflib

    # 0.8: a one-letter slip in a long key matches; a short key that is another word does not
    # (`model`, a top-level key, on a worker is not a misspelt `moe`).
    found = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.8)
    return found[0] if found else None


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where `loc` points (the model of its parent), for "did you mean"."""
    from pydantic import BaseModel

    model: Any = Deployment
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        model = next((t for t in _types_in(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)),
                     None)
    return list(model.model_fields) if model is not None else []


def _types_in(annotation: Any) -> list[Any]:
    from typing import get_args

    args = get_args(annotation)
    return [annotation] if not args else [t for a in args for t in _types_in(a)]


# How to write each mapping-valued field, for a value of another shape (a string, a list, a number).
_SHAPES = {
    "api_key": "api_key: {file: /etc/dsv4deploy/api_key} (a file only the service user reads) or "
               "api_key: {vault_var: NAME} (an Ansible Vault variable)",
    "combined": "combined: {host: ..., gpus: [...], tp_size: N, port: N, mem_fraction_static: 0.8}: the combined "
                "topology runs one server (for several, use topology: pd with prefill and decode lists)",
    "model": "model: {path: /models/NAME, served_name: NAME}",
    "router": "router: {host: ..., port: N}",
}


# pydantic names our model classes ("a valid dictionary or instance of RetrySpec"): users never wrote those.
_CLASS_NAME = re.compile(r" or instance of \w+")


def _what_was_written(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, str):
        return f"the text {value!r}"
    return f"{type(value).__name__} {value!r}"


def _problem_from_pydantic(err: Mapping[str, Any], data: Mapping[str, Any], meant: str | None = None) -> Problem:
    loc = err["loc"]
    host = _host_of(loc, data)
    # Host settings are host variables: name them as the user writes them (install_root, not hosts.gpu1...).
    field = _field_path(loc[2:] if loc[0] == "hosts" and len(loc) > 2 else loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _field_path(loc[:-1]) or "the spec"
        meant = meant or _closest_key(str(loc[-1]), _known_keys(tuple(loc)))
        if meant:
            return Problem(field=field, host=host, message=f"unknown key '{loc[-1]}'",
                           fix=f"did you mean {meant}? rename {loc[-1]} to {meant}")
        return Problem(field=field, host=host, message=f"unknown key '{loc[-1]}'",
                       fix=f"remove it or check its spelling against the keys of {parent}")
    if kind == "model_type" and str(loc[-1]) in _SHAPES and not isinstance(err.get("input"), Mapping):
        # Not pydantic's "instance of ApiKeyRef": what was written, and how to write it.
        value = err.get("input")
        shape = (f"api_key: {{file: {value}}}" if loc[-1] == "api_key" and isinstance(value, str)
                 and value.startswith("/") else _SHAPES[str(loc[-1])])
        return Problem(field=field, host=host, message=f"is {_what_was_written(value)}, not a mapping",
                       fix=f"write {shape}")
    err = {**err, "msg": _CLASS_NAME.sub("", str(err["msg"]))}
    if kind == "missing":
        return Problem(field=field, host=host, message="is required", fix=f"set {field}")
    if field.endswith("mem_fraction_static"):
        return Problem(field=field, host=host, message=f"{err.get('input')!r} is outside (0, 1)",
                       fix="use a fraction such as 0.80 (see `dsv4deploy plan` for the largest that fits)")
    if isinstance(err.get("input"), str) and kind in ("list_type", "dict_type", "model_type", "model_attributes_type"):
        # `-e decode=[...]` gives Ansible a string; structured values need a JSON/YAML -e, and -e
        # replaces a whole top-level variable (there is no -e for a field inside one).
        top = str(loc[0]) if loc[0] != "hosts" else field
        example = _list_example(err["input"]) if kind == "list_type" else None
        shape = f"as a list such as {example}" if example else "as YAML"
        how = (f"or on the command line as JSON: -e '{{\"{top}\": ...}}'" if top == field else
               f"on the command line -e replaces the whole {top}, as JSON: -e '{{\"{top}\": ...}}'")
        return Problem(field=field, host=host, message=f"{err['msg']} (got the string {err['input']!r})",
                       fix=f"give {field} {shape} in the inventory, {how} (key=value always gives a string)")
    if kind == "literal_error" and loc[-1] == "[key]":  # a mapping key, e.g. server_env_extra_by_role.docode
        field = _field_path(loc[:-1])
        return Problem(field=field, host=host, message=f"{err['msg']} (got {err.get('input')!r})",
                       fix=f"use one of {_literal_choices(err)} as the key")
    if kind == "literal_error":
        return Problem(field=field, host=host, message=f"{err['msg']} (got {err.get('input')!r})",
                       fix=f"set {field} to {_literal_choices(err)}")
    return Problem(field=field, host=host, message=f"{err['msg']} (got {err.get('input')!r})",
                   fix=f"correct {field}")


def _literal_choices(err: Mapping[str, Any]) -> str:
    """The allowed values of a Literal field, with a note when only the case was wrong."""
    choices = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
    given = err.get("input")
    text = " or ".join(choices) or "an allowed value"
    if isinstance(given, str) and given.lower() in choices and given not in choices:
        return f"{text} (lower case: {given.lower()})"
    return f"{text} (exactly, lower case)" if choices and all(c == c.lower() for c in choices) else text


def _list_example(text: str) -> str | None:
    """`[4, 5, 6, 7]` for a range written as "4-7" (or "4,5,6,7"); None when it is not one."""
    span = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text)
    if span and int(span[1]) <= int(span[2]) < int(span[1]) + 64:
        return str(list(range(int(span[1]), int(span[2]) + 1)))
    parts = [p.strip() for p in text.strip("[] ").split(",")]
    return f"[{', '.join(parts)}]" if len(parts) > 1 and all(p.isdigit() for p in parts) else None


def _field_path(loc: Iterable[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _host_of(loc: tuple[Any, ...], data: Mapping[str, Any]) -> str | None:
    """The host a field belongs to, when the location points inside a worker or router."""
    if not loc:
        return None
    if loc[0] == "hosts" and len(loc) > 1:
        return str(loc[1])
    node: Any = data.get(loc[0])
    if loc[0] in ("prefill", "decode") and isinstance(node, Mapping):
        node = [node]
    if isinstance(node, list) and len(loc) > 1 and isinstance(loc[1], int) and loc[1] < len(node):
        node = node[loc[1]]
    return str(node["host"]) if isinstance(node, Mapping) and "host" in node else None
