"""Read the deployment spec from an Ansible inventory, exactly as the playbooks see it.

Variables are resolved by Ansible itself (DataLoader, InventoryManager, VariableManager), so
group_vars, host_vars, precedence and `-e` mean what they mean to `ansible-playbook`, and values are
templated by Ansible's Templar (lookups, filters, `inventory_dir`, `ansible_playbook_python`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dsv4deploy.inventory.checks import (
    InventoryView,
    inventory_problems,
    play_group_problems,
    vault_var_problems,
    view_of,
)
from dsv4deploy.inventory.varnames import ALLOW_VAR
from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS, Deployment, SpecError, load_spec
from dsv4deploy.spec.homes import TRUST_KEYS

# Host variables load_spec reads besides HOST_KEYS.
_HOST_EXTRA_KEYS = ("ansible_host", *TRUST_KEYS)


class InventoryError(ValueError):
    """The inventory or an extra var could not be read or templated; the message says why."""


def load_inventory_vars(
    inventory_paths: list[str],
    extra_vars: list[str],
    keys: Iterable[str] | None = None,
    host_keys: Iterable[str] | None = None,
    key_prefixes: tuple[str, ...] = (),
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Resolve and template the inventory's variables: `(common_vars, hostvars)`.

    `extra_vars` are `-e` arguments as ansible-playbook takes them: `key=value ...`, a JSON/YAML
    mapping, or `@file`. `common_vars` are the deployment-wide variables as seen by the first host
    (in inventory order) that defines `topology`, else by the first host: they normally come from
    group_vars/all, which every host shares. `hostvars` holds each host's host-level variables.
    Only `keys` (default: the spec's deployment keys) and `host_keys` (default: the spec's host
    keys) are templated and returned, plus deployment-wide variables whose names start with one of
    `key_prefixes` (the gates' settings, typos included): other variables may depend on play-time
    facts and are not ours to judge. Values come back as plain Python types. Raises InventoryError.
    """
    common, hostvars, _ = load_inventory(inventory_paths, extra_vars, keys, host_keys, key_prefixes)
    return common, hostvars


def load_inventory(
    inventory_paths: list[str],
    extra_vars: list[str],
    keys: Iterable[str] | None = None,
    host_keys: Iterable[str] | None = None,
    key_prefixes: tuple[str, ...] = (),
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], InventoryView]:
    """`load_inventory_vars`, plus the InventoryView (every variable set and where) for inventory_checks."""
    from ansible.errors import AnsibleError

    keys = tuple(keys) if keys is not None else DEPLOYMENT_KEYS
    host_keys = tuple(host_keys) if host_keys is not None else HOST_KEYS + _HOST_EXTRA_KEYS
    for path in inventory_paths:
        if "," not in path and not Path(path).exists():  # "h1,h2," is a host list, as for ansible
            raise InventoryError(f"inventory {path}: no such file or directory; fix: pass -i with the folder or "
                                 "file of your inventory (e.g. one written by `dsv4deploy init DIR`)")
    from dsv4deploy.inventory.yaml_errors import inventory_yaml_files, yaml_problems

    broken = yaml_problems(inventory_yaml_files(inventory_paths, extra_vars))
    if broken:
        raise InventoryError("\n".join(broken))
    try:
        return _load(inventory_paths, extra_vars, keys, host_keys, key_prefixes)
    except AnsibleError as exc:
        raise InventoryError(f"inventory {', '.join(inventory_paths)}: {_ansible_message(exc)}") from None


def _load(paths: list[str], extra_vars: list[str], keys: tuple[str, ...], host_keys: tuple[str, ...],
          key_prefixes: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, dict[str, Any]], InventoryView]:
    # Imported here: ansible reads its configuration at import time, and the CLI's --help need not pay.
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    from ansible.vars.manager import VariableManager

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()  # without it, lookups such as ansible.builtin.env are "not found"
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(p) for p in paths])
    variables = VariableManager(loader=loader, inventory=inventory)
    variables._extra_vars = parse_extra_vars(loader, extra_vars)  # what ansible-playbook's -e sets

    hosts = inventory.get_hosts("all")
    if not hosts:
        raise InventoryError(f"inventory {', '.join(paths)} defines no hosts (or Ansible could not parse it: "
                             "see its warnings above)")

    def common_keys(hv: Mapping[str, Any]) -> tuple[str, ...]:
        return keys + tuple(k for k in hv if key_prefixes and k.startswith(key_prefixes) and k not in keys)

    templated: dict[str, dict[str, Any]] = {}
    common: dict[str, Any] = {}
    for host in hosts:
        hv = variables.get_vars(host=host, include_hostvars=True)
        templated[host.name] = _template_keys(loader, hv, host_keys, host.name)
        if not common and "topology" in hv:
            common = _template_keys(loader, hv, common_keys(hv), host.name)
    if not common:
        hv = variables.get_vars(host=hosts[0], include_hostvars=True)
        common = _template_keys(loader, hv, common_keys(hv), hosts[0].name)
    return common, templated, view_of(inventory, loader, variables._extra_vars)


