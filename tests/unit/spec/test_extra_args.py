"""extra_args as sglang's own parser would take them: several words in one item, unknown flags with
"did you mean", abbreviations, per release (the option lists are the real parsers', tests/contract)."""

from __future__ import annotations

import pytest

from dsv4deploy.sglang.server_options import OPTIONS
from tests.unit.spec.test_spec import HOSTS, changed, problems


def extra(args: list[str], version: str = "0.5.23", where: str = "decode.0.extra_args") -> list[str]:
    return problems(changed(**{where: args}), {"gpu1": {**HOSTS["gpu1"], "sglang_version": version}})


def test_an_unknown_flag_is_refused():
    assert extra(["--enable-turbo-mode"]) == [
        "decode[0].extra_args (host gpu1): sglang 0.5.23 has no flag '--enable-turbo-mode'; fix: remove it or correct "
        "its spelling (sglang 0.5.23's flags: python -m sglang.launch_server --help)"]


def test_a_misspelt_flag_gets_did_you_mean():
    [problem] = extra(["--enable-torch-compiel"])
    assert "has no flag '--enable-torch-compiel'; fix: did you mean --enable-torch-compile?" in problem


def test_an_item_with_several_words_is_refused_with_the_items_it_should_be():
    assert extra(["--dp-size 2"]) == [
        "decode[0].extra_args (host gpu1): the item '--dp-size 2' holds 2 words, which the server or router would "
        "read as one argument; fix: write it as items of their own: '--dp-size', '2' (or '--dp-size=2')"]
    assert problems(changed(**{"router.extra_args": ["--log-level debug"]}))[0].startswith(
        "router.extra_args (host gpu1): the item '--log-level debug' holds 2 words")


def test_an_abbreviation_is_refused_with_the_full_flag():
    [problem] = extra(["--chunked-prefill", "4096"])
    assert ("'--chunked-prefill' abbreviates --chunked-prefill-size; fix: write --chunked-prefill-size in full"
            in problem)


def test_a_flag_of_a_later_release_is_refused_for_an_earlier_one():
    flag = next(f for f in sorted(OPTIONS["0.5.23"] - OPTIONS["0.5.12"])
                if not any(o.startswith(f) for o in OPTIONS["0.5.12"]))
    assert extra([flag, "1"], "0.5.12")[0].startswith(f"decode[0].extra_args (host gpu1): sglang 0.5.12 has no flag "
                                                      f"'{flag}'")


@pytest.mark.parametrize("args", [["--chunked-prefill-size", "4096"], ["--chunked-prefill-size=4096"],
                                  ["--enable-torch-compile"]])
def test_real_flags_written_either_way_pass(args):
    from dsv4deploy.spec import load_spec

    load_spec(changed(**{"decode.0.extra_args": args, "prefill.0.extra_args": args}), HOSTS)


def test_a_patch_release_is_checked_against_the_nearest_tables_flags():
    [problem] = extra(["--enable-turbo-mode"], "0.5.24")
    assert "sglang 0.5.24 (the flags of 0.5.23) has no flag '--enable-turbo-mode'" in problem


@pytest.mark.parametrize("extra_args", [["--schedule-policy", "fastest"], ["--schedule-policy=fastest"]])
def test_a_value_the_releases_parser_refuses_fails_validate_naming_what_it_takes(extra_args) -> None:
    problems = extra(extra_args)
    assert len(problems) == 1 and problems[0].startswith(
        "decode[0].extra_args (host gpu1): sglang 0.5.23's --schedule-policy takes one of lpm, random, fcfs"), problems
    assert "got 'fastest'" in problems[0] and "fix: use one of those for --schedule-policy" in problems[0]


def test_a_value_the_parser_allows_passes_and_the_choices_are_the_real_parsers() -> None:
    from dsv4deploy.sglang.server_choices import CHOICES
    from dsv4deploy.sim._flag_tables import TABLES
    from dsv4deploy.spec import load_spec

    load_spec(changed(**{"decode.0.extra_args": ["--schedule-policy", "hrrn"]}), HOSTS)  # 0.5.23 has it
    assert "takes one of" in extra(["--schedule-policy", "hrrn"], "0.5.18")[0]  # 0.5.18 has not
    # The simulator's tables are the real parsers' actions (tests/contract checks them against the wheels).
    for version, rows in TABLES.items():
        fixed = {o: tuple(map(str, c)) for opts, _d, kind, _t, _df, nargs, c, _n in rows
                 if c and kind == "store" and nargs is None for o in opts if o.startswith("--")}
        assert dict(CHOICES[version]) == fixed, version
