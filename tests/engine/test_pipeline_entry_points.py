"""One request pipeline behind every entry point: the Python API, the ``dpsql`` command and ``dpsql serve``.

The same scenarios run, in the same order, against ``Cursor.execute``/``explain``, ``dpsql run``/
``dpsql explain`` (``dpsql.cli.main``) and a real ``dpsql serve`` process over psycopg, each with its
own database of the same generated rows and its own ledger (analyst alice, cap ε = 1, as ``dpsql
serve`` writes it): a measured batch, the same batch again
(free: answered from the kept release), a mixed batch (one statement free, one measured), an
accuracy target, a cost in BigQuery's WITH DIFFERENTIAL_PRIVACY OPTIONS clause, a GROUP BY ROLLUP (one
table with NULL keys), a cost the budget refuses, and EXPLAIN of each kind. Every entry point must give
the same EXPLAIN text, the same refusal, the same columns, groups and standard errors (they do not
depend on the noise), and leave the same charges in its ledger (cost, mechanism, and the hashes of the
SQL text and the batch).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _server_process import PASSWORDS, SCHEMA, Served, make_database, start, write_config

import dpsql
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Ledger, default_path
from dpsql.budget.records import Binding
from dpsql.cli import main
from dpsql.schema import Schema

DATASET = "people.duckdb"
#: The columns whose values are noisy (compared by presence only); every other column must match.
NOISY = {"n", "total"}

MEASURED = "SELECT sex, COUNT(*) AS n FROM census GROUP BY sex; SELECT SUM(income) AS total FROM census WHERE age >= 30"
MIXED = "SELECT sex, COUNT(*) AS n FROM census GROUP BY sex; SELECT age, COUNT(*) AS n FROM census GROUP BY age"
TARGETED = "SELECT sex, COUNT(*) AS n FROM census WHERE age < 50 GROUP BY sex"
CLAUSE = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.05) COUNT(*) AS n FROM census WHERE income >= 50000; "
          "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.05, delta = 0) sex, COUNT(*) AS n FROM census "
          "WHERE income >= 50000 GROUP BY sex")
ROLLED = ("SELECT sex, age, GROUPING(sex, age) AS g, COUNT(*) AS n FROM census WHERE income < 50000 "
          "GROUP BY ROLLUP (sex, age) ORDER BY g, sex, age")

#: (what, SQL, how its cost is given): run or explain, in this order, at every entry point.
SCENARIOS: list[tuple[str, str, dict[str, float]]] = [
    ("explain", MEASURED, {"epsilon": 0.25}),
    ("run", MEASURED, {"epsilon": 0.25}),                # measured, charged ε = 0.25
    ("explain", MEASURED, {"epsilon": 0.25}),            # every statement free
    ("run", MEASURED, {"epsilon": 0.25}),                # free: nothing charged
    ("explain", MIXED, {"epsilon": 0.1}),
    ("run", MIXED, {"epsilon": 0.1}),                    # statement 1 free (kept beats ε = 0.1), 2 measured
    ("explain", TARGETED, {"max_stddev": 15.0}),
    ("run", TARGETED, {"max_stddev": 15.0}),             # the least cost meeting the target
    ("explain", CLAUSE, {}),
    ("run", CLAUSE, {}),                                 # the clause's cost, ε = 0.1
    ("explain", ROLLED, {"epsilon": 0.05}),
    ("run", ROLLED, {"epsilon": 0.05}),                  # three grouping sets, one table, charged ε = 0.05
    ("explain", MEASURED, {"epsilon": 5.0}),
    ("run", MEASURED, {"epsilon": 5.0}),                 # over alice's cap: refused, nothing charged
]


@dataclass(frozen=True)
class Outcome:
    """What an entry point gave back: the result tables or the EXPLAIN text, or the refusal's message."""

    tables: list[pa.Table] | None = None
    text: str | None = None
    error: str | None = None


class EntryPoint(Protocol):
    folder: Path

    def run(self, sql: str, cost: dict[str, float]) -> Outcome: ...

    def explain(self, sql: str, cost: dict[str, float]) -> Outcome: ...


