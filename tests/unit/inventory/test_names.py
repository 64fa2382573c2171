"""The playbooks' input names live in one place; every old name warns, naming its replacement."""

from __future__ import annotations

from pathlib import Path

from dsv4deploy.inventory import names

REPO = Path(__file__).resolve().parents[3]


def test_each_old_name_warns_naming_its_replacement() -> None:
    warnings = names.deprecation_warnings({"release": "r1", "purge": True, "topology": "pd"})
    assert warnings == [
        "'release' is deprecated and will be removed in the release after next: use 'dsv4_rollback_release' instead",
        "'purge' is deprecated and will be removed in the release after next: use 'dsv4_stop_purge' instead"]
    both = names.deprecation_warnings({"suite": "smoke", "dsv4_isolate_suite": "needle"})
    assert both == ["'suite' is deprecated and will be removed in the release after next: use 'dsv4_isolate_suite' "
                    "instead (both are set; 'dsv4_isolate_suite' wins)"]


def test_every_new_name_follows_the_scheme_and_is_read_by_a_role() -> None:
    roles = " ".join(p.read_text() for p in (REPO / "roles").rglob("*.yml"))
    for new in set(names.DEPRECATED_ALIASES.values()):
        assert new in names.PLAYBOOK_INPUTS, new
    for new, what in names.PLAYBOOK_INPUTS.items():
        playbook = what.split(":")[0]
        assert new.startswith("dsv4_"), new
        assert new in roles, f"{new} is documented as an input of {playbook} but no role reads it"
    for old, new in names.DEPRECATED_ALIASES.items():
        assert f"{old} | default" in roles, f"no role falls back to the old name {old} of {new}"
    assert names.known_names() >= set(names.DEPRECATED_ALIASES) | set(names.PLAYBOOK_INPUTS)
