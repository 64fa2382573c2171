"""Record what a server answers, from its first second to ready and after: the same requests for the
simulator and the real sglang, so the side-by-side test can compare them."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from dsv4deploy.gates.haystack import build_haystack
from tests.integration.simhost import SimHost

REPO = Path(__file__).resolve().parents[2]


def recall_questions(count: int = 60, tokens: int = 300) -> list[dict[str, str]]:
    """Questions with exact answers that the test model can answer: needle prompts of ``tokens`` tokens at
    spread depths whose planted value is a number (the answer the accuracy gate reads). The gate appends
    its instruction line; the model copies the number (tests/real_engine/testmodel/vocab.py)."""
    out: list[dict[str, str]] = []
    trial = 0
    while len(out) < count:
        hay = build_haystack(tokens, (trial % 9) / 8, seed=23, trial=trial, chars_per_token=4.4)
        trial += 1
        # A number that repeats three of its own digits in a row cannot be copied unambiguously (a tie).
        if hay.value.isdigit() and len({hay.value[i:i + 3] for i in range(4)}) == 4:
            out.append({"question": hay.content, "answer": hay.value})
    return out


def recall_questions_file() -> Path:
    """recall_questions() as the accuracy gate's JSONL, under build/ (the same file each run)."""
    path = REPO / "build" / "real-engine" / "recall-questions.jsonl"
    text = "".join(json.dumps(q) + "\n" for q in recall_questions())
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


# The gates of the tier's first combined deploy, and of the simulator's beside it: readiness, config and
# smoke, the needle (the test model recalls by construction: a grid of 2 lengths x 2 depths, a cell
# passing on 4 of 5 trials), parity (its record of the fixed prompt set's answers is what a later
# release's config gate asks again, to show an override applied or not), then the perf gate on a small
# streamed load (2 cores, shared): 4 requests, 2 at once, 8 output tokens each. Its tolerances are
# generous: the judgement (verify against the recorded figures), not the machine's load, is under test,
# and a loaded CI machine varies a lot. One real server start serves the needle and perf tests,
# test_combined's and test_side_by_side's. Last, the accuracy gate on questions the test model answers
# (recall_questions: 60 needle prompts of 300 tokens whose answer is a number; the construction, run
# offline by tests/real_engine/testmodel/reference.py, answers 60 of 60): judged against 0.99, it passes
# after 44 right answers in a row at its default risks.
ACCURACY = {"accuracy_questions": str(recall_questions_file()), "accuracy_count": 60, "accuracy_expected": 0.99,
            "accuracy_max_tokens": 16, "accuracy_concurrency": 2}
NEEDLE_GRID = {"needle_lengths": [300, 1500], "needle_depths": [0.25, 0.75], "needle_required_tokens": 1500,
               "needle_trials": 5, "needle_min_recalled": 4, "needle_concurrency": 2}
FIRST_DEPLOY_GATES = ["-e", json.dumps({
    "dsv4_gates_names": ["readiness", ["config", "smoke"], "needle", "parity", "perf", "accuracy"], **NEEDLE_GRID,
    **ACCURACY,
    "perf_requests": 4, "perf_concurrency": 2, "perf_prompt_tokens": 32, "perf_output_tokens": 8,
    "perf_tolerance": 4.0, "perf_ttft_tolerance": 8.0, "perf_noise_floor_s": 0.5, "perf_deadline_s": 120})]
# What the gates and operators ask a server (GET), during warm-up and once up.
PATHS = ("/health", "/health_generate", "/ready", "/model_info", "/v1/models", "/server_info")
# Bad requests and what each is: (name, method, path, JSON body).
BAD_REQUESTS = (
    ("no messages", "POST", "/v1/chat/completions", {"model": "{model}", "max_tokens": 4}),
    ("messages not a list", "POST", "/v1/chat/completions", {"model": "{model}", "messages": "hi", "max_tokens": 4}),
    ("negative max_tokens", "POST", "/v1/chat/completions",
     {"model": "{model}", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}),
    ("unknown role", "POST", "/v1/chat/completions",
     {"model": "{model}", "messages": [{"role": "nobody", "content": "hi"}], "max_tokens": 4}),
    ("generate, negative max_new_tokens", "POST", "/generate",
     {"text": "hi", "sampling_params": {"max_new_tokens": -1}}),
    ("unknown path", "GET", "/no_such_path", None),
)


@dataclass
class Poller:
    """Polls every path of `PATHS` on `url` until stopped; keeps each path's status changes."""

    url: str
    api_key: str
    seen: dict[str, list[int | None]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Poller:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, list[int | None]]:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=60)
        return self.seen

    def _run(self) -> None:
        with httpx.Client(timeout=10, headers={"Authorization": f"Bearer {self.api_key}"}) as client:
            while not self._stop.is_set():
                for path in PATHS:
                    try:
                        status: int | None = client.get(f"{self.url}{path}").status_code
                    except httpx.HTTPError:
                        status = None
                    changes = self.seen.setdefault(path, [])
                    if not changes or changes[-1] != status:
                        changes.append(status)
                time.sleep(0.3)


def warm_up_statuses(changes: list[int | None]) -> list[int]:
    """The statuses a path answered with after the port opened and before its first 200."""
    out: list[int] = []
    for status in changes:
        if status == 200:
            break
        if status is not None and status not in out:
            out.append(status)
    return out


def answers(url: str, api_key: str, model: str) -> dict[str, Any]:
    """Once up: each path's status and JSON body, and each bad request's status and body."""
    out: dict[str, Any] = {}
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as client:
        for path in PATHS:
            reply = client.get(f"{url}{path}")
            out[path] = (reply.status_code, _json(reply))
        for name, method, path, body in BAD_REQUESTS:
            payload = None if body is None else {k: (model if v == "{model}" else v) for k, v in body.items()}
            reply = client.request(method, f"{url}{path}", json=payload)
            out[name] = (reply.status_code, _json(reply))
    return out


def shape(value: Any) -> Any:
    """A JSON value's shape: the keys of objects (recursively), the type name of anything else."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def _json(reply: httpx.Response) -> Any:
    try:
        return reply.json()
    except ValueError:
        return reply.text


def observe(host: SimHost, model: str, *extra: str, timeout: float = 900) -> dict[str, Any]:
    """Deploy `host` (combined) while polling its server: what each path said during warm-up, its answers once up
    (`answers`), its start log, the deploy's report and the playbook's wall time (s)."""
    poller = Poller(host.endpoint, host.api_key).start()
    started = time.monotonic()
    try:
        proc = host.playbook("deploy.yml", *extra, timeout=timeout)
    finally:
        seen = poller.stop()
    wall = round(time.monotonic() - started, 1)
    assert proc.returncode == 0, proc.stdout[-6000:]
    log = (host.install_root / "logs" / "sglang-dsv4.log").read_text(errors="replace")  # the combined server
    return {"seen": seen, "up": answers(host.endpoint, host.api_key, model), "log": log, "report": host.report(),
            "wall_s": wall}
