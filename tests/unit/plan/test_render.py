"""Rendering: golden files, determinism, the manifest, escaping. UPDATE_GOLDEN=1 rewrites the golden files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dsv4deploy.plan import render
from dsv4deploy.plan.render import MANAGED_HEADER, RenderError, content_hash, render_all, render_release
from dsv4deploy.plan.services import build_services

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
sys.path.insert(0, str(GOLDEN))
from fixture_specs import combined_spec, pd_spec, xpyd_spec  # noqa: E402

CASES = {
    "pd-systemd": lambda: pd_spec("systemd"),
    "pd-supervisor": lambda: pd_spec("supervisor"),
    "combined-systemd": lambda: combined_spec("systemd"),
    "combined-supervisor": lambda: combined_spec("supervisor"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    files = render_release(CASES[case](), "gpu1")
    folder = GOLDEN / case
    if os.environ.get("UPDATE_GOLDEN") == "1":
        for old in sorted(folder.rglob("*"), reverse=True) if folder.exists() else []:
            old.unlink() if old.is_file() else old.rmdir()
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text, encoding="utf-8")
    on_disk = {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
               for p in sorted(folder.rglob("*")) if p.is_file()}
    assert sorted(on_disk) == sorted(files), f"files differ; rerun with UPDATE_GOLDEN=1 if intended ({case})"
    for rel, text in files.items():
        assert text == on_disk[rel], f"{case}/{rel} differs from the golden file; UPDATE_GOLDEN=1 to accept"


def test_release_layout():
    pd = render_release(pd_spec(), "gpu1")
    assert sorted(pd) == [
        "bin/serve-sglang-dsv4-decode.sh", "bin/serve-sglang-dsv4-prefill.sh", "bin/serve-sglang-dsv4-router.sh",
        "manifest.json", "services.json", "spec.json", "units/sglang-dsv4-decode.service",
        "units/sglang-dsv4-prefill.service", "units/sglang-dsv4-router.service"]
    sup = render_release(combined_spec("supervisor"), "gpu1")
    assert sorted(sup) == ["bin/serve-sglang-dsv4.sh", "manifest.json", "services.json", "spec.json",
                           "supervisor/sglang-dsv4.conf"]
    assert render.file_mode("bin/serve-sglang-dsv4.sh") == 0o755 and render.file_mode("spec.json") == 0o644


def test_deterministic_and_hash_tracks_content():
    a, b = render_release(pd_spec(), "gpu1"), render_release(pd_spec(), "gpu1")
    assert a == b
    manifest = json.loads(a["manifest.json"])
    assert manifest["content_hash"] == content_hash(a)
    assert set(manifest["files"]) == set(a) - {"manifest.json"}
    changed = render_release(pd_spec(index_topk=512), "gpu1")
    assert json.loads(changed["manifest.json"])["content_hash"] != manifest["content_hash"]


def test_render_all_covers_hosts_in_use():
    spec = xpyd_spec()
    out = render_all(spec)
    assert sorted(out) == ["gpu1", "gpu2", "gpu3"]
    assert "units/sglang-dsv4-router.service" in out["gpu1"]
    assert sorted(p for p in out["gpu3"] if p.startswith("units/")) == [
        "units/sglang-dsv4-decode-2.service", "units/sglang-dsv4-decode.service"]


def test_scripts_and_units_shape():
    files = render_release(pd_spec(), "gpu1")
    for name in ("prefill", "decode", "router"):
        script = files[f"bin/serve-sglang-dsv4-{name}.sh"]
        assert script.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in script
        assert "\nexec " in script and MANAGED_HEADER in script
        unit = files[f"units/sglang-dsv4-{name}.service"]
        for line in ("Type=exec", "Restart=on-failure", "KillMode=mixed", "NoNewPrivileges=yes", "User=sglang",
                     "WorkingDirectory=/opt/dsv4deploy/current"):
            assert f"\n{line}\n" in unit
        assert MANAGED_HEADER in unit
    server = files["units/sglang-dsv4-prefill.service"]
    # GPU and RDMA kept: devices open, JIT allowed, pinned memory unlimited, pidfd_getfd (NCCL) let through.
    assert "\nPrivateDevices=" not in server and "\nMemoryDenyWriteExecute=" not in server
    for line in ("LimitMEMLOCK=infinity", "ReadOnlyPaths=/opt/dsv4deploy", "ProtectHome=read-only",
                 "ReadWritePaths=-/home/sglang", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                 "SystemCallFilter=pidfd_getfd"):
        assert f"\n{line}\n" in server, line
    assert "@debug" in server and "@privileged" in server
    router = files["units/sglang-dsv4-router.service"]
    assert "LimitMEMLOCK" not in router
    for line in ("ProtectProc=invisible", "ProcSubset=pid", "PrivateMounts=yes"):
        assert f"\n{line}\n" in router, line


def test_supervisor_program():
    conf = render_release(pd_spec("supervisor"), "gpu1")["supervisor/sglang-dsv4-router.conf"]
    for line in ("[program:sglang-dsv4-router]", "command=/opt/dsv4deploy/current/bin/serve-sglang-dsv4-router.sh",
                 "autostart=false", "autorestart=unexpected", "stopasgroup=false", "killasgroup=true",
                 "redirect_stderr=true", "stdout_logfile=/opt/dsv4deploy/logs/sglang-dsv4-router.log",
                 "priority=20", "user=sglang"):
        assert f"\n{line}\n" in conf


def test_service_user_is_always_rendered():
    assert "\nuser=sglang\n" in render_release(combined_spec("supervisor"), "gpu1")["supervisor/sglang-dsv4.conf"]
    assert "\nUser=sglang\n" in render_release(combined_spec(), "gpu1")["units/sglang-dsv4.service"]


def test_odd_install_root_is_escaped():
    spec = combined_spec()
    root = "/srv/my 100% root"
    spec = spec.model_copy(update={"hosts": {"gpu1": spec.hosts["gpu1"].model_copy(update={"install_root": root})}})
    files = render_release(spec, "gpu1")
    # Not the default install root: the unit's name carries its last folder's letters and digits.
    unit = files["units/sglang-dsv4_my100root.service"]
    assert 'ExecStart="/srv/my 100%% root/current/bin/serve-sglang-dsv4_my100root.sh"' in unit
    assert "\nWorkingDirectory=/srv/my 100%% root/current\n" in unit
    assert "cd '/srv/my 100% root/current'" in files["bin/serve-sglang-dsv4_my100root.sh"]
    spec = spec.model_copy(update={"hosts": {"gpu1": spec.hosts["gpu1"].model_copy(
        update={"service_manager": "supervisor"})}})
    # supervisord expands a log path twice, so '%%' would come back as '%': refused (the spec refuses
    # such an install_root first; the renderer refuses it on its own too).
    with pytest.raises(RenderError, match="expands twice"):
        render_release(spec, "gpu1")


@pytest.mark.parametrize("root", ["/srv/a ;b", "/srv/a #b", "/srv/a\tb"])
def test_supervisor_inline_comments_are_refused(root):
    spec = combined_spec("supervisor")
    spec = spec.model_copy(update={"hosts": {"gpu1": spec.hosts["gpu1"].model_copy(update={"install_root": root})}})
    with pytest.raises(RenderError):
        render_release(spec, "gpu1")


def test_host_name_with_a_newline_is_refused_by_the_renderer():
    # The spec refuses such a name first; the serve script's comment must not carry it either.
    (svc,) = build_services(combined_spec())
    svc = svc.model_copy(update={"host": "gpu1\ntouch /tmp/pwned"})
    with pytest.raises(RenderError, match="control character"):
        render.render_service(render.environment(), svc)


def test_control_characters_and_bad_env_names_refused():
    spec = combined_spec()
    bad_root = spec.model_copy(update={"hosts": {"gpu1": spec.hosts["gpu1"].model_copy(
        update={"install_root": "/opt/x\ny"})}})
    with pytest.raises(RenderError, match="control character"):
        render_release(bad_root, "gpu1")
    with pytest.raises(RenderError, match="not a valid name"):
        # The spec refuses such a name first; the renderer must refuse it on its own too.
        render_release(combined_spec().model_copy(update={"server_env": {"BAD-NAME": "1"}}), "gpu1")


def test_spec_json_has_no_key_and_is_stable():
    files = render_release(xpyd_spec(), "gpu1")
    data = json.loads(files["spec.json"])
    assert data["host"] == "gpu1" and data["deployment"]["api_key"] == {"file": None, "vault_var": "vault_dsv4_api_key"}
    assert files["spec.json"] == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_supervisord_reads_the_programs(tmp_path):
    supervisor_options = pytest.importorskip("supervisor.options", reason="supervisor not installed")
    import getpass

    spec = pd_spec("supervisor")
    spec = spec.model_copy(update={"hosts": {"gpu1": spec.hosts["gpu1"].model_copy(
        update={"service_user": getpass.getuser(), "install_root": str(tmp_path)})}})
    (tmp_path / "logs").mkdir()
    for rel, text in render_release(spec, "gpu1").items():
        if rel.startswith("supervisor/"):
            (tmp_path / Path(rel).name).write_text(text)
    (tmp_path / "supervisord.conf").write_text(
        f"[supervisord]\nlogfile={tmp_path}/s.log\npidfile={tmp_path}/s.pid\n"
        f"[include]\nfiles={tmp_path}/sglang-*.conf\n")
    opts = supervisor_options.ServerOptions()
    opts.configfile = str(tmp_path / "supervisord.conf")
    opts.process_config(do_usage=False)
    groups = {g.name: g for g in opts.process_group_configs}
    assert sorted(groups) == ["sglang-dsv4-decode", "sglang-dsv4-prefill", "sglang-dsv4-router"]
    router = groups["sglang-dsv4-router"].process_configs[0]
    assert groups["sglang-dsv4-router"].priority == 20 and groups["sglang-dsv4-prefill"].priority == 10
    assert router.command == f"{tmp_path}/current/bin/serve-sglang-dsv4-router.sh"
    assert router.autostart is False and not router.stopasgroup and router.killasgroup
    assert router.stdout_logfile == f"{tmp_path}/logs/sglang-dsv4-router.log"
