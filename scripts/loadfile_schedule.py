"""Estimate the wall of `pytest -n N --dist loadfile` from measured per-test seconds.

    .venv/bin/python -m pytest ... --junitxml=build/junit.xml        # or: --durations=0 --durations-min=0 > d.txt
    .venv/bin/python scripts/loadfile_schedule.py build/junit.xml [more.xml|d.txt ...] [-n 3] [--order xdist]
    .venv/bin/python scripts/loadfile_schedule.py build/junit.xml --write   # update tests/durations.json

Prints each file's total, then the schedule pytest-xdist 3.8's loadfile scheduler makes of them: each file
is one unit; the queue is the collection order as tests/conftest.py sorts it (`table`: heaviest module of
tests/durations.json first), or as xdist alone re-sorts it (`xdist`: most tests first, its default
--loadscope-reorder); each worker gets one unit at the start and another whenever it has 2 tests or fewer
left (xdist's LoadScopeScheduling._reschedule). A test takes its measured time whatever runs beside it:
the estimate is as good as the figures fed in (serial figures on a 2-core machine run slower at -n 3).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.conftest import DURATIONS, durations, module_seconds  # noqa: E402  (the order the session uses)

DURATION_LINE = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(\S+?)::(\S.*)$")


def _junit_path(classname: str) -> str:
    """tests.unit.test_x[.Class] -> tests/unit/test_x.py (the longest prefix that names a file here)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (REPO / candidate).exists():
            return candidate
    return "/".join(parts) + ".py"


def read_seconds(paths: list[Path]) -> dict[str, dict[str, float]]:
    """file -> test id -> seconds (setup + call + teardown), from junit xml files or --durations output."""
    tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for path in paths:
        text = path.read_text(errors="replace")
        if text.lstrip().startswith("<"):
            for case in ET.fromstring(text).iter("testcase"):
                file = case.get("file") or _junit_path(case.get("classname", ""))
                tests[file][case.get("classname", "") + "::" + case.get("name", "")] += float(case.get("time", 0))
        else:
            for line in text.splitlines():
                found = DURATION_LINE.match(line)
                if found:
                    seconds, _phase, file, test = found.groups()
                    tests[file][test] += float(seconds)
    return tests


def schedule(units: list[tuple[str, list[float]]], workers: int, threshold: int = 2) -> list[tuple[float, list[str]]]:
    """Play xdist's loadfile scheduling of `units` (file, per-test seconds, in queue order) on `workers`.
    Returns each worker's (finish time, files in the order it got them)."""
    queue = list(units)
    pending: list[list[float]] = [[] for _ in range(workers)]  # tests assigned, not finished
    files: list[list[str]] = [[] for _ in range(workers)]
    clock = [0.0] * workers

    def assign(node: int) -> None:
        file, seconds = queue.pop(0)
        files[node].append(file)
        pending[node].extend(seconds)

    for node in range(workers):
        if queue:
            assign(node)
    for node in range(workers):
        if queue and len(pending[node]) <= threshold:
            assign(node)
    while any(pending):
        node = min((n for n in range(workers) if pending[n]), key=lambda n: clock[n] + pending[n][0])
        clock[node] += pending[node].pop(0)
        if queue and len(pending[node]) <= threshold:
            assign(node)
    return list(zip(clock, files, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="junit xml files or saved --durations=0 output")
    parser.add_argument("-n", type=int, default=3, help="workers (default 3, as CI)")
    parser.add_argument("--order", choices=("table", "xdist", "lpt"), default="table",
                        help="table: tests/conftest.py's (default); xdist: by test count, xdist's own; "
                             "lpt: by the seconds fed in")
    parser.add_argument("--top", type=int, default=25, help="files to list (default 25)")
    parser.add_argument("--write", action="store_true", help=f"merge the files' totals into {DURATIONS}")
    args = parser.parse_args()

    tests = read_seconds(args.inputs)
    # pytest collects each folder's entries sorted by name: the order of the paths' parts.
    units = [(file, list(tests[file].values())) for file in sorted(tests, key=lambda f: Path(f).parts)]
    table = durations()
    if args.write:
        table.update({file: round(sum(seconds), 1) for file, seconds in units})
        DURATIONS.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
        print(f"{DURATIONS}: {len(units)} files updated, {len(table)} in all")
    order = {"table": lambda unit: -module_seconds(unit[0], table), "xdist": lambda unit: -len(unit[1]),
             "lpt": lambda unit: -sum(unit[1])}
    if args.order == "table" and not table:
        print(f"{DURATIONS} is empty: the session keeps xdist's order")
        args.order = "xdist"
    units.sort(key=order[args.order])
    total = sum(sum(s) for _, s in units)
    print(f"{len(units)} files, {sum(len(s) for _, s in units)} tests, {total:.0f} s in all; heaviest files:")
    for file, seconds in sorted(units, key=lambda unit: -sum(unit[1]))[:args.top]:
        print(f"  {sum(seconds):8.1f} s  {len(seconds):4d} tests  {file}")
    plan = schedule(units, args.n)
    wall = max(finish for finish, _ in plan)
    print(f"-n {args.n} --dist loadfile, {args.order} order: wall {wall:.0f} s "
          f"(all {args.n} busy would be {total / args.n:.0f} s)")
    for node, (finish, names) in enumerate(plan):
        print(f"  gw{node} ends at {finish:7.0f} s, {len(names)} files, last: {', '.join(names[-3:])}")


if __name__ == "__main__":
    main()
