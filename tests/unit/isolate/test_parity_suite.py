"""The isolation verdict with the parity suite counted."""

from __future__ import annotations

from dsv4deploy.isolate import parity_suite


def _side(tokens: list[int] | None) -> dict:
    if tokens is None:
        return {"gates": []}
    rec = {"p": {"tokens": tokens, "logprobs": [-0.1] * len(tokens), "top": [], "length": 24, "kind": "plain"}}
    return {"gates": [{"name": "parity", "evidence": {"record": {"outputs": rec, "tolerance": 0.05}}}]}


def test_a_pd_side_that_computes_otherwise_is_pd_specific() -> None:
    parity = parity_suite.comparison({"pd": _side([1, 9]), "combined": _side([1, 2])})
    assert parity is not None and parity["outcome"] == "failed"
    verdict, why = parity_suite.with_parity(("clean", "passes in PD and on the combined server"), parity)
    assert verdict == "pd_specific" and "first divergent token 1" in why
    assert "Parity: PD against combined" in "\n".join(parity_suite.markdown(parity))


def test_equal_sides_leave_the_verdict_and_a_shared_path_stands() -> None:
    same = parity_suite.comparison({"pd": _side([1, 2]), "combined": _side([1, 2])})
    assert parity_suite.with_parity(("clean", "x"), same) == ("clean", "x")
    bad = parity_suite.comparison({"pd": _side([1, 9]), "combined": _side([1, 2])})
    assert parity_suite.with_parity(("shared_path", "y"), bad) == ("shared_path", "y")


def test_no_parity_suite_changes_nothing_and_a_missing_side_is_inconclusive() -> None:
    assert parity_suite.comparison({"pd": _side(None), "combined": _side(None)}) is None
    half = parity_suite.comparison({"pd": _side([1]), "combined": _side(None)})
    assert parity_suite.with_parity(("clean", "x"), half)[0] == "inconclusive"
    # a side without a record decides nothing, whatever another suite found
    for found in ("pd_specific", "shared_path"):
        verdict, why = parity_suite.with_parity((found, "needle: x"), half)
        assert verdict == "inconclusive" and "no record from the combined side" in why and "needle: x" in why
