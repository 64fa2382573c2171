"""`extra_args` checked as sglang's own parser would take them, on the controller.

- An item holding several words (`"--dp 4"`) is one argv element: sglang would read the flag `--dp 4`. It is
  refused, with the items it should be (`["--dp", "4"]`); a `--flag=value` item is one word and fine.
- A server flag its release does not have (`--enable-turbo-mode`) is refused with "did you mean", from the
  option strings of the release's real parser (dsv4deploy.sglang.server_options); an abbreviation, which
  argparse accepts but a later release may make ambiguous, is refused with the full spelling.
- A value outside the fixed set the release's parser allows for its flag (`--schedule-policy fastest`) is
  refused naming that set (dsv4deploy.sglang.server_choices): the server would exit with code 2 at start.
The host's own parser checks them again in preflight, for the release actually installed there.
"""

from __future__ import annotations

import difflib
import shlex

from dsv4deploy.sglang import flags, versions
from dsv4deploy.sglang.server_choices import CHOICES
from dsv4deploy.sglang.server_options import OPTIONS
from dsv4deploy.spec.models import Deployment, Problem


def split_problems(field: str, host: str, args: list[str]) -> list[Problem]:
    """Items that hold several words: each should be items of its own."""
    out = []
    for arg in args:
        if arg.startswith("-") and "=" not in arg.split(" ", 1)[0] and len(arg.split()) > 1:
            try:
                words = shlex.split(arg)
            except ValueError:
                words = arg.split()
            out.append(Problem(field=field, host=host,
                               message=f"the item {arg!r} holds {len(words)} words, which the server or router would "
                                       "read as one argument",
                               fix=f"write it as items of their own: {', '.join(map(repr, words))} (or "
                                   f"'{words[0]}={' '.join(words[1:])}')"))
    return out


def unknown_flag_problems(field: str, host: str, version: str, args: list[str],
                          rendered: tuple[str, ...] = ()) -> list[Problem]:
    """Server flags `version`'s parser does not have, or only as an abbreviation (flags that are, or
    abbreviate, one of `rendered` are refused as such elsewhere)."""
    table = versions.table_version(version)
    known = OPTIONS.get(table or "")
    if not known:
        return []
    said = (*rendered, *flags.table(version).forbidden)  # refused as such by dsv4deploy.spec.checks
    out = []
    for arg in args:
        flag = arg.split("=", 1)[0].split(" ", 1)[0]
        if not flag.startswith("--") or flag in known or any(r.startswith(flag) for r in said):
            continue
        longer = sorted(k for k in known if k.startswith(flag))
        if len(longer) == 1:
            out.append(Problem(field=field, host=host, message=f"{flag!r} abbreviates {longer[0]}",
                               fix=f"write {longer[0]} in full (a later release may add a flag that makes the "
                                   "abbreviation ambiguous)"))
            continue
        meant = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.75)
        name = f"sglang {version}" + (f" (the flags of {table})" if table != version else "")
        out.append(Problem(field=field, host=host, message=f"{name} has no flag {flag!r}",
                           fix=(f"did you mean {meant[0]}? " if meant else "") + "remove it or correct its spelling "
                               f"(sglang {table}'s flags: python -m sglang.launch_server --help)"))
    return out


def bad_value_problems(field: str, host: str, version: str, args: list[str]) -> list[Problem]:
    """Values `version`'s parser refuses for a flag with a fixed set of them (`--flag value` or `--flag=value`)."""
    table = versions.table_version(version)
    allowed = CHOICES.get(table or "", {})
    out = []
    for index, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag not in allowed:
            continue
        if not eq:
            if index + 1 >= len(args) or args[index + 1].startswith("--"):
                continue  # argparse says "expected one argument"; the host's parser names it in preflight
            value = args[index + 1]
        if value not in allowed[flag]:
            out.append(Problem(field=field, host=host,
                               message=f"sglang {table}'s {flag} takes one of {', '.join(allowed[flag])}; got "
                                       f"{value!r} (the server would exit with code 2 at start)",
                               fix=f"use one of those for {flag}, or remove it"))
    return out


def check_extra_args(spec: Deployment, rendered: tuple[str, ...] = ()) -> list[Problem]:
    """Every server's extra_args against its release's flags (but the `rendered` ones, said elsewhere), and every
    item (router too) for several words."""
    out = []
    for path, worker in spec.workers():
        field = f"{path}.extra_args"
        out += split_problems(field, worker.host, worker.extra_args)
        version = spec.host(worker.host).sglang_version
        out += unknown_flag_problems(field, worker.host, version, worker.extra_args, rendered)
        out += bad_value_problems(field, worker.host, version, worker.extra_args)
    if spec.topology == "pd" and spec.router:
        out += split_problems("router.extra_args", spec.router.host, spec.router.extra_args)
    return out
