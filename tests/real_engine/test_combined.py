"""The combined topology on the real sglang 0.5.23 (CPU, the hand-built test model), deployed by the tool.

In order on one host: a release is promoted by readiness, config, smoke and the needle (the test model
recalls the gate's planted values), its perf figures measured
from the client and from the real server's own ``/metrics`` histograms (``--enable-metrics`` as
rendered) and recorded, not judged (the first release); verify judges what serves against them with
the same gate; servers that cannot
start fail readiness at once with the real traceback and the good release comes back; an override the
server applies that takes the model off its RoPE base fails the needle as a true recall failure and every
host is rolled back; stop ends
every process of ours, the server's scheduler and detokenizer children included, after the request
in flight when the drain began has completed.
"""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
import yaml

from tests.integration.simhost import SimHost
from tests.real_engine.enginehost import alive, descendants, process_name, usage
from tests.real_engine.sidebyside import ACCURACY, FIRST_DEPLOY_GATES, NEEDLE_GRID

pytestmark = pytest.mark.real_engine

SERVER = "sglang-dsv4"
MODEL = "tiny-llama"


def gate(report: dict, name: str) -> dict:
    return next(g for g in report["gates"] if g["name"] == name)


def chat(host: SimHost, max_tokens: int = 8, timeout: float = 60) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say OK"}], "max_tokens": max_tokens,
            "temperature": 0}
    return httpx.post(f"{host.endpoint}/v1/chat/completions", json=body, timeout=timeout,
                      headers={"Authorization": f"Bearer {host.api_key}"})


def assert_serving(host: SimHost, release: str) -> None:
    """`release` is active and the real server answers a chat completion that finished."""
    assert host.active_release() == release
    reply = chat(host)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["message"]["content"] and choice["finish_reason"] in ("length", "stop")


@pytest.fixture(scope="module")
def engine_host(combined_first_deploy: tuple[SimHost, dict]) -> SimHost:
    """The tier's combined host (shared with test_side_by_side, which reads only its first deploy)."""
    return combined_first_deploy[0]


@pytest.fixture(scope="module")
def promoted(combined_first_deploy: tuple[SimHost, dict]) -> dict:
    """The first deploy (combined), promoted; its report."""
    observed = combined_first_deploy[1]
    return {**observed["report"], "_wall_s": observed["wall_s"]}


def test_combined_is_promoted_by_readiness_config_and_smoke(engine_host: SimHost, promoted: dict) -> None:
    assert promoted["verdict"] == "promoted"
    assert [(g["name"], g["status"]) for g in promoted["gates"]] == [
        ("readiness", "passed"), ("config", "passed"), ("smoke", "passed"), ("needle", "passed"), ("parity", "passed"),
        ("perf", "skipped"), ("accuracy", "passed")]
    assert engine_host.active_release() == promoted["release"]
    assert set(engine_host.pids()) == {SERVER}
    # The override is in the real start log and effective per the real /server_info.
    log = (engine_host.install_root / "logs" / f"{SERVER}.log").read_text(errors="replace")
    assert "'json_model_override_args': '{\"rope_theta\":20000.0}'" in log
    info = httpx.get(f"{engine_host.endpoint}/server_info", timeout=30,
                     headers={"Authorization": f"Bearer {engine_host.api_key}"}).json()
    assert json.loads(info["json_model_override_args"]) == {"rope_theta": 20000.0}
    assert (info["device"], info["version"], info["served_model_name"]) == ("cpu", "0.5.23", MODEL)
    # Smoke: the test model answers "Say OK" with " OK" (the content is not what smoke judges here).
    smoke = gate(promoted, "smoke")["evidence"]
    assert smoke["expect_ok"] is False and smoke["content"].strip() == "OK"
    print(f"combined: promoted in {promoted['_wall_s']} s (playbook wall time)")


def test_the_needle_passes_on_the_combined_server(promoted: dict) -> None:
    # The test model recalls the gate's own planted values: every cell of the grid, by the gate's k-of-n rule.
    needle = gate(promoted, "needle")
    cells = needle["evidence"]["cells"]
    assert [(c["context_tokens"], c["depth"], c["outcome"]) for c in cells] == [
        (n, d, "recalled") for n in (300, 1500) for d in (0.25, 0.75)], needle["summary"]
    assert all(c["sized"] for c in cells), [(c["context_tokens"], c["prompt_tokens"]) for c in cells]
    trials = [t for c in cells for t in c["trials"]]
    assert all(t["answer"].strip() == t["code"] for t in trials if t["recalled"]), trials
    print(f"real engine needle, combined: {len(cells)} cells, {sum(t['recalled'] for t in trials)} of {len(trials)} "
          f"trials recalled, {needle['seconds']:.1f} s; {needle['summary']}")


