"""``dpsql budget set | show | history``: the privacy ledger from the command line.

``set`` is the data owner's action (it creates the ledger file and its key if needed, binds the
dataset to the database file and ``--schema``, and records who did it); ``show`` and ``history``
only read. ``show`` also lists the dataset's kept releases and what each can answer (the
``summary`` its payload carries). ``run`` and ``explain`` share the ledger options defined here.
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from pathlib import Path

from dpsql.answers import charts, spend_chart
from dpsql.backends.choose import choose_backend, file_table, is_address
from dpsql.budget.account import Account
from dpsql.budget.accounting import UNIT, PrivacyCost, epsilon_from_rho
from dpsql.budget.ledger import (
    KEY_ENV,
    Action,
    Balance,
    Binding,
    Charge,
    KeptRelease,
    Ledger,
    default_path,
)
from dpsql.errors import InterfaceError, OperationalError, ProgrammingError, SchemaError
from dpsql.schema import Schema

DEFAULT_DELTA = 1e-6


DB_HELP = ("the data: a DuckDB database file, sc://HOST:PORT (Spark Connect) or postgresql://... (PostgreSQL; "
           "these two need --ledger and --dataset)")
TABLES_HELP = ("Spark and PostgreSQL: where each declared table is, NAME=REFERENCE[,NAME=REFERENCE...] "
               "(e.g. people=analytics.people); default: the declared name")


def table_map(text: str) -> dict[str, str]:
    """--tables people=db.people,visits=db.visits → {"people": "db.people", "visits": "db.visits"}."""
    pairs = [part.split("=", 1) for part in text.split(",") if part.strip()]
    if not pairs or any(len(pair) != 2 or not pair[0].strip() or not pair[1].strip() for pair in pairs):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=REFERENCE[,NAME=REFERENCE...] "
                                         "(e.g. people=analytics.people)")
    return {name.strip(): where.strip() for name, where in pairs}


def add_ledger_options(command: argparse.ArgumentParser) -> None:
    """--ledger, --dataset and --analyst: which budget in which ledger file."""
    command.add_argument("--ledger", type=Path, help="the ledger file (default: next to the database, DB.dpsql-ledger)")
    command.add_argument("--dataset", help="the dataset's name in the ledger (default: the database file's name)")
    command.add_argument("--analyst",
                         help="an analyst whose own sub-budget applies too (set with budget set --analyst)")


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``dpsql budget set | show | history``."""
    budget = commands.add_parser("budget",
                                 help="the privacy ledger: set a total (data owner), show it, list its charges")
    actions = budget.add_subparsers(dest="action", required=True)
    for name, handler, text in (("set", _set,
                                 "set or change a total budget (the data owner's action; creates the ledger)"),
                                ("show", _show, "print the total, spent and left, the charges and the kept releases"),
                                ("history", _history, "list every charge and every owner action")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--db", required=True, help=DB_HELP)
        action.add_argument("--tables", type=table_map, help=TABLES_HELP)
        add_ledger_options(action)
        action.add_argument("--key-file", type=Path, help=f"the ledger's key (default: ${KEY_ENV}, else LEDGER.key)")
        action.set_defaults(handler=handler)
    total = actions.choices["set"].add_mutually_exclusive_group()
    total.add_argument("--epsilon", type=float, help="the total in pure ε-DP")
    total.add_argument("--rho", type=float, help="the total in ρ-zCDP (ε batches then cost ε²/2 each)")
    actions.choices["set"].add_argument("--schema", type=Path,
                                        help="the schema the dataset is bound to (needed the first "
                                        "time, and with --rebind); every charge checks it and the database file")
    actions.choices["set"].add_argument("--rebind", action="store_true", help="bind the dataset to a new database file "
                                        "or schema, or to a file another dataset is bound to (recorded as an owner "
                                        "action)")
    actions.choices["set"].add_argument("--share-releases", action=argparse.BooleanOptionalAction, default=None,
                                        help="let every analyst of the dataset reuse every kept release for free "
                                        "(recorded as an owner action); --no-share-releases: each analyst reuses "
                                        "only the releases her own charges paid for (the default)")
    actions.choices["show"].add_argument("--delta", type=float, default=DEFAULT_DELTA,
                                         help=f"δ for the (ε, δ)-DP reading of a ρ budget (default {DEFAULT_DELTA:g})")
    actions.choices["show"].add_argument("--chart", type=Path,
                                         help="also draw the spend over time into this image (.png, .svg, .pdf): the "
                                         "cumulative charge per analyst and the totals (needs the optional extra "
                                         "plots: pip install \"dpsql[plots]\")")


def account(arguments: argparse.Namespace) -> Account:
    """The Account named by --db, --ledger, --key-file, --dataset and --analyst."""
    if is_address(arguments.db):
        if arguments.ledger is None or arguments.dataset is None:
            raise ProgrammingError(f"--db {arguments.db.split('://')[0]}://... is a server, not a file: pass --ledger "
                                   "PATH (the ledger file) and --dataset NAME (the budget's name in it).")
        return Account(ledger=Ledger(arguments.ledger, key_file=getattr(arguments, "key_file", None)),
                       dataset=arguments.dataset, analyst=arguments.analyst)
    database = Path(arguments.db)
    ledger = Ledger(arguments.ledger if arguments.ledger is not None else default_path(database),
                    key_file=getattr(arguments, "key_file", None))
    return Account(ledger=ledger, dataset=arguments.dataset or database.name, analyst=arguments.analyst)


def _binding(arguments: argparse.Namespace) -> Binding | None:
    """What --schema binds the dataset to: the schema, and the data's identity (a file's, or the backend's).

    The data are opened as a run opens them and every declared table is looked up in their catalog
    (names and types, no rows), so a file that is not a database dpsql can read, or one without the
    schema's tables, is refused before anything is written.
    """
    schema = Schema.load(arguments.schema) if arguments.schema is not None else None
    try:
        backend = choose_backend(arguments.db, tables=arguments.tables,
                                 table=file_table(arguments.db, schema) if schema is not None else None)
    except OperationalError as err:
        raise OperationalError(f"{err} Nothing was set.") from err
    try:
        if schema is None:
            return None
        problems = {}
        for table in schema.tables.values():
            try:
                backend.check_table(table)
            except SchemaError as err:
                problems[table.name] = str(err)
        if problems:
            raise SchemaError(f"the data at '{arguments.db}' do not fit the schema {arguments.schema} (table(s) "
                              f"{', '.join(problems)}): {' '.join(problems.values())} Nothing was set.")
        return Binding(schema=schema.canonical(), database=backend.identity)
    finally:
        backend.close()


def _set(arguments: argparse.Namespace) -> int:
    if not is_address(arguments.db) and not Path(arguments.db).is_file():
        raise OperationalError(f"no database file at '{arguments.db}'; pass the data file to "
                               "--db (its budget is kept in a ledger next to it, or in --ledger). Nothing was set.")
    books = account(arguments)
    sharing = arguments.share_releases
    if arguments.epsilon is None and arguments.rho is None and sharing is None:
        raise ProgrammingError("dpsql budget set needs a total (--epsilon E or --rho R), --share-releases or "
                               "--no-share-releases. Nothing was set.")
    if sharing is not None and books.analyst:
        raise ProgrammingError("--share-releases is the dataset's setting, for every analyst: drop --analyst. "
                               "Nothing was set.")
    if arguments.epsilon is not None or arguments.rho is not None:
        total = (PrivacyCost(epsilon=arguments.epsilon) if arguments.epsilon is not None
                 else PrivacyCost(rho=arguments.rho))
        binding = _binding(arguments)  # the data are opened and checked before anything is written
        books.ledger.set_total(books.dataset, total, analyst=books.analyst, binding=binding, rebind=arguments.rebind)
    if sharing is not None:
        books.ledger.set_sharing(books.dataset, sharing)
    print(f"ledger: {books.ledger.path} (key {books.ledger.key_path})")
    _print_balance(books.ledger.balance(books.dataset, books.analyst), DEFAULT_DELTA)
    _print_sharing(books.ledger.shares_releases(books.dataset))
    return 0


def _show(arguments: argparse.Namespace) -> int:
    if arguments.chart is not None:
        charts.require()  # before printing anything
    books = account(arguments)
    balance = books.ledger.balance(books.dataset, books.analyst)
    history = books.ledger.history(books.dataset, books.analyst)
    print(f"ledger: {books.ledger.path}")
    _print_balance(balance, arguments.delta)
    _print_charges(history)
    _print_sharing(books.ledger.shares_releases(books.dataset))
    _print_releases(books.ledger.releases(books.dataset))
    if arguments.chart is not None:
        try:
            spend_chart.draw(history, balance, arguments.chart)
        except OSError as err:
            raise InterfaceError(f"cannot write the chart '{arguments.chart}': {err.strerror or err}.") from err
        print(f"chart: {arguments.chart}", file=sys.stderr)
    return 0


def _history(arguments: argparse.Namespace) -> int:
    books = account(arguments)
    print(f"ledger: {books.ledger.path}")
    _print_charges(books.ledger.history(books.dataset, books.analyst))
    print("owner actions:")
    for action in books.ledger.actions(books.dataset):
        who = f" for analyst '{action.analyst}'" if action.analyst else ""
        print(f"  #{action.id}  {action.time}  {action.action} total {action.total.describe()}{who}{_bound(action)}  "
              f"by {action.actor}")
    return 0


def _bound(action: Action) -> str:
    """What an action bound the dataset to: the schema's fingerprint and the database file."""
    if action.binding is None:
        return ""
    binding = action.binding
    database = f", database {binding.database}" if binding.database else ", no database file"
    return f"; bound to schema {binding.fingerprint[:12]}{database}"


def _print_balance(balance: Balance, delta: float) -> None:
    unit = UNIT[balance.family]
    print(f"dataset: {balance.dataset} ({balance.charges} charge(s); budget in {balance.family})")
    for limit in balance.limits:
        print(f"{limit.scope}:")
        print(f"  total  {unit}={_number(limit.total)}{_as_dp(balance, limit.total, delta)}")
        print(f"  spent  {unit}={_number(limit.spent)}{_as_dp(balance, limit.spent, delta)}")
        print(f"  left   {unit}={_number(limit.left)}")


def _as_dp(balance: Balance, amount: Fraction, delta: float) -> str:
    """For a ρ amount, the (ε, δ)-DP it implies (Canonne–Kamath–Steinke conversion)."""
    if balance.family != "rho":
        return ""
    return f"  ≡ (ε={epsilon_from_rho(float(amount), delta=delta):.4g}, δ={delta:g})-DP"


def _print_charges(charges: list[Charge]) -> None:
    print(f"charges: {len(charges)}")
    for charge in charges:
        # ε²/2 on a ρ budget
        priced = "" if charge.price == charge.cost.exact else f" (charged ρ={_number(charge.price)})"
        who = f"  analyst {charge.analyst}" if charge.analyst else ""
        print(f"  #{charge.id}  {charge.time}  {charge.cost.describe()}{priced}  {charge.mechanism}{who}  "
              f"sql {charge.sql_hash[:12]}  batch {charge.batch_hash[:12]}")


def _print_sharing(shared: bool) -> None:
    print("kept releases: " + ("shared by every analyst of the dataset (dpsql budget set --no-share-releases to stop)"
                               if shared else "each analyst reuses only her own (dpsql budget set --share-releases "
                               "to share them)"))


def _print_releases(releases: list[KeptRelease]) -> None:
    """Each kept release, and under it what it can answer (its payload's ``summary``)."""
    if not releases:
        print("Stored releases: none")
        return
    print(f"Stored releases: {len(releases)}")
    for release in releases:
        who = f", analyst {release.analyst}" if release.analyst else ""
        print(f"  release #{release.id} (charge #{release.charge}, {release.time}{who})")
        for line in _summary(release.payload):
            print(f"      {line}")


def _summary(payload: str) -> list[str]:
    """The lines of ``json.loads(payload)["summary"]`` (a list of str), else ``(no summary)``."""
    try:
        summary = json.loads(payload).get("summary")
    except (ValueError, AttributeError, RecursionError):
        summary = None
    if not isinstance(summary, list) or not summary or not all(isinstance(line, str) for line in summary):
        return ["(no summary)"]
    return [part for line in summary for part in line.splitlines() or [""]]


def _number(value: Fraction) -> str:
    return f"{float(value):.10g}"
