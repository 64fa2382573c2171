"""Checks on the inventory as written (names, where they are set, what `-e` replaces), before the spec.

The spec model judges the values dsv4deploy reads; these checks judge what it would otherwise never
see: a misspelt variable name (dsv4deploy.inventory.varnames), an `-e server_env` that silently replaces the
inventory's switches, an `api_key.vault_var` naming a variable nobody defines. The CLI
(dsv4deploy.inventory) and the playbooks' plan step (the dsv4_build_plan action) both build an
`InventoryView` from Ansible's own inventory objects and run `inventory_problems` on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsv4deploy.inventory import varnames, yaml_fast
from dsv4deploy.spec import DEPLOYMENT_KEYS, HOST_KEYS, CombinedSpec, DecodeSpec, Deployment, PrefillSpec, Problem

EXTRA_VARS = "-e"
VAR_FILE_SUFFIXES = ("", ".yml", ".yaml", ".json")
# The group every playbook targets (`hosts: dsv4`; tests/unit/inventory/test_inventory_checks.py keeps them equal).
PLAY_GROUP = "dsv4"


@dataclass
class InventoryView:
    """Every variable the inventory and `-e` set: where (file, group or host) and the raw values."""

    origins: dict[str, list[str]] = field(default_factory=dict)
    values: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # The inventory's hosts, and those in PLAY_GROUP (the hosts a playbook runs on).
    hosts: list[str] = field(default_factory=list)
    play_hosts: set[str] = field(default_factory=set)
    # host_vars files and folders (path, the host they are for) of the inventory's sources.
    host_vars_files: list[tuple[str, str]] = field(default_factory=list)

    def add(self, name: str, where: str, value: Any) -> None:
        """Record that `name` is set in `where` (a file path, a group or host, or -e)."""
        if where not in self.origins.setdefault(name, []):
            self.origins[name].append(where)
        self.values.setdefault(name, []).append((where, value))


def view_of(inventory: Any, loader: Any, extra_vars: Mapping[str, Any]) -> InventoryView:
    """The InventoryView of an Ansible InventoryManager (its groups, hosts, vars files) plus `-e`."""
    from ansible.vars.plugins import get_vars_from_inventory_sources

    sources = [str(s) for s in getattr(inventory, "_sources", []) or []]
    group = inventory.groups.get(PLAY_GROUP)
    view = InventoryView(extra=dict(extra_vars), hosts=[h.name for h in inventory.get_hosts("all")],
                         play_hosts={h.name for h in group.get_hosts()} if group is not None else set(),
                         host_vars_files=_host_vars_files(sources))
    entities = [("group", g) for g in inventory.groups.values()] + [("host", h) for h in inventory.get_hosts("all")]
    for kind, entity in entities:
        inline = entity.vars if kind == "host" else entity.get_vars()
        for name, value in dict(inline).items():
            view.add(str(name), f"{kind} {entity.name} in the inventory file", value)
        # group_vars/ and host_vars/ (the host_group_vars plugin, as ansible-playbook runs it)
        from_files = get_vars_from_inventory_sources(loader, sources, [entity], "task")
        for name, value in dict(from_files).items():
            view.add(str(name), _vars_file(sources, kind, entity.name, str(name)), value)
    for name, value in extra_vars.items():
        view.add(str(name), EXTRA_VARS, value)
    return view


def _host_vars_files(sources: Iterable[str]) -> list[tuple[str, str]]:
    """Every host_vars/<host>[.yml|.yaml|.json] file or folder beside the inventory sources: (path, host)."""
    out = []
    for source in sources:
        base = Path(source) if Path(source).is_dir() else Path(source).parent
        folder = base / "host_vars"
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if entry.name.startswith("."):
                continue
            name = entry.name
            for suffix in VAR_FILE_SUFFIXES[1:]:
                if entry.is_file() and name.endswith(suffix):
                    name = name[: -len(suffix)]
            out.append((str(entry), name))
    return out


def orphan_host_vars(view: InventoryView) -> list[Problem]:
    """A host_vars file for a host the inventory does not have is read by nobody: a renamed host's leftover."""
    known = set(view.hosts)
    out = []
    for path, host in view.host_vars_files:
        if host in known:
            continue
        meant = varnames.closest(host, known)
        hint = f"did you mean {meant}? rename it to {meant}; or " if meant else ""
        out.append(Problem(field=path, message=f"is for host {host}, which is not in the inventory "
                                               f"(its hosts: {', '.join(sorted(known))}), so nothing reads it",
                           fix=f"{hint}add {host} to hosts.yml, or delete the file"))
    return out


def play_group_problems(view: InventoryView, used: Iterable[str]) -> list[Problem]:
    """The hosts the spec places servers on must be in PLAY_GROUP, or every playbook runs on none of them."""
    missing = sorted(set(used) - view.play_hosts)
    if not missing:
        return []
    return [Problem(field="hosts.yml", message=f"host{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                                               f"{'are' if len(missing) > 1 else 'is'} not in the group "
                                               f"{PLAY_GROUP}, which every playbook targets (hosts: {PLAY_GROUP}): "
                                               "the deploy would run on no host",
                    fix=f"put the hosts under all.children.{PLAY_GROUP}.hosts in hosts.yml (a group of your own "
                        f"may be a child of {PLAY_GROUP})")]