def test_the_accuracy_gate_passes_on_questions_the_model_answers(promoted: dict) -> None:
    # 60 needle prompts whose answer is a number, the gate's instruction line after each; the construction
    # answers all 60 offline (ACCURACY): judged against 0.99, the sequential test passes it.
    accuracy = gate(promoted, "accuracy")
    assert accuracy["status"] == "passed", accuracy["summary"]
    evidence = accuracy["evidence"]
    assert evidence["right"] == evidence["n"] >= 44, evidence
    print(f"real engine accuracy, combined: {evidence['right']} of {evidence['n']} right, "
          f"{accuracy['seconds']:.1f} s; {accuracy['summary']}")


def test_the_perf_gate_measured_the_real_server_and_recorded_its_figures(promoted: dict) -> None:
    perf = gate(promoted, "perf")
    assert perf["evidence"]["judged"] is False, perf["summary"]
    assert perf["summary"].startswith("recorded, not judged (no earlier figures"), perf["summary"]
    figures = perf["evidence"]["figures"]
    client = figures["client"]
    assert all(client[k] and client[k] > 0 for k in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "output_tokens_per_s"))
    # The real server's histograms saw exactly the load (the warm-up request is before the first scrape).
    server = figures["servers"][SERVER]
    assert server["requests"] == 4, server  # the median of the rounds' counts, each the load
    assert server["ttft_p50_s"] and server["ttft_p50_s"] > 0 and server["itl_p50_s"] and server["itl_p50_s"] > 0
    # A decode step, not a stall: the tiny model on CPU measured 4-8 ms a token (idle and loaded machine);
    # no lower bound, since speed is bench's to judge, not a test's.
    assert client["itl_p50_s"] < 5, client
    print(f"real engine perf: {perf['seconds']:.1f} s; {perf['summary']}")


def test_verify_judges_the_real_server_against_its_recorded_figures(engine_host: SimHost, promoted: dict) -> None:
    assert engine_host.active_release() == promoted["release"]
    proc = engine_host.playbook("verify.yml", *FIRST_DEPLOY_GATES, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "gate perf: passed in" in proc.stdout, proc.stdout[-4000:]
    assert f"none slower than release {promoted['release']}" in proc.stdout, proc.stdout[-4000:]


def combined_with(host: SimHost, **changes: object) -> list[str]:
    """`-e` arguments giving the combined server of `host`'s inventory `changes` (extra vars replace it whole)."""
    deployment = yaml.safe_load((host.inventory / "group_vars" / "all" / "deployment.yml").read_text())
    return ["-e", json.dumps({"combined": {**deployment["combined"], **changes}})]


def assert_failed_at_start(host: SimHost, proc, good: str, traceback_end: str) -> dict:
    """The deploy failed readiness at once naming the program, its exit and the real traceback; `good` is back."""
    assert proc.returncode != 0
    report = host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "readiness"), proc.stdout[-4000:]
    readiness = gate(report, "readiness")
    summary = readiness["summary"]
    assert summary.startswith(f"{SERVER} on host local did not start: it "), summary
    assert "exit" in summary.split("\n", 1)[0] or "SIG" in summary.split("\n", 1)[0], summary
    # The end of the real traceback (the log's last lines): a frame of sglang's and the error.
    assert traceback_end in summary and 'site-packages/sglang/' in summary, summary
    # At once: the wait ended when the program died, not at the 600 s deadline.
    assert readiness["seconds"] < 300, readiness["seconds"]
    assert f"release {good} is serving again and verified" in proc.stdout
    assert_serving(host, good)
    return readiness


def test_a_kv_pool_too_small_for_the_real_server_fails_readiness_at_once(engine_host: SimHost, promoted: dict) -> None:
    # The memory model is told the KV pool may be tiny (min_kv_pool_gib 0): only the real server knows better.
    # On CPU the real server measures the machine's available memory (psutil) before and after loading
    # the weights and fails when the drop exceeds fraction x memory: at 0.0001 that is ~2 MB, which
    # other processes' memory churn on a shared machine can hide; at 1e-9 it is a few bytes.
    memory = {"models": {"llama": {"params_billion": 1e-12, "headroom": {"min_kv_pool_gib": 0}}}}
    proc = engine_host.playbook("deploy.yml", *combined_with(engine_host, mem_fraction_static=1e-9),
                                "-e", json.dumps({"memory_profile": memory}), timeout=900)
    assert_failed_at_start(engine_host, proc, promoted["release"],
                           "ValueError: Loaded weights leave no GPU memory for the KV cache under "
                           "--mem-fraction-static=1e-09")


def test_an_override_the_model_rejects_fails_readiness_at_once(engine_host: SimHost, promoted: dict) -> None:
    # 3 query heads cannot share 2 KV heads: the real model fails its warm-up forward.
    proc = engine_host.playbook("deploy.yml", *combined_with(engine_host, model_overrides={"num_key_value_heads": 2}),
                                timeout=900)
    assert_failed_at_start(engine_host, proc, promoted["release"],
                           "RuntimeError: Number of heads in key and value must divide the number of heads in")


