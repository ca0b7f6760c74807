"""The ``phalanx`` command.

Every failure a user can cause (a bad flag, a missing file) ends in one readable line on stderr and
a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from scheduler import demo


def _version() -> str:
    try:
        return version("phalanx-scheduler")
    except PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line in one line (with a pointer to --help), not usage plus error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="phalanx",
        description="Phalanx: an all-or-nothing, topology-aware gang scheduler for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"phalanx {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.add_parser(
        "demo",
        help="place a mixed sample workload on a small embedded cluster and show where it went",
        description="Place a mixed sample workload on an embedded 2 blocks x 4 racks x 8 nodes cluster.",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo.main()
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