def _vars_file(sources: Iterable[str], kind: str, entity: str, key: str) -> str:
    """The group_vars/host_vars file that sets `key` for `entity`, else the folder it comes from."""
    import yaml

    folder = "group_vars" if kind == "group" else "host_vars"
    for source in sources:
        base = Path(source) if Path(source).is_dir() else Path(source).parent
        candidates = [base / folder / f"{entity}{suffix}" for suffix in VAR_FILE_SUFFIXES]
        directory = base / folder / entity
        if directory.is_dir():
            candidates += sorted(p for p in directory.rglob("*") if p.is_file())
        for path in candidates:
            if not path.is_file():
                continue
            try:  # each file parsed once, however many names are looked up in it
                data = yaml_fast.load_file(path)
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue  # a vaulted file: the folder is named instead
            if isinstance(data, dict) and key in data:
                return str(path)
        if directory.is_dir():
            return f"{directory}/"
    return f"{folder}/{entity}"


def misspelt_problems(view: InventoryView, allowed: Any) -> list[Problem]:
    """Variables close to one dsv4deploy reads ("did you mean"), unless `dsv4_allow_vars` lists them."""
    names, problems = varnames.allow_list(allowed)
    # The variable api_key.vault_var names is the inventory's own, whatever it looks like (dsv4_api_key).
    names += [str(value["vault_var"]) for _, value in view.values.get("api_key", [])
              if isinstance(value, Mapping) and value.get("vault_var")]
    # A worker's field written at the top level is named by worker_field_problems, with where it belongs.
    origins = {k: v for k, v in view.origins.items() if k not in WORKER_ONLY_FIELDS}
    return problems + varnames.misspelt(origins, names)


# Where each worker's field belongs: the spec's worker lists (and the combined server) whose model has it, for the
# fields the deployment's top level does not read itself (index_topk, say, is both: the top level's is the default).
WORKER_LISTS = (("prefill[*]", PrefillSpec), ("decode[*]", DecodeSpec), ("combined", CombinedSpec))
WORKER_ONLY_FIELDS = {name: [where for where, model in WORKER_LISTS if name in model.model_fields]
                      for _, model in WORKER_LISTS for name in model.model_fields
                      if name not in DEPLOYMENT_KEYS and name not in HOST_KEYS}


def worker_field_problems(view: InventoryView, allowed: Any) -> list[Problem]:
    """A worker's field (mem_fraction_static, tp_size, gpus, ...) set as a variable of its own is read by nobody:
    refused, naming the worker lists where it belongs, unless `dsv4_allow_vars` lists it."""
    allow = set(varnames.allow_list(allowed)[0])
    out = []
    for name in sorted(set(view.origins) & set(WORKER_ONLY_FIELDS) - allow):
        lists = WORKER_ONLY_FIELDS[name]
        out.append(Problem(field=name, message=f"is a worker's setting, set at the top level "
                                               f"(in {', '.join(view.origins[name])}), where nothing reads it",
                           fix=f"set it in each worker that needs it: {' or '.join(lists)} (e.g. prefill: "
                               f"[{{host: ..., {name}: ...}}]); or, if it is the inventory's own variable, "
                               f"list it in {varnames.ALLOW_VAR}"))
    return out


def dropped_switches(view: InventoryView) -> list[Problem]:
    """`-e server_env` replaces the inventory's mapping whole: refuse it when it drops a switch."""
    if "server_env" not in view.extra or not isinstance(view.extra["server_env"], Mapping):
        return []
    given = set(view.extra["server_env"])
    dropped: dict[str, list[str]] = {}
    for where, value in view.values.get("server_env", []):
        if where != EXTRA_VARS and isinstance(value, Mapping):
            for name in value:
                if str(name) not in given:
                    dropped.setdefault(str(name), []).append(where)
    if not dropped:
        return []
    where = ", ".join(sorted({w for ws in dropped.values() for w in ws}))
    return [Problem(field="server_env", message=f"-e server_env replaces the inventory's server_env (set in {where}) "
                                                f"and would drop {', '.join(sorted(dropped))}",
                    fix="add switches on top of the inventory's with server_env_extra (all servers) or "
                        "server_env_extra_by_role, e.g. -e '{\"server_env_extra\": {\"NAME\": \"1\"}}'; "
                        "to drop a switch, remove it from the inventory")]


def vault_var_problems(spec: Deployment, defined: Iterable[str]) -> list[Problem]:
    """An `api_key.vault_var` must name a variable that is set, or the deploy fails after writing files."""
    name = spec.api_key.vault_var if spec.api_key else None
    if name is None or name in set(defined):
        return []
    return [Problem(field="api_key.vault_var", message=f"the variable {name!r} is not defined in the inventory or -e",
                    fix=f"define {name} (e.g. ansible-vault encrypt_string --name {name}, into group_vars), "
                        "or use api_key: {file: PATH}")]


def inventory_problems(view: InventoryView, allowed: Any) -> list[Problem]:
    """Every problem of the inventory as written that the spec model cannot see."""
    return (misspelt_problems(view, allowed) + worker_field_problems(view, allowed) + dropped_switches(view)
            + orphan_host_vars(view))