def test_an_override_the_server_reports_but_does_not_apply_fails_the_config_gate_and_rolls_back(
        engine_host: SimHost, promoted: dict) -> None:
    # rope_theta 20000 -> 30000: sglang 0.5.23 under transformers 5 logs it and reports it in /server_info, and its
    # Llama keeps the base of rope_parameters. The test model's heads break at any other base, so an applied change
    # would move its answers; the config gate asks the last good release's prompts again and finds them identical.
    proc = engine_host.playbook("deploy.yml", *combined_with(engine_host, model_overrides={"rope_theta": 30000.0}),
                                timeout=900)
    assert proc.returncode != 0
    report = engine_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "config"), proc.stdout[-4000:]
    config = gate(report, "config")
    proofs = {p["key"]: p for p in config["evidence"]["proofs"]}
    assert (proofs["rope_theta"]["log"], proofs["rope_theta"]["server_info"], proofs["rope_theta"]["behaviour"]) == (
        True, True, "not applied"), proofs
    assert "rope_theta=30000.0 is reported (log, /server_info) but not applied: all " in config["summary"]
    assert "20000.0 -> 30000.0" in config["summary"], config["summary"]
    assert f"release {promoted['release']} is serving again and verified" in proc.stdout
    assert_serving(engine_host, promoted["release"])
    print(f"real engine config gate, rope_theta 20000 -> 30000: {config['status']} in {config['seconds']:.1f} s: "
          f"{config['summary'][:300]}")


# The RoPE base as the model reads it under transformers 5 (rope_parameters): an override sglang applies.
APPLIED_ROPE_BASE = {"rope_parameters": {"rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.25}}


def test_a_rope_base_the_model_was_not_built_for_fails_the_needle_and_rolls_back(engine_host: SimHost,
                                                                                  promoted: dict) -> None:
    # A changed release whose override the real server applies: twice the RoPE base the test model's heads were
    # solved for moves them off the previous tokens (tests/real_engine/testmodel/rope.py), so it recalls nothing.
    # The gate list goes in the inventory, not in -e: an extra var would also replace the list the
    # rollback verifies the previous release with (readiness and smoke), and fail that on the needle.
    needle = engine_host.inventory / "group_vars" / "all" / "zz_needle.yml"
    needle.write_text(yaml.safe_dump({"dsv4_gates_names": ["readiness", ["config", "smoke"], ["needle", "accuracy"]],
                                      **NEEDLE_GRID, **ACCURACY}))
    try:
        proc = engine_host.playbook("deploy.yml", *combined_with(engine_host, model_overrides=APPLIED_ROPE_BASE),
                                    timeout=900)
    finally:
        needle.unlink()
    assert proc.returncode != 0
    report = engine_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "needle"), proc.stdout[-4000:]
    assert [(g["name"], g["status"]) for g in report["gates"]][:3] == [
        ("readiness", "passed"), ("config", "passed"), ("smoke", "passed")]
    # The config gate saw the answers move against the last good release's: the override is shown applied.
    proofs = {p["key"]: p for p in gate(report, "config")["evidence"]["proofs"]}
    assert proofs["rope_parameters"]["behaviour"] == "applied", proofs
    found = gate(report, "needle")
    cells = found["evidence"]["cells"]
    # A true recall failure: every request was answered (200, no error), and no answer held the needle.
    assert cells and all(c["status"] == 200 and c["error"] is None for c in cells), cells
    assert not any(t["recalled"] for c in cells for t in c["trials"]), cells
    assert re.search(r"\d+ of \d+ cells within 1500 tokens missed the needle; first: 300 tokens .* 0/\d+ recalled",
                     found["summary"]), found["summary"]
    # The accuracy gate beside it reads the same loss: the numbers are no longer copied.
    accuracy = gate(report, "accuracy")
    assert accuracy["status"] == "failed" and accuracy["evidence"]["right"] == 0, accuracy["summary"]
    assert f"release {promoted['release']} is serving again and verified" in proc.stdout, proc.stdout[-5000:]
    assert_serving(engine_host, promoted["release"])


def test_stop_lets_the_request_in_flight_finish_and_leaves_no_process(engine_host: SimHost, promoted: dict) -> None:
    server = engine_host.pids()[SERVER]
    family = [server, *descendants(server)]
    names = " ".join(process_name(p) for p in family)
    assert "sglang::scheduler" in names and "sglang::detokenizer" in names, names
    # Figures for the notes (no assertion: speed claims come from bench): idle CPU (--sleep-on-idle) and RSS.
    for pid, (cpu, rss) in usage(family).items():
        print(f"idle {process_name(pid)[:40]!r}: {cpu} % of a core, {rss} MiB RSS")
    replies: list[httpx.Response] = []
    # About 20 tokens/s on CPU: a 200-token answer is in flight for seconds when the drain begins.
    flight = threading.Thread(target=lambda: replies.append(chat(engine_host, max_tokens=200, timeout=300)))
    flight.start()
    time.sleep(2)
    proc = engine_host.playbook("stop.yml", timeout=600)
    flight.join(timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert replies and replies[0].status_code == 200, replies and replies[0].text
    assert replies[0].json()["choices"][0]["finish_reason"] in ("length", "stop")
    left = [(p, process_name(p)) for p in family if alive(p)]
    assert not left, f"left running after stop: {left}"
