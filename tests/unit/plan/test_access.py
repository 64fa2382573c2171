"""Preflight for what systemd will need: the needs the plan derives from the units, and the host
module's verdict on real files (permissions judged for a given user, the unit's sandbox applied)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import access as mod
from dsv4deploy.plan import access, make_plan
from tests.golden.fixture_specs import pd_spec

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "pd-systemd" / "units"
PRIVATE_TMP = access.hidden_paths(access.unit_settings((GOLDEN / "sglang-dsv4-decode.service").read_text()))


def test_the_units_sandbox_hides_tmp_from_every_service():
    for unit in GOLDEN.glob("*.service"):
        hidden = access.hidden_paths(access.unit_settings(unit.read_text()))
        assert set(hidden) == {"/tmp", "/var/tmp"}, unit.name  # the router's ProtectHome is read-only
        assert "PrivateTmp=yes" in hidden["/tmp"]


def test_hidden_paths_read_protect_home_and_inaccessible_paths():
    settings = access.unit_settings("[Unit]\nPrivateTmp=yes\n[Service]\nProtectHome=tmpfs\n"
                                    "InaccessiblePaths=-/srv/secret /data\n")
    hidden = access.hidden_paths(settings)
    assert "/tmp" not in hidden  # PrivateTmp outside [Service] does not count
    assert hidden["/home"] == "ProtectHome=tmpfs" and hidden["/root"] == "ProtectHome=tmpfs"
    assert hidden["/srv/secret"] == "InaccessiblePaths=-/srv/secret" and "/data" in hidden


def test_the_plan_lists_each_hosts_needs_once_per_path():
    spec = pd_spec(server_launcher=["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"])
    host = make_plan(spec, ["gpu1"])["hosts"]["gpu1"]
    assert host["service_user"] == "sglang"
    needs = {(n["path"], n["need"]): n for n in host["access"]}
    launcher = needs[("/opt/sglang/venv/bin/python", "exec")]
    assert launcher["what"] == "server_launcher[0] of sglang-dsv4-decode, sglang-dsv4-prefill"
    assert launcher["no_dac_override"]  # CapabilityBoundingSet= : not even root may ignore modes
    assert needs[("python3", "exec")]["what"] == "router_launcher[0] of sglang-dsv4-router"
    assert "/usr/bin" in needs[("python3", "exec")]["search_path"]
    assert needs[("/etc/dsv4deploy/api_key", "secret")]["what"].startswith("api_key.file of ")
    assert ("/opt/dsv4deploy", "search") in needs


def test_a_key_the_deploy_writes_itself_is_not_checked_beforehand():
    spec = pd_spec(api_key={"vault_var": "vault_dsv4_key"})
    needs = make_plan(spec, ["gpu1"])["hosts"]["gpu1"]["access"]
    assert not [n for n in needs if n["need"] == "secret"]


# -- the host module, on real files ---------------------------------------------------------------

OTHER_UID = 4242  # not the test runner, owns nothing here


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder everyone may enter, outside /tmp (pytest's own tmp folder is private to its user)."""
    path = Path(tempfile.mkdtemp(prefix="dsv4-access-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    for child in path.rglob("*"):
        if child.is_dir() and not child.is_symlink():
            child.chmod(0o700)
    shutil.rmtree(path)


def who(uid: int = OTHER_UID, name: str = "svc") -> mod.Who:
    user = mod.Who.__new__(mod.Who)
    user.name, user.exists, user.create, user.uid, user.gids = name, True, False, uid, set()
    return user


def need(path: Path | str, kind: str = "exec", **extra) -> dict:
    return {"path": str(path), "need": kind, "what": "server_launcher[0] of sglang-dsv4-decode", "hidden": {},
            "search_path": [], "no_dac_override": True, **extra}


def executable(path: Path, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


def test_a_launcher_under_tmp_is_invisible_to_the_unit(base):
    launcher = executable(Path(tempfile.mkdtemp(dir="/tmp")) / "python")
    try:
        [problem] = mod.check_need(need(launcher, hidden=PRIVATE_TMP), who())
    finally:
        launcher.unlink()
        launcher.parent.rmdir()
    assert f"{launcher} (server_launcher[0] of sglang-dsv4-decode) is invisible to the unit: PrivateTmp=yes" in problem
    assert "fix: install it outside that folder" in problem


def test_a_link_into_tmp_is_judged_by_where_it_leads(base):
    target = executable(Path(tempfile.mkdtemp(dir="/tmp")) / "python")
    (base / "python").symlink_to(target)
    try:
        # Only /tmp here: the link itself lives under /var/tmp, which the real units hide as well.
        [problem] = mod.check_need(need(base / "python", hidden={"/tmp": PRIVATE_TMP["/tmp"]}), who())
    finally:
        target.unlink()
        target.parent.rmdir()
    assert f"it resolves to {target}" in problem and "PrivateTmp=yes" in problem


def test_a_launcher_the_user_cannot_execute_names_the_mode_and_the_fix(base):
    launcher = executable(base / "python", 0o750)
    [problem] = mod.check_need(need(launcher), who())
    assert "user svc cannot execute it" in problem and "0750" in problem
    assert f"fix: chmod o+rx {launcher}" in problem
    assert mod.check_need(need(executable(base / "ok", 0o755)), who()) == []


def test_a_folder_the_user_cannot_enter_is_named(base):
    private = base / "private"
    private.mkdir(mode=0o700)
    launcher = executable(private / "python")
    [problem] = mod.check_need(need(launcher), who())
    assert f"user svc cannot enter {private}" in problem and f"fix: chmod o+x {private}" in problem


def test_a_missing_launcher_and_a_bare_name_not_on_the_units_path(base):
    [missing] = mod.check_need(need(base / "nope"), who())
    assert "No such file or directory" in missing and "fix: install it" in missing
    [bare] = mod.check_need(need("no-such-python", search_path=[str(base)]), who())
    assert f"not found on the unit's PATH {base}" in bare
    executable(base / "python9")
    assert mod.check_need(need("python9", search_path=[str(base)]), who()) == []


def test_the_install_root_may_not_exist_yet_but_its_parents_must_be_enterable(base):
    assert mod.check_need(need(base / "opt" / "dsv4deploy", "search"), who()) == []
    (base / "locked").mkdir(mode=0o700)
    [problem] = mod.check_need(need(base / "locked" / "dsv4deploy", "search"), who())
    assert f"cannot enter {base / 'locked'}" in problem


def test_the_key_file_must_be_the_service_users_alone(base):
    me = who(os.getuid(), "svc")
    key = base / "api_key"
    key.write_text("sk-1\n")
    key.chmod(0o400)
    assert mod.check_need(need(key, "secret"), me) == []
    key.chmod(0o644)
    [shared] = mod.check_need(need(key, "secret"), me)
    assert "readable by everyone, not only by svc" in shared and f"fix: chown svc {key} && chmod 0400 {key}" in shared
    key.chmod(0o600)
    [unreadable] = mod.check_need(need(key, "secret"), who())
    assert "user svc cannot read it" in unreadable and "0600" in unreadable


def test_a_user_still_to_be_created_cannot_own_the_key_yet(base):
    key = base / "api_key"
    key.write_text("sk-1\n")
    user = who()
    user.exists, user.create = False, True
    [problem] = mod.check_need(need(key, "secret"), user)
    assert "does not exist yet, so it cannot own the key" in problem and "vault_var" in problem


def test_an_rdma_worker_needs_each_named_ib_device_on_its_own_host() -> None:
    from dsv4deploy.inventory import spec_from_inventory
    from dsv4deploy.inventory.starter import examples_dir

    spec = spec_from_inventory([str(examples_dir() / "multi-node-pd")], [])
    plan = make_plan(spec, ["gpu1", "gpu2", "gpu3"])
    devices = {h: [(n["path"], n["what"]) for n in plan["hosts"][h]["access"] if n["need"] == "device"]
               for h in ("gpu1", "gpu2", "gpu3")}
    assert devices == {
        "gpu1": [("/sys/class/infiniband/mlx5_0", "ib_device mlx5_0 of sglang-dsv4-prefill")],
        "gpu2": [("/sys/class/infiniband/mlx5_0", "ib_device mlx5_0 of sglang-dsv4-decode")],
        "gpu3": [("/sys/class/infiniband/mlx5_0", "ib_device mlx5_0 of sglang-dsv4-decode-rank1")]}
    # Without transport: rdma (the seeds' specs), no device is asked for.
    assert not [n for n in make_plan(pd_spec(), ["gpu1"])["hosts"]["gpu1"]["access"] if n["need"] == "device"]


def test_a_missing_ib_device_is_named_with_those_the_host_has(base):
    (base / "mlx5_1").mkdir()
    assert mod.check_need(need(base / "mlx5_1", "device"), who()) == []
    [problem] = mod.check_need(need(base / "mlx5_0", "device", what="ib_device mlx5_0 of sglang-dsv4-decode"), who())
    assert problem == (f"{base}/mlx5_0 (ib_device mlx5_0 of sglang-dsv4-decode): no such InfiniBand device on this "
                       "host (it has mlx5_1); fix: set ib_device to a device the host has, or transport: tcp")
