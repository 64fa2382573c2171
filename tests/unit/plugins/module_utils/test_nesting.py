"""An install root nested in another deployment's (or holding one) is refused by the
install before anything is written; the deployment's own slot is the one nesting allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import nesting
from dsv4deploy.rollout.slot import SLOT_DIR
from dsv4deploy.spec import SpecError, load_spec
from dsv4deploy.spec.values import SLOT_DIR as SPEC_SLOT_DIR
from tests.unit.plugins.modules.test_dsv4_host_releases import release_files
from tests.unit.plugins.runner import run_module
from tests.unit.spec.test_hostile_spec import base


def deploy(root: Path, tmp_path: Path, release_id: str = "r1") -> dict:
    return run_module("dsv4_host_releases", tmp_path, install_root=str(root), state="present",
                      release_id=release_id, files=release_files())


def test_the_slot_name_is_the_rollouts() -> None:
    assert nesting.SLOT_DIR == SPEC_SLOT_DIR == SLOT_DIR


@pytest.mark.parametrize("inner", ["slot-b/x", "sub", "a/b/c"])
def test_a_root_inside_another_deployment_is_refused_and_nothing_is_written(tmp_path: Path, inner: str) -> None:
    outer = tmp_path / "opt" / "dsv4deploy"
    assert "failed" not in deploy(outer, tmp_path)
    out = deploy(outer / inner, tmp_path)
    where = f"the blue_green slot {outer}/slot-b of" if inner.startswith("slot-b/") else "the install root of"
    assert out["failed"] and f"inside {where} the deployment at {outer}" in out["msg"], out
    assert "Fix: choose an install_root outside" in out["msg"]
    assert not (outer / inner).exists() or not any((outer / inner).iterdir())


def test_a_root_that_holds_another_deployment_is_refused(tmp_path: Path) -> None:
    # Vice versa: the later, outer deployment would stop and purge the inner one as its own.
    inner = tmp_path / "opt" / "dsv4deploy" / "team" / "a"
    assert "failed" not in deploy(inner, tmp_path)
    out = deploy(tmp_path / "opt" / "dsv4deploy", tmp_path)
    assert out["failed"] and f"holds the deployment at {inner}" in out["msg"], out
    assert not (tmp_path / "opt" / "dsv4deploy" / "releases").exists()


def test_a_root_reached_through_a_link_into_another_deployment_is_refused(tmp_path: Path) -> None:
    outer = tmp_path / "opt" / "dsv4deploy"
    assert "failed" not in deploy(outer, tmp_path)
    (outer / "team").mkdir()
    (tmp_path / "link").symlink_to(outer / "team")
    out = deploy(tmp_path / "link" / "x", tmp_path)
    assert out["failed"] and f"the deployment at {outer}" in out["msg"], out


def test_the_deployments_own_slot_and_siblings_install(tmp_path: Path) -> None:
    root = tmp_path / "opt" / "dsv4deploy"
    assert "failed" not in deploy(root, tmp_path)
    assert "failed" not in deploy(root / SLOT_DIR, tmp_path)  # blue_green's other slot
    assert "failed" not in deploy(root, tmp_path, "r2")  # its slot is not another deployment
    assert "failed" not in deploy(tmp_path / "opt" / "dsv4deploy-b", tmp_path)
    assert nesting.nesting_problem(str(root)) is None


def test_an_inventory_root_named_like_a_slot_is_refused_naming_host_and_fix() -> None:
    common, hosts = base()
    hosts["gpu1"]["install_root"] = "/opt/dsv4deploy/slot-b"
    with pytest.raises(SpecError) as err:
        load_spec(common, hosts)
    [problem] = err.value.problems
    assert (problem.field, problem.host) == ("install_root", "gpu1") and "/opt/dsv4deploy-b" in problem.fix