def parse_extra_vars(loader: Any, extra_vars: list[str]) -> dict[str, Any]:
    """`-e` arguments merged left to right, parsed like ansible-playbook's (ansible.utils.vars.load_extra_vars,
    which reads global CLI state instead of taking arguments)."""
    from ansible.errors import AnsibleOptionsError
    from ansible.parsing.splitter import parse_kv
    from ansible.template import trust_as_template
    from ansible.utils.vars import combine_vars

    merged: dict[str, Any] = {}
    for arg in extra_vars:
        if not arg:
            continue
        # ansible-playbook trusts its command line: `-e x={{ y }}` is templated there, so here too.
        arg = trust_as_template(arg)
        if arg.startswith("@"):
            data = loader.load_from_file(arg[1:], trusted_as_template=True)
        elif arg[0] in "/.":
            raise AnsibleOptionsError(f"Please prepend extra_vars filename '{arg}' with '@'")
        elif arg[0] in "[{":
            data = loader.load(arg)
        else:
            data = parse_kv(arg)
        if not isinstance(data, Mapping):
            raise AnsibleOptionsError(f"Invalid extra vars data supplied. '{arg}' could not be made into a dictionary")
        merged = combine_vars(merged, data)
    return merged


def _template_keys(loader: Any, hostvars: Mapping[str, Any], keys: tuple[str, ...], host: str) -> dict[str, Any]:
    from ansible.errors import AnsibleError
    from ansible.template import Templar

    templar = Templar(loader=loader, variables=hostvars)
    out: dict[str, Any] = {}
    for key in keys:
        if key not in hostvars:
            continue
        try:
            out[key] = plain(templar.template(hostvars[key]))
        except AnsibleError as exc:
            if key in TRUST_KEYS:  # may need play-time facts: the host's own walk judges the paths then
                continue
            raise InventoryError(f"{key} (host {host}): {_ansible_message(exc)}; fix: define the variable "
                                 "(inventory or -e) or correct the template") from None
    return out


def plain(value: Any) -> Any:
    """A copy of `value` made of builtin types only (Ansible 2.19 returns tagged subclasses)."""
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def _ansible_message(exc: Exception) -> str:
    # AnsibleError's str() may append the source line; the first line is the message proper.
    text = getattr(exc, "message", None) or str(exc)
    return " ".join(str(text).split())


def spec_from_inventory(inventory_paths: list[str], extra_vars: list[str]) -> Deployment:
    """The validated deployment an inventory plus `-e` describe (SpecError, InventoryError)."""
    return deployment_from_inventory(inventory_paths, extra_vars)[0]


def deployment_from_inventory(inventory_paths: list[str], extra_vars: list[str],
                              other_prefixes: tuple[str, ...] = ()) -> tuple[Deployment, dict[str, Any]]:
    """The validated deployment, and the deployment-wide variables named with `other_prefixes`
    (templated, for their own checks: the gates' settings). Raises SpecError, InventoryError."""
    common, hostvars, view = load_inventory(inventory_paths, extra_vars, (*DEPLOYMENT_KEYS, ALLOW_VAR),
                                            key_prefixes=other_prefixes)
    # Names first: a misspelt variable explains the spec problems it causes (a default where a value was meant).
    problems = inventory_problems(view, common.get(ALLOW_VAR))
    try:
        spec = load_spec({k: v for k, v in common.items() if k in DEPLOYMENT_KEYS}, hostvars)
    except SpecError as exc:
        raise SpecError(problems + exc.problems) from None
    problems += vault_var_problems(spec, view.origins) + play_group_problems(view, spec.hosts_in_use())
    if problems:
        raise SpecError(problems)
    others = {k: v for k, v in common.items() if k not in DEPLOYMENT_KEYS and k != ALLOW_VAR}
    return spec, others
