"""What each service needs on its host, as its unit will see it: checked in preflight (dsv4_access).

For every service of a host: the user it runs as, the paths it must be able to use (the launcher,
the install root its serve script and working directory live under, the API key file) and what the
unit's sandbox hides from it (``PrivateTmp=yes`` gives it an empty /tmp of its own, so a launcher
under /tmp does not exist for it). The host module judges each path for that user; everything
about the unit is decided here, from the unit text the release will install.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from dsv4deploy.plan import model_needs
from dsv4deploy.plan.services import ServiceDefinition, build_services
from dsv4deploy.spec import Deployment

# Where the kernel lists the InfiniBand devices (what mooncake's topology discovery reads through ibverbs).
IB_CLASS = "/sys/class/infiniband"

# What a unit without Environment=PATH gets from systemd (Debian 12, systemd 252).
SYSTEMD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_TMP = ("/tmp", "/var/tmp")
_HOMES = ("/home", "/root", "/run/user")


class PathNeed(BaseModel):
    """One path a service must be able to use, for the host module to check."""

    model_config = ConfigDict(frozen=True)

    service: str
    path: str
    # exec: run it; search: reach (and, when it exists, enter) this directory; secret: the API key,
    # readable by the service's user and by nobody else but root; device: it exists (an InfiniBand device);
    # model: the model folder (module_utils/model_folder.py); read: a file the service reads (chat template);
    # trusted: a path root uses, every existing part of it up to / root's (module_utils/trust.py).
    need: Literal["exec", "search", "secret", "device", "model", "read", "trusted"]
    what: str
    # Prefixes the unit does not see, each with the setting that hides it.
    hidden: dict[str, str] = {}
    # PATH the serve script runs a bare launcher name with.
    search_path: list[str] = []
    # CapabilityBoundingSet= empty: even root is held to the file modes.
    no_dac_override: bool = False
    # need=model: what config.json must say (dsv4deploy.plan.model_needs.model_facts).
    model: dict[str, Any] = {}


def unit_settings(unit_text: str) -> dict[str, list[str]]:
    """The [Service] settings of a unit file (every assignment kept, in order)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def hidden_paths(settings: dict[str, list[str]]) -> dict[str, str]:
    """Path prefixes a unit with `settings` cannot see, each with the setting that hides it."""
    def last(key: str) -> str:
        return (settings.get(key) or [""])[-1].lower()

    hidden: dict[str, str] = {}
    if last("PrivateTmp") in ("yes", "true", "1", "on"):
        hidden.update({p: "PrivateTmp=yes (the unit gets an empty /tmp and /var/tmp of its own)" for p in _TMP})
    if last("ProtectHome") in ("yes", "true", "1", "on", "tmpfs"):
        hidden.update({p: f"ProtectHome={last('ProtectHome')}" for p in _HOMES})
    for key in ("InaccessiblePaths", "TemporaryFileSystem"):
        for value in settings.get(key, []):
            for item in value.split():
                path = item.lstrip("-+").split(":", 1)[0]
                if path.startswith("/"):
                    hidden[path.rstrip("/") or "/"] = f"{key}={item}"
    return hidden


def needs_of(svc: ServiceDefinition, launcher: list[str], launcher_field: str, unit_text: str | None,
             model: dict[str, Any] | None = None) -> list[PathNeed]:
    """The paths `svc` needs: its launcher, its install root, its API key file; a server also its model
    folder and chat template file (`model`: dsv4deploy.plan.model_needs.model_facts)."""
    settings = unit_settings(unit_text) if unit_text is not None else {}
    common: dict[str, Any] = {
        "service": svc.name,
        "hidden": hidden_paths(settings),
        "no_dac_override": settings.get("CapabilityBoundingSet", ["all"])[-1] == "",
    }
    path_env = svc.env.get("PATH", SYSTEMD_DEFAULT_PATH if svc.service_manager == "systemd" else "")
    needs = [
        PathNeed(**common, path=launcher[0], need="exec", what=f"{launcher_field}[0] of {svc.name}",
                 search_path=[p for p in path_env.split(":") if p.startswith("/")]),
        PathNeed(**common, path=svc.install_root, need="search",
                 what=f"install_root (serve script and working directory of {svc.name})"),
    ]
    if svc.api_key_file and not svc.api_key_file.startswith(f"{svc.install_root}/"):
        # A key under the install root is written by the deploy itself (api_key.vault_var).
        needs.append(PathNeed(**common, path=svc.api_key_file, need="secret", what=f"api_key.file of {svc.name}"))
    if model and svc.role != "router":
        needs += [PathNeed(**need) for need in model_needs.needs_for(svc.name, model, common)]
    return needs


def host_needs(services: list[ServiceDefinition], files: dict[str, str], server_launcher: list[str],
               router_launcher: list[str], model: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every need of the services of one host, as plain data for the preflight module.

    Services that need the same path share one entry (hidden if any of their units hides it), so
    a problem with it is said once, naming them all.
    """
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for svc in services:
        launcher, field = (router_launcher, "router_launcher") if svc.role == "router" else (
            server_launcher, "server_launcher")
        for need in needs_of(svc, launcher, field, files.get(f"units/{svc.name}.service"), model):
            key = (need.path, need.need, need.what.split(" of ")[0])
            entry = merged.setdefault(key, {**need.model_dump(), "services": []})
            entry["services"].append(need.service)
            entry["hidden"] = {**need.hidden, **entry["hidden"]}
            entry["no_dac_override"] = entry["no_dac_override"] or need.no_dac_override
    for entry in merged.values():
        entry["what"] = entry["what"].replace(entry["service"], ", ".join(entry["services"]))
        del entry["services"]
    return list(merged.values())


def ib_device_needs(spec: Deployment, host: str) -> list[dict[str, Any]]:
    """The InfiniBand devices the PD workers on `host` name with `transport: rdma`: each must exist there, or
    mooncake finds no HCA and falls back to TCP without an error."""
    if spec.topology != "pd":
        return []
    servers = [d for d in build_services(spec) if d.role in ("prefill", "decode")]
    out = []
    for svc, worker in zip(servers, [*spec.prefill, *spec.decode, *_rank_workers(spec)], strict=False):
        if svc.host != host or getattr(worker, "transport", None) != "rdma" or not worker.ib_device:
            continue
        for device in worker.ib_device.split(","):
            out.append(PathNeed(service=svc.name, path=f"{IB_CLASS}/{device.strip()}", need="device",
                                what=f"ib_device {device.strip()} of {svc.name}").model_dump())
    return out


def _rank_workers(spec: Deployment) -> list[Any]:
    # build_services lists ranks >= 1 after the rank-0 workers, in worker order.
    return [w for w in [*spec.prefill, *spec.decode] for _ in w.node_names()[1:]]
