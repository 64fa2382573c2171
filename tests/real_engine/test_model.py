"""The hand-built test model itself, offline: built in seconds and byte-identical, recalling the needle gate's
prompts with sglang's arithmetic (its own torch forward pass), broken by a RoPE base it was not built for, and
refused, loudly, when the gate's word pools no longer fit the construction. No server is started."""

from __future__ import annotations

import filecmp
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.simhost import REPO
from tests.real_engine.enginehost import engine_python

pytestmark = pytest.mark.real_engine

ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def engine(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(engine_python()), "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def test_the_model_is_built_in_seconds_and_byte_identical(tiny_model: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    again = tmp_path / "model"
    subprocess.run([str(engine_python()), "-m", "tests.real_engine.model", str(again)], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=300, env=ENV)
    seconds = round(time.monotonic() - started, 1)
    names = sorted(p.name for p in tiny_model.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names, names
    match, mismatch, errors = filecmp.cmpfiles(tiny_model, again, names, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
    print(f"test model built again in {seconds} s (process start included), {len(match)} files byte-identical")


RECALL = """
from pathlib import Path
from tests.real_engine.testmodel.reference import Reference
from tests.real_engine.testmodel.vocab import haystack_module
hs = haystack_module()
for theta in (None, 20000.0):
    model = Reference(Path({folder!r}), rope_theta=theta)
    hays = [hs.build_haystack(n, d, seed=21, trial=t, chars_per_token=4.4)
            for n, d, t in ((300, 0.1, 0), (700, 0.9, 1), (700, 0.5, 2))]
    print(theta, repr(model.answer("Say OK")), sum(h.value in model.answer(h.content) for h in hays), len(hays))
"""


def test_it_recalls_the_gates_prompts_offline_and_not_under_twice_its_rope_base(tiny_model: Path) -> None:
    proc = engine(RECALL.format(folder=str(tiny_model)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines == ["None ' OK' 3 3", "20000.0 ' OK' 0 3"], proc.stdout


BROKEN = """
from tests.real_engine.testmodel import vocab
hs = vocab.haystack_module()
# A first name that is also a word of the filler ("Every autumn the village ..."): a value could then start
# with a token found elsewhere in the prompt.
hs.FIRST_NAMES = (*hs.FIRST_NAMES, "Every")
tokenizer = vocab.train_tokenizer()
try:
    vocab.check_premise(tokenizer, vocab.vocab_of(tokenizer))
except vocab.PremiseError as error:
    print("refused:", error)
"""


def test_the_build_refuses_word_pools_that_break_the_construction() -> None:
    proc = engine(BROKEN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.match(r"refused: \d+ tokens that can start a value in one prompt", proc.stdout), proc.stdout
