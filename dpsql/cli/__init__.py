"""The ``dpsql`` command line: run, explain, budget, local (local DP), schema suggest, demo — over the Python API only.

``run`` and ``explain`` draw from the privacy ledger next to ``--db`` (or ``--ledger PATH``, which a
Spark Connect or PostgreSQL address needs, with ``--dataset``), whose total the data owner sets with
``dpsql budget set``; a run is charged durably before it reads data. Both hand the queries file to
the engine's request pipeline (:mod:`dpsql.engine.pipeline`), as ``Cursor.execute`` does.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpsql import __version__
from dpsql.answers import charts
from dpsql.answers.tables import PLUS_MINUS, format_table
from dpsql.backends.base import data_file_suffix, data_file_table
from dpsql.cli import accuracy as accuracy_cli
from dpsql.cli import budget as budget_cli
from dpsql.cli import local as local_cli
from dpsql.cli import serve as serve_cli
from dpsql.cli.files import read_queries, result_folder, write_tables
from dpsql.engine import pipeline
from dpsql.engine.request import Request
from dpsql.errors import Error, InterfaceError, PrivacyParameterError, ProgrammingError

#: The exit status of a command whose reader went away (``dpsql budget show | head``): 128 + SIGPIPE, as a
#: command ended by the signal reports it.
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpsql`` command; returns the exit status (2 for a dpsql error, 141 when the
    reader of standard output closed it early, which ends the command quietly)."""
    try:
        arguments = _parser().parse_args(argv)
        status = int(arguments.handler(arguments) or 0)
        sys.stdout.flush()  # a reader that left shows here, not as a traceback at exit
        return status
    except BrokenPipeError:
        _discard_stdout()
        return BROKEN_PIPE
    except Error as err:
        print(f"dpsql: {type(err).__name__}: {err}", file=sys.stderr)
        return 2


def parser() -> argparse.ArgumentParser:
    """The ``dpsql`` command's argument parser (docs/cli.md is generated from it)."""
    return _parser()


