"""The engine a release runs on: sglang (and the router) installed into a venv per version on each host.

`engine:` in the spec names the version and where pip finds it (the operator's index, a wheelhouse on each
host, or both); unset, hosts bring their own sglang and the launchers run as written. Set, every launcher's
program becomes the interpreter of `<install_root>/engines/sglang-<version>-<digest>/`, so the serve scripts,
the release's digest and preflight's parsers all follow the engine.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

ENGINES_DIR = "engines"
ENGINE_FILE = "engine.json"
# What a complete venv carries (written last, before the rename that makes it visible under its own name).
MARKER = ".dsv4deploy-engine.json"
# pip packages of the routers in our contract (dsv4deploy.sglang.routers), by router_implementation.
ROUTER_PACKAGES = {"sglang-router": "sglang-router", "smg": "smg"}


class EngineSpec(BaseModel):
    """Which sglang each host runs and where pip finds it (docs/variables.md, "The engine")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The sglang version (PEP 440, e.g. 0.5.23 or 0.5.23.post1): the venv's name and the release record say it.
    sglang: str
    # The router package's version (sglang-router or smg, per router_implementation), installed into the router
    # host's venv; unset: the router runs from the router_launcher as written.
    router: str | None = None
    # A simple-API index URL (pip --index-url) and/or a folder of wheels on every host (pip --find-links).
    index: str | None = None
    wheelhouse: str | None = None
    # An interpreter on each host whose site-packages the venv sees beneath its own (torch and the CUDA stack
    # installed once): only sglang's own wheel (and the router's) is installed per version, without its
    # dependencies (pip --no-deps), which the base must bring.
    base_python: str | None = None
    # The requirements to install instead of sglang==<sglang> (for a build under another name).
    packages: list[str] = []

    @field_validator("sglang", "router")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Version(value)
            except InvalidVersion:
                raise ValueError(f"{value!r} is not a version (e.g. 0.5.23 or 0.5.23.post1)") from None
        return value

    @field_validator("index")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        parts = urlsplit(value or "")
        if value is not None and (parts.scheme not in ("http", "https", "file") or not (parts.netloc or parts.path)):
            raise ValueError(f"{value!r} is not an http(s) or file URL of a package index (pip --index-url)")
        return value

    @field_validator("wheelhouse", "base_python")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} is not an absolute path on the hosts")
        return value

    @field_validator("packages")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                Requirement(item)
            except InvalidRequirement as exc:
                raise ValueError(f"{item!r} is not a pip requirement ({exc})") from None
        return value

    @model_validator(mode="after")
    def _source(self) -> EngineSpec:
        if self.index is None and self.wheelhouse is None:
            raise ValueError("give index (a package index URL) or wheelhouse (a folder of wheels on every host), "
                             "or both: pip must know where sglang comes from")
        return self


def requirements(engine: EngineSpec, router_implementation: str | None) -> list[str]:
    """What pip installs into a host's venv: sglang (or `packages`), and the router where it runs."""
    out = list(engine.packages) or [f"sglang=={engine.sglang}"]
    if router_implementation and engine.router:
        out.append(f"{ROUTER_PACKAGES[router_implementation]}=={engine.router}")
    return out


def venv_path(engine: EngineSpec, install_root: str, router_implementation: str | None) -> str:
    """The venv of this engine on a host: named by the version, and a digest of everything that fills it."""
    what = {"requirements": requirements(engine, router_implementation), "base_python": engine.base_python}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:10]
    return f"{install_root}/{ENGINES_DIR}/sglang-{engine.sglang}-{digest}"


def record(engine: EngineSpec, install_root: str, router_implementation: str | None) -> dict[str, Any]:
    """The engine as a release records it (`engine.json`) and the install module takes it."""
    venv = venv_path(engine, install_root, router_implementation)
    return {"sglang": engine.sglang, "router": engine.router if router_implementation else None,
            "venv": venv, "python": f"{venv}/bin/python",
            "requirements": requirements(engine, router_implementation),
            "index": engine.index, "wheelhouse": engine.wheelhouse, "base_python": engine.base_python}


def record_json(rec: dict[str, Any]) -> str:
    """`engine.json` of a release: stable JSON (part of the release's content, so of its digest)."""
    return json.dumps({k: v for k, v in rec.items() if k not in ("index", "wheelhouse")},
                      indent=2, sort_keys=True) + "\n"

