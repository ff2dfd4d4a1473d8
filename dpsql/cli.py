"""The ``dpsql`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpsql`` command."""
    parser = argparse.ArgumentParser(prog="dpsql", description="Differentially private aggregate SQL.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the matrix mechanism end to end on a generated population")
    arguments = parser.parse_args(argv)
    if arguments.command == "demo":
        from dpsql import demo

        demo.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