class PythonApi:
    """``dpsql.connect(..., analyst="alice")``: one connection, ``Cursor.execute`` and ``Cursor.explain``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.connection = dpsql.connect(folder / DATASET, schema=folder / "schema.toml", analyst="alice")

    def run(self, sql: str, cost: dict[str, float]) -> Outcome:
        try:
            return Outcome(tables=self.connection.cursor().execute(sql, **cost).fetch_arrow_tables())
        except dpsql.Error as err:
            return Outcome(error=str(err))

    def explain(self, sql: str, cost: dict[str, float]) -> Outcome:
        return Outcome(text=self.connection.cursor().explain(sql, **cost))


class CommandLine:
    """``dpsql run`` (results written with --out) and ``dpsql explain``, in this process (``dpsql.cli.main``)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.calls = folder, 0

    def _main(self, command: str, sql: str, cost: dict[str, float], *extra: str) -> tuple[int, str, str]:
        self.calls += 1
        queries = self.folder / f"queries_{self.calls}.sql"
        queries.write_text(sql)
        flags = [part for name, value in cost.items() for part in (f"--{name.replace('_', '-')}", str(value))]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main([command, str(queries), "--db", str(self.folder / DATASET), "--schema",
                           str(self.folder / "schema.toml"), "--analyst", "alice", *flags, *extra])
        return status, out.getvalue(), err.getvalue()

    def run(self, sql: str, cost: dict[str, float]) -> Outcome:
        folder = self.folder / f"out_{self.calls + 1}"
        status, _, err = self._main("run", sql, cost, "--out", str(folder))
        if status != 0:
            return Outcome(error=_cli_message(err))
        return Outcome(tables=[pq.read_table(path) for path in sorted(folder.glob("statement_*.parquet"),
                                                                         key=lambda p: int(p.stem.split("_")[1]))])

    def explain(self, sql: str, cost: dict[str, float]) -> Outcome:
        status, out, err = self._main("explain", sql, cost)
        assert status == 0, err
        return Outcome(text=out.removesuffix("\n"))


class Server:
    """A real ``dpsql serve`` process; alice's session sets the cost (or target) and sends the batch."""

    def __init__(self, served: Served) -> None:
        self.served, self.folder = served, served.folder

    def _session(self, cost: dict[str, float]) -> psycopg.Connection[Any]:
        connection = psycopg.connect(self.served.dsn("alice", PASSWORDS["alice"]), autocommit=True)
        for name, value in cost.items():
            connection.execute(f"SET dpsql.{name} = {value}")
        return connection

    def run(self, sql: str, cost: dict[str, float]) -> Outcome:
        with self._session(cost) as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql)
            except psycopg.Error as err:
                assert err.diag.message_primary is not None
                return Outcome(error=err.diag.message_primary)
            tables = []
            while True:
                assert cursor.description is not None
                names = [column.name for column in cursor.description]
                rows = cursor.fetchall()
                tables.append(pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)}))
                if not cursor.nextset():
                    return Outcome(tables=tables)

    def explain(self, sql: str, cost: dict[str, float]) -> Outcome:
        with self._session(cost) as connection:
            rows = connection.execute(f"EXPLAIN {sql}").fetchall()
        return Outcome(text="\n".join(row[0] for row in rows))


def _cli_message(stderr: str) -> str:
    """The refusal ``dpsql`` printed: its last line, ``dpsql: KindOfError: message``."""
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("dpsql: "), stderr
    return line.split(": ", 2)[2]


def _ledger_like_the_server(folder: Path) -> None:
    """The caps ``dpsql serve`` writes into its ledger at start (write_config: alice ε = 1, bob ε = 0.5)."""
    ledger = Ledger(default_path(folder / DATASET))
    binding = Binding.of(Schema.load(SCHEMA), folder / DATASET)
    for analyst, cap in (("alice", 1.0), ("bob", 0.5)):
        ledger.set_total(DATASET, PrivacyCost(epsilon=cap), analyst=analyst, binding=binding)


Charge = tuple[str, str, str, str, str | None]


@dataclass(frozen=True)
class Found:
    """Per entry point: every scenario's outcome, in order, and the charges its ledger holds at the end."""

    outcomes: dict[str, list[Outcome]]
    charges: dict[str, list[Charge]]


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Found]:
    """Every scenario's outcome at every entry point, each with its own database and ledger."""
    folders = {name: tmp_path_factory.mktemp(name) for name in ("api", "cli", "serve")}
    for folder in folders.values():
        make_database(folder)  # the same generated rows (a seeded generator), the ledger bound to this file
    for name in ("api", "cli"):
        _ledger_like_the_server(folders[name])
    with contextlib.ExitStack() as stack:
        api = PythonApi(folders["api"])
        stack.callback(api.connection.close)
        served = start(folders["serve"], write_config(folders["serve"]))
        stack.callback(served.stop)
        entries: dict[str, EntryPoint] = {"api": api, "cli": CommandLine(folders["cli"]), "serve": Server(served)}
        outcomes: dict[str, list[Outcome]] = {name: [] for name in entries}
        for what, sql, cost in SCENARIOS:
            for name, entry in entries.items():
                outcomes[name].append(entry.run(sql, cost) if what == "run" else entry.explain(sql, cost))
        yield Found(outcomes=outcomes, charges={name: _charges(folder) for name, folder in folders.items()})


