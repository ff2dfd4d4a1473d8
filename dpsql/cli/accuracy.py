"""The accuracy-target options of ``dpsql run`` and ``dpsql explain`` (``dpsql.engine.reuse.accuracy_target``):
``--max-stddev S[,S...]``, ``--max-relative-stddev R[,R...]`` (one value for every statement, or one
per statement with ``none`` for no target) and ``--family epsilon|rho``, the cost to find."""

from __future__ import annotations

import argparse
from typing import Any

TARGET_HELP = ("an accuracy target instead of a cost: every COUNT/SUM answer's standard error at most S; one value "
               "for every statement or one per statement, comma-separated, 'none' for no target (e.g. 10,none,2.5). "
               "dpsql finds the least cost meeting it before reading any data and charges exactly that")
RELATIVE_HELP = ("an accuracy target in rows: every answer's standard error at most R times the most one row adds "
                 "to it (1 for a COUNT, max(|lower|, |upper|) of the declared bounds for a SUM); as --max-stddev")
FAMILY_HELP = "the cost an accuracy target is met with: epsilon (pure ε-DP, the default) or rho (ρ-zCDP)"


def add_options(command: argparse.ArgumentParser) -> None:
    """--max-stddev, --max-relative-stddev and --family on a run/explain command."""
    command.add_argument("--max-stddev", type=targets, metavar="S[,S...]", help=TARGET_HELP)
    command.add_argument("--max-relative-stddev", type=targets, metavar="R[,R...]", help=RELATIVE_HELP)
    command.add_argument("--family", choices=("epsilon", "rho"), help=FAMILY_HELP)


def targets(text: str) -> float | list[float | None]:
    """'10' → 10.0 (every statement); '10,none,2.5' → [10.0, None, 2.5] (positivity and count are
    checked with the batch)."""
    try:
        parts = [None if part.strip().lower() == "none" else float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or a comma-separated list of numbers and 'none' "
                                         "(e.g. 10,none,2.5)") from None
    if len(parts) == 1 and parts[0] is not None:
        return parts[0]
    return parts


def target(arguments: argparse.Namespace) -> dict[str, Any]:
    """The command's target as keyword arguments of a ``dpsql.engine.request.Request`` (or ``Cursor.execute``)."""
    return {"max_stddev": arguments.max_stddev, "max_relative_stddev": arguments.max_relative_stddev,
            "family": arguments.family}


def found(release: dict[str, Any]) -> str:
    """What the progress line adds about a target: the least cost found and the cost that misses."""
    searched = release.get("accuracy_target")
    if not searched:
        return ""
    missed = f"; {searched['misses_at']} misses it" if searched.get("misses_at") else ""
    return f" — the least cost meeting the accuracy target{missed}"
