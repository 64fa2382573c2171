"""Engine venvs on a host (module_utils.engines): a venv is pruned only when we built it and no release left
records it; pip's failures are said in the operator's words (field, fix)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.module_utils import engines


def venv(root: Path, name: str, ours: bool = True) -> Path:
    path = root / "engines" / name
    (path / "bin").mkdir(parents=True)
    if ours:
        (path / engines.MARKER).write_text("{}")
    return path


def release(root: Path, name: str, venv_path: Path | None) -> None:
    folder = root / "releases" / name
    folder.mkdir(parents=True)
    if venv_path is not None:
        (folder / engines.ENGINE_FILE).write_text(json.dumps({"sglang": "0.5.23", "venv": str(venv_path)}))


def test_prune_keeps_what_a_release_records_and_what_we_did_not_build(tmp_path: Path) -> None:
    used, unused, foreign = venv(tmp_path, "sglang-a"), venv(tmp_path, "sglang-b"), venv(tmp_path, "x", ours=False)
    (tmp_path / "engines" / "link").symlink_to(unused)
    release(tmp_path, "r1", used)
    release(tmp_path, "r2", None)
    assert engines.prune(str(tmp_path)) == [str(unused)]
    assert used.exists() and foreign.exists() and not unused.exists()
    assert engines.prune(str(tmp_path)) == []


def test_prune_without_engines_is_a_no_op(tmp_path: Path) -> None:
    assert engines.prune(str(tmp_path)) == []


def record(tmp_path: Path, **more: object) -> dict:
    path = str(tmp_path / "engines" / "sglang-0.5.23-x")
    return {"sglang": "0.5.23", "venv": path, "python": f"{path}/bin/python", "requirements": ["sglang==0.5.23"],
            "index": None, "wheelhouse": None, "base_python": None, **more}


def test_a_missing_wheelhouse_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    rec = record(tmp_path, wheelhouse=str(tmp_path / "none"))
    with pytest.raises(engines.EngineError, match=r"engine.wheelhouse .*/none is not a folder on this host; fix: "):
        engines.install(str(tmp_path), rec, getpass.getuser())
    assert not (tmp_path / "engines").exists()


def test_an_unknown_service_user_is_named(tmp_path: Path) -> None:
    with pytest.raises(engines.EngineError, match="service_user: no user 'no-such-user-x' on this host"):
        engines.install(str(tmp_path), record(tmp_path, wheelhouse=str(tmp_path)), "no-such-user-x")


@pytest.mark.parametrize(("output", "said"), [
    ("ERROR: No matching distribution found for sglang==0.5.99",
     "engine: sglang==0.5.99 is not in the index https://pypi.example/simple; fix: put its wheel there"),
    ("WARNING: Retrying ... NewConnectionError(...): Failed to establish a new connection\n"
     "ERROR: No matching distribution found for sglang==0.5.23",
     "engine.index https://pypi.example/simple cannot be reached from this host; fix: check the URL"),
    ("ERROR: something else entirely", "engine: pip could not install sglang==0.5.23 from the index "
                                      "https://pypi.example/simple: ERROR: something else entirely"),
])
def test_pip_failures_are_said_in_the_operators_words(tmp_path: Path, output: str, said: str) -> None:
    assert engines._pip_problem(record(tmp_path, index="https://pypi.example/simple"), output).startswith(said)


def test_complete_needs_our_marker_for_the_same_requirements(tmp_path: Path) -> None:
    rec = record(tmp_path)
    path = Path(rec["venv"])
    path.mkdir(parents=True)
    assert not engines.complete(rec["venv"], rec)  # half-built: no marker
    (path / engines.MARKER).write_text(json.dumps({**rec, "requirements": ["sglang==0.5.22"]}))
    assert not engines.complete(rec["venv"], rec)
    (path / engines.MARKER).write_text(json.dumps(rec))
    assert engines.complete(rec["venv"], rec)