def _charges(folder: Path) -> list[Charge]:
    """The ledger's charges: cost, mechanism, the hashes of the SQL text and of the batch, the analyst."""
    return [(c.cost.describe(), c.mechanism, c.sql_hash, c.batch_hash, c.analyst)
            for c in Ledger(default_path(folder / DATASET)).history(DATASET)]


def _comparable(table: pa.Table) -> dict[str, list[object]]:
    """A result table without its noisy values: the group columns exactly, the standard errors rounded."""
    found: dict[str, list[object]] = {}
    for name in table.column_names:
        values = table.column(name).to_pylist()
        if name in NOISY:
            found[name] = [value is not None for value in values]
        elif name.endswith("_stddev"):
            found[name] = [float(f"{value:.9g}") for value in values]
        else:
            found[name] = values
    return found


def _metadata(table: pa.Table) -> dict[str, Any]:
    return json.loads(table.schema.metadata[b"dpsql"])


@pytest.mark.parametrize("index", range(len(SCENARIOS)),
                         ids=[f"{i + 1}-{what}-{next(iter(cost), 'clause')}" for i, (what, _, cost) in
                              enumerate(SCENARIOS)])
def test_every_entry_point_gives_the_same_outcome(found: Found, index: int) -> None:
    what, _, cost = SCENARIOS[index]
    api, cli, serve = (found.outcomes[name][index] for name in ("api", "cli", "serve"))
    if what == "explain":
        assert api.text is not None and "Data read by: DuckDBBackend" in api.text
        assert cli.text == api.text and serve.text == api.text
    elif cost.get("epsilon") == 5.0:
        assert api.error is not None and "Nothing was run or charged" in api.error and "alice" in api.error
        assert cli.error == api.error and serve.error == api.error
    else:
        assert api.tables is not None and cli.tables is not None and serve.tables is not None, (api, cli, serve)
        expected = [_comparable(table) for table in api.tables]
        assert [_comparable(table) for table in cli.tables] == expected
        assert [_comparable(table) for table in serve.tables] == expected
        assert [_metadata(table) for table in cli.tables] == [_metadata(table) for table in api.tables]


def test_the_scenarios_cover_each_path(found: Found) -> None:
    """The Python API's outcomes show what each scenario exercised: measured, free, mixed, a target, the clause."""
    texts = [o.text for o in found.outcomes["api"] if o.text is not None]
    assert "Statement 1: free (answered by release #" in texts[1] and "Cost: nothing" in texts[1]
    assert "Statement 1: free" in texts[2] and "Statement 2: measured" in texts[2]
    assert "Accuracy target: least cost ε=" in texts[3]
    assert "Cost: ε=0.1" in texts[4]
    spent = [[_metadata(t)["budget_spent"] for t in o.tables] for o in found.outcomes["api"] if o.tables is not None]
    assert spent[0] == ["ε=0.25", "ε=0.25"]
    assert all(s.startswith("nothing: answered by release") for s in spent[1])
    assert spent[2][0].startswith("nothing: answered by") and spent[2][1] == "ε=0.1"
    assert spent[4] == ["ε=0.1", "ε=0.1"]
    target = found.outcomes["api"][7].tables
    assert target is not None and _metadata(target[0])["accuracy_target"]["least_cost"] == found.charges["api"][2][0]
    assert max(target[0].column("n_stddev").to_pylist()) <= 15.0
    rolled = found.outcomes["api"][11].tables
    assert rolled is not None and len(rolled) == 1 and rolled[0].num_rows == 2 * 10 + 2 + 1
    assert rolled[0].column("g").to_pylist() == [0] * 20 + [1, 1, 3] and rolled[0].column("sex")[22].as_py() is None


def test_every_entry_point_charges_the_same(found: Found) -> None:
    """Charges, in order: the measured batch, the mixed batch's new statement, the target's least cost,
    the clause's cost, the rollup's (the free batch and the refused one charge nothing); the same SQL and
    batch hashes."""
    charges = found.charges["api"]
    assert found.charges["cli"] == charges and found.charges["serve"] == charges
    assert [c[0] for c in charges[:2]] == ["ε=0.25", "ε=0.1"] and [c[0] for c in charges[3:]] == ["ε=0.1", "ε=0.05"]
    assert 0 < float(charges[2][0].removeprefix("ε=")) < 1
    assert all(c[4] == "alice" for c in charges)