def _discard_stdout() -> None:
    """Point standard output at the null device, so the interpreter's last flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a real file (a test's capture): nothing is flushed to a closed pipe at exit


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsql",
                                     description="Differentially private aggregate SQL, answered jointly.")
    parser.add_argument("--version", action="version", version=f"dpsql {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, text in (("run", _run, "answer a batch of SQL privately"),
                                ("explain", _explain, "show the plan and cost of a batch without spending")):
        command = commands.add_parser(name, help=text)
        command.add_argument("queries", type=Path, help="a .sql file with one or more statements (- reads standard "
                             "input)")
        command.add_argument("--db", required=True, help=budget_cli.DB_HELP)
        command.add_argument("--tables", type=budget_cli.table_map, help=budget_cli.TABLES_HELP)
        command.add_argument("--schema", required=True, type=Path, help="the public schema (TOML)")
        cost = command.add_mutually_exclusive_group()  # or WITH DIFFERENTIAL_PRIVACY OPTIONS in the SQL
        cost.add_argument("--epsilon", type=float, help="the batch's cost in pure ε-DP (discrete Laplace noise)")
        cost.add_argument("--rho", type=float, help="the batch's cost in ρ-zCDP (discrete Gaussian noise)")
        command.add_argument("--weights", type=_weights, help="each statement's weight in the planning objective, "
                             "comma-separated in statement order (e.g. 1,1,4; default all 1)")
        accuracy_cli.add_options(command)
        command.add_argument("--no-reuse", dest="reuse", action="store_false",
                             help="measure every statement again, even those earlier releases already answer for free")
        budget_cli.add_ledger_options(command)
        command.set_defaults(handler=handler)
    run = commands.choices["run"]
    run.add_argument("--out", type=Path, help="write each statement's result to this folder instead of the terminal")
    run.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="file format for --out")
    run.add_argument("--nonnegative", action="store_true",
                     help="set negative counts (and sums of non-negative values) to 0")
    run.add_argument("--isotonic", action="store_true",
                     help="make nested single-answer statements (e.g. prefix sums) non-decreasing")
    run.add_argument("--explain", action="store_true",
                     help="after the answers, print how the batch was planned (as dpsql explain shows it)")
    run.add_argument("--verbose", "-v", action="store_true", help="report each step's progress on standard error")
    run.add_argument("--chart", type=Path, help="also draw each answer with ± one standard error bars into this "
                     "image (.png, .svg, .pdf; needs the optional extra plots: pip install \"dpsql[plots]\")")
    budget_cli.add_commands(commands)
    local_cli.add_commands(commands)
    serve_cli.add_commands(commands)
    schema = commands.add_parser("schema", help="schema helpers").add_subparsers(dest="action", required=True)
    suggest = schema.add_parser("suggest", help="print a starting schema read from a table (NOT private)")
    suggest.add_argument("--db", required=True, help="a DuckDB database file, or a CSV or Parquet file")
    suggest.add_argument("--table", help="the table to read (a CSV or Parquet file's default: its name without the "
                         "ending, adult.csv → adult)")
    suggest.set_defaults(handler=_suggest)
    demo = commands.add_parser("demo", help="build a census-like database and answer a dozen queries privately")
    demo.add_argument("--dir", type=Path,
                      help="where to write the database, schema and queries (default: a temp folder)")
    demo.add_argument("--rows", type=int, default=1_000_000, help="people in the generated table")
    demo.add_argument("--epsilon", type=float, default=1.0, help="the batch's privacy cost")
    demo.add_argument("--explain", action="store_true", help="also print how the batch was planned, after the answers")
    demo.set_defaults(handler=_demo)
    return parser


def _progress(message: str, started: float) -> None:
    print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr)


def _open(arguments: argparse.Namespace):  # type: ignore[no-untyped-def]
    """A read-only connection charging the ledger (next to --db, or --ledger); a missing --db is an error."""
    import dpsql

    return dpsql.connect(arguments.db, schema=arguments.schema, ledger=arguments.ledger, dataset=arguments.dataset,
                         analyst=arguments.analyst, tables=arguments.tables)


def _request(arguments: argparse.Namespace, **more: Any) -> Request:
    """The batch of the queries file as the pipeline reads it (``more``: run's progress and post-processing);
    without --epsilon/--rho or a target its statements must carry their cost in the SQL."""
    request = Request(operation=read_queries(arguments.queries), epsilon=arguments.epsilon, rho=arguments.rho,
                      weights=arguments.weights, reuse=arguments.reuse, **accuracy_cli.target(arguments), **more)
    if not request.states_cost():
        raise PrivacyParameterError("give the batch's cost: --epsilon (pure ε-DP) or --rho (ρ-zCDP), or write it into "
                                    "each statement as SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = ...) ...; "
                                    "or give an accuracy target (--max-stddev); nothing was run or charged.")
    return request


def _run(arguments: argparse.Namespace) -> int:
    started = time.perf_counter()
    steps = [step for step in ("nonnegative", "isotonic") if getattr(arguments, step)]

    def report(message: str) -> None:
        if arguments.verbose:
            _progress(message, started)

    request = _request(arguments, progress=report if arguments.verbose else None, postprocess=steps)
    if arguments.out is not None:  # checked before anything is spent
        result_folder(arguments.out, consequence="Nothing was run or charged.")
    if arguments.chart is not None:
        charts.require()  # before anything is spent
    with _open(arguments) as connection:
        plan = pipeline.explain(request, connection) if arguments.explain else None  # before anything is spent
        report("parsing, compiling and planning the batch")
        tables = pipeline.answer(request, connection)
        report(f"answered {len(tables)} statement(s)")
        releases = [json.loads(table.schema.metadata[b"dpsql"]) for table in tables]
        release = next((r for r in releases if not str(r.get("budget_spent")).startswith("nothing")),
                       releases[0] if releases else {})  # a statement that was measured names the batch's charge
        charged = (f"budget: charged {release.get('budget_spent')}; left {release.get('budget_remaining')} "
                   f"(ledger {connection.account.ledger.path})" + accuracy_cli.found(release))
    if arguments.out:
        print(*write_tables(tables, arguments.out, arguments.format), sep="\n")
    else:
        _print_answers(tables)
    if plan is not None:
        print(f"How dpsql planned the batch (before it was answered; nothing spent):\n{plan}")
    print(charged, file=sys.stderr)
    if arguments.chart is not None:
        try:
            charts.draw(tables, arguments.chart)
        except OSError as err:
            raise InterfaceError(f"cannot write the chart '{arguments.chart}': {err.strerror or err}; the answers "
                                 "above were charged and printed.") from err
        print(f"chart: {arguments.chart}", file=sys.stderr)
    return 0


def _print_answers(tables: Sequence[Any]) -> None:
    """Each statement's result, under a line saying what ± means, then the notes on the batch."""
    print(PLUS_MINUS)
    print()
    for number, table in enumerate(tables, start=1):
        print(f"-- statement {number}")
        print(format_table(table))
        notes = json.loads(table.schema.metadata[b"dpsql"]).get("avg_null", {})
        for alias, note in notes.items():
            print(f"   {alias}: {note}")
        print()
    thresholds = json.loads(tables[0].schema.metadata[b"dpsql"]).get("truncation_threshold", {}) if tables else {}
    for column, theta in thresholds.items():
        print(f"-- {column}: sums truncated at θ = {theta:,.2f} "
              "(chosen privately; answers are biased toward zero beyond it)")


def _weights(text: str) -> list[float]:
    """--weights 1,1,4 → [1.0, 1.0, 4.0] (positivity and count are checked with the batch)."""
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers (e.g. 1,1,4)") from None


def _explain(arguments: argparse.Namespace) -> int:
    with _open(arguments) as connection:
        print(pipeline.explain(_request(arguments), connection))
    return 0


def _suggest(arguments: argparse.Namespace) -> int:
    from dpsql.suggest import suggest_schema

    table = arguments.table
    if table is None:
        if data_file_suffix(arguments.db) is None:
            raise ProgrammingError("dpsql schema suggest --db DATABASE needs --table NAME: which table to read.")
        table = data_file_table(arguments.db)
    print(suggest_schema(arguments.db, table))
    return 0


def _demo(arguments: argparse.Namespace) -> int:
    from dpsql.cli import demo

    demo.run(arguments.dir, people=arguments.rows, epsilon=arguments.epsilon, explain=arguments.explain)
    return 0

