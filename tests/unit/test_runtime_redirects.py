"""Modules given clearer names still resolve under their old names, with a deprecation, and
their controller-side action plugins follow them (a module redirect alone would run the doc stub on
the host and fail)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROUTING = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["plugin_routing"]


def _target(redirect: str) -> str:
    assert redirect.startswith("dsv4.deploy."), redirect
    return redirect.removeprefix("dsv4.deploy.")


def test_every_old_module_name_redirects_to_a_module_that_exists_and_warns() -> None:
    modules = ROUTING["modules"]
    assert modules, "no module redirects"
    for old, entry in modules.items():
        assert not (ROOT / "plugins" / "modules" / f"{old}.py").exists(), f"{old} is both a module and a redirect"
        assert (ROOT / "plugins" / "modules" / f"{_target(entry['redirect'])}.py").exists(), old
        assert entry["deprecation"]["removal_version"], old


def test_an_old_name_whose_new_module_has_an_action_plugin_redirects_the_action_too() -> None:
    actions = ROUTING.get("action", {})
    for old, entry in ROUTING["modules"].items():
        new = _target(entry["redirect"])
        if (ROOT / "plugins" / "action" / f"{new}.py").exists():
            assert actions.get(old, {}).get("redirect") == entry["redirect"], f"action {old} does not follow"


def test_ansible_doc_resolves_an_old_name_with_a_deprecation_warning() -> None:
    doc = Path(sys.executable).with_name("ansible-doc")
    out = subprocess.run([str(doc), "dsv4.deploy.dsv4_services_info"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "dsv4_service_state_info" in out.stdout
    assert "deprecated" in out.stderr.lower()
