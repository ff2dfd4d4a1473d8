"""``dpsql local design | randomize | answer``: the local-DP collection round from the command line.

``add_commands`` registers the ``local`` command on the main parser's subcommands; each action's
``handler`` takes the parsed arguments and returns the exit status, and dpsql errors propagate to
``dpsql.cli.main``, which prints them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dpsql.answers.tables import format_table
from dpsql.cli.files import read_queries, result_folder, write_tables
from dpsql.errors import InterfaceError, ProgrammingError
from dpsql.local import protocol
from dpsql.local.answers import read_reports, write_reports
from dpsql.local.sql import answer_batch, design_batch, design_summary, randomize_records, simulate_database


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``local`` with the actions ``design``, ``randomize`` and ``answer``."""
    local = subparsers.add_parser("local", help="local differential privacy: every person randomizes their own row")
    actions = local.add_subparsers(dest="action", required=True)
    design = actions.add_parser("design", help="optimize a strategy for a batch of COUNT(*) statements (reads no data)")
    design.add_argument("queries", type=Path, help="a .sql file with one or more COUNT(*) statements")
    design.add_argument("--schema", required=True, type=Path, help="the public schema (TOML)")
    design.add_argument("--epsilon", required=True, type=float, help="the privacy loss of each person's one report")
    design.add_argument("-o", "--out", required=True, type=Path, help="where to write the strategy file (JSON)")
    design.add_argument("--seed", type=int, default=0, help="seed of the random starting points (default 0)")
    design.add_argument("--restarts", type=int, default=1, help="random starts of the optimizer (default 1)")
    design.add_argument("--time-limit", type=float, default=600.0, help="seconds the optimizer may run (default 600)")
    design.set_defaults(handler=_design)
    randomize = actions.add_parser("randomize", help="turn true values into reports (a Python client, or simulation)")
    randomize.add_argument("--strategy", required=True, type=Path, help="the strategy file")
    source = randomize.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", type=Path, help="a CSV or Parquet file of true rows: one exact ε-LDP report per row")
    source.add_argument("--db", type=Path,
                        help="a DuckDB database: simulate its table's reports cell by cell (NOT private)")
    randomize.add_argument("--schema", type=Path, help="the schema, if the strategy file embeds none (--db only)")
    randomize.add_argument("--seed", type=int, help="seed of the simulation's draws (--db only)")
    randomize.add_argument("-o", "--out", required=True, type=Path, help="the reports file (.parquet or .csv)")
    randomize.add_argument("--max-epsilon", type=float, default=protocol.DEFAULT_MAX_EPSILON,
                           help="refuse a strategy file whose ε per report is above this (default "
                                f"{protocol.DEFAULT_MAX_EPSILON:g}: the server picks ε, the "
                                "client bounds it; above 5 a report is up to e^5 ≈ 148 times likelier for one value "
                                "than another, and two-value randomized response tells the truth 99.3%% of the time)")
    randomize.set_defaults(handler=_randomize)
    answer = actions.add_parser("answer", help="answer the batch from the reports")
    answer.add_argument("queries", type=Path, help="the .sql batch (the cells must match the strategy's)")
    answer.add_argument("--strategy", required=True, type=Path, help="the strategy file the reports were made with")
    answer.add_argument("--reports", required=True, type=Path, help="the reports file (.parquet or .csv)")
    answer.add_argument("--schema", type=Path, help="the schema, if the strategy file embeds none")
    answer.add_argument("--out", type=Path, help="write each statement's result to this folder instead of the terminal")
    answer.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="file format for --out")
    answer.set_defaults(handler=_answer)


def _design(arguments: argparse.Namespace) -> int:
    text = read_queries(arguments.queries)
    published = design_batch(text, arguments.schema, epsilon=arguments.epsilon, seed=arguments.seed,
                             restarts=arguments.restarts, time_limit=arguments.time_limit)
    protocol.save(published, arguments.out)
    print(design_summary(text, published))
    print(arguments.out)
    return 0


def _randomize(arguments: argparse.Namespace) -> int:
    published = protocol.load(arguments.strategy)
    print(f"strategy {arguments.strategy}: ε = {published.epsilon:g} per report, mechanism {published.name}, "
          f"sha256 {published.sha256[:12]}… (this client's limit: --max-epsilon {arguments.max_epsilon:g})",
          file=sys.stderr)
    protocol.check_max_epsilon(published, arguments.max_epsilon, option="--max-epsilon")
    if arguments.input is not None:
        if arguments.seed is not None or arguments.schema is not None:
            raise ProgrammingError("--seed and --schema apply to --db simulation only; --input reports are drawn from "
                                   "the operating system's randomness.")
        reports = randomize_records(published, _read_table(arguments.input), max_epsilon=arguments.max_epsilon)
    else:
        rng = np.random.default_rng(arguments.seed)
        reports = simulate_database(published, arguments.db, schema=arguments.schema, rng=rng)
        print("simulated: reports drawn per cell from the true counts (for testing a design, not for collection)",
              file=sys.stderr)
    write_reports(reports, arguments.out)
    print(arguments.out)
    return 0


def _answer(arguments: argparse.Namespace) -> int:
    published = protocol.load(arguments.strategy)
    tables = answer_batch(read_queries(arguments.queries), published, read_reports(arguments.reports),
                          schema=arguments.schema)
    if arguments.out is not None:
        result_folder(arguments.out)
        print(*write_tables(tables, arguments.out, arguments.format), sep="\n")
        return 0
    for number, table in enumerate(tables, start=1):
        print(f"-- statement {number}")
        print(format_table(table))
        print()
    return 0


def _read_table(path: Path) -> pa.Table:
    if not path.is_file():
        raise InterfaceError(f"cannot read the input rows '{path}': no such file. Pass a CSV or Parquet file.")
    try:
        return pa_csv.read_csv(path) if path.suffix.lower() == ".csv" else pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise InterfaceError(f"cannot read the input rows '{path}': {err}. Pass a CSV or Parquet file.") from err
