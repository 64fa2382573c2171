"""The docs and the code say the same: every spec and gate variable is documented, every file the docs
name exists, and the facts the docs state (key file mode, heatmap file, router stop time) are the code's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from pydantic import BaseModel

from dsv4deploy import report, spec
from dsv4deploy.gates.runner import GateSettings
from dsv4deploy.plan.services import build_services

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from fixture_specs import pd_spec

REPO = Path(__file__).resolve().parents[2]
VARIABLES = REPO / "docs" / "variables.md"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
if (REPO / "CONTRIBUTING.md").exists():
    DOCS.append(REPO / "CONTRIBUTING.md")


def model_fields(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """Every field name of `model` and of the models its fields hold, recursively."""
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    names = set(model.model_fields)
    for info in model.model_fields.values():
        for inner in _models_in(info.annotation):
            names |= model_fields(inner, seen)
    return names


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def test_every_spec_and_gate_variable_is_documented() -> None:
    text = VARIABLES.read_text()
    documented = set(re.findall(r"[a-z_][a-z0-9_]*", text))
    fields = model_fields(spec.Deployment) | model_fields(spec.HostSpec) | set(GateSettings.model_fields)
    for worker in (spec.PrefillSpec, spec.DecodeSpec, spec.CombinedSpec):
        fields |= model_fields(worker)
    assert sorted(fields - documented) == [], f"not documented in {VARIABLES.relative_to(REPO)}"


def test_every_role_input_is_documented() -> None:
    # The inventory variables the roles read (their argument specs' non-prefixed options).
    text = VARIABLES.read_text()
    missing = []
    for specs in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(specs.read_text())["argument_specs"].values():
            missing += [name for name in entry.get("options", {})
                        if not name.startswith(("dsv4_", "__")) and f"`{name}`" not in text]
    assert sorted(set(missing)) == []


# A path in backticks under one of the repository's own folders (no placeholders in it).
REPO_PATH = re.compile(r"`((?:inventory|dsv4deploy|templates|playbooks|roles|docs|tests|bench|scripts|plugins)/"
                       r"[A-Za-z0-9_./-]+)`")


def test_every_file_the_docs_name_exists() -> None:
    missing = []
    for doc in DOCS:
        for path in REPO_PATH.findall(doc.read_text()):
            if not (REPO / path.rstrip("/")).exists():
                missing.append(f"{doc.relative_to(REPO)}: {path}")
    assert missing == []


def test_the_heatmap_files_the_docs_name_are_the_reports() -> None:
    from dsv4deploy.isolate.report import HEATMAPS_NAME

    for doc in DOCS:
        named = set(re.findall(r"[A-Za-z0-9_-]*heatmaps?\.png", doc.read_text()))
        assert named <= {report.HEATMAP_NAME, HEATMAPS_NAME}, doc.name
    assert report.HEATMAP_NAME in (REPO / "README.md").read_text()


def test_the_key_file_mode_the_docs_state_is_the_one_written() -> None:
    tasks = yaml.safe_load((REPO / "roles" / "dsv4_release" / "tasks" / "secrets.yml").read_text())
    (written,) = [t["ansible.builtin.copy"]["mode"] for t in tasks
                  if str(t.get("ansible.builtin.copy", {}).get("dest", "")).endswith("secrets/api_key")]
    stated = []
    for doc in DOCS:
        text = " ".join(doc.read_text().split())
        stated += [(doc.name, mode) for mode in re.findall(r"secrets/api_key`?[^.;]{0,60}?\b(0[0-7]{3})\b", text)]
    assert stated and all(mode == written for _, mode in stated), stated


def test_the_router_stop_time_the_docs_state_is_the_units() -> None:
    (router,) = [s for s in build_services(pd_spec("systemd")) if s.role == "router"]
    assert f"`TimeoutStopSec={router.stop_timeout_s}`" in VARIABLES.read_text()
    assert f"({router.stop_timeout_s} by default)" in (REPO / "docs" / "interfaces.md").read_text()


def fenced_blocks(text: str) -> list[str]:
    """The fenced code blocks of a Markdown text, in order."""
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)


def test_the_readmes_first_two_blocks_are_the_quickstart_and_the_test_command() -> None:
    first, second = fenced_blocks((REPO / "README.md").read_text())[:2]
    assert first.count("\n") == 1 and "dsv4deploy init site --example local" in first
    assert "ansible-playbook dsv4.deploy.deploy -i site -e topology=pd" in first
    assert second == "./scripts/setup.sh && .venv/bin/python -m pytest -n 3 --dist loadfile --reruns 1\n"


def quickstart_extras() -> set[str]:
    """The extras the README's first command installs."""
    first = fenced_blocks((REPO / "README.md").read_text())[0]
    (extras,) = re.findall(r'pip install -q "\$PWD\[([a-z,]+)\]"', first)
    return set(extras.split(","))


def test_the_quickstart_installs_what_a_whole_report_needs() -> None:
    # The first report a user sees has its heatmap: matplotlib comes with the `plot` extra.
    project = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^plot = \["matplotlib', project, re.M)
    assert quickstart_extras() >= {"sim", "plot"}


def test_the_docs_for_users_carry_no_internal_references() -> None:
    # A user reads "(issue 21, deliverable 3)" or a path outside the repository as noise they cannot follow.
    internal = re.compile(r"\bissue \d+\b|\bdeliverable \d+\b|<!-- section|\.\./shared/|GateSettings")
    found = [(doc.name, m.group(0)) for doc in DOCS for m in internal.finditer(doc.read_text(encoding="utf-8"))]
    assert not found, found


def test_the_readme_says_that_e_overrides_the_inventory_right_after_the_quickstart() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    after = text.split("```", 2)[2].split("```bash", 1)[0]  # between the quickstart and the contributors' block
    assert "`-e` overrides the inventory" in after


def test_every_table_in_the_docs_is_one_block_with_as_many_cells_per_row() -> None:
    for doc in DOCS:
        rows: list[int] = []
        for number, line in enumerate([*doc.read_text(encoding="utf-8").splitlines(), ""], 1):
            if line.startswith("|"):
                rows.append(len(re.findall(r"(?<!\\)\|", line)))
                assert rows[0] == rows[-1], f"{doc.name}:{number}: {rows[-1]} cells' bars, the table has {rows[0]}"
            elif rows:
                assert len(rows) >= 2, f"{doc.name}:{number - 1}: a table row alone (broken table)"
                rows = []
