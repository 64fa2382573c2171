"""`dsv4deploy init`: a starter inventory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsv4deploy.cli.common import EXIT_OK, CliError


def add_init(parser: argparse.ArgumentParser) -> None:
    from dsv4deploy.inventory.starter import EXAMPLES

    parser.description = ("Write a starter inventory into DIR (new or empty), to use as -i DIR. `local` is the "
                          "embedded simulated GPU host (this machine, no GPU needed); the others are real "
                          "layouts to adapt.")
    parser.add_argument("dir", type=Path, metavar="DIR", help="folder to create")
    parser.add_argument("--example", choices=EXAMPLES, default="local", help="which layout (default: local)")


def run_init(args: argparse.Namespace) -> int:
    from dsv4deploy.inventory.starter import StarterError, write_starter

    try:
        written = write_starter(args.dir, args.example)
    except StarterError as exc:
        raise CliError([str(exc)]) from None
    except OSError as exc:
        raise CliError([f"cannot write {args.dir}: {exc.strerror or exc}"]) from None
    for path in written:
        print(path)
    # No -e here: extra vars win over the inventory, so a suggested one would override what the user sets.
    print(f"next: dsv4deploy validate -i {args.dir}, then ansible-playbook dsv4.deploy.deploy -i {args.dir} "
          "(it deploys the inventory's values; an -e you add overrides them)", file=sys.stderr)
    return EXIT_OK
