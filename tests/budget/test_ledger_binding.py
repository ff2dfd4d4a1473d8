"""The ledger's binding and tamper evidence (issue 14, item 3).

A dataset's budget is bound to its database file and to the schema's privacy-relevant parts by the
owner's ``dpsql budget set --schema``; a connection with another file or schema is refused and
charges nothing. The history is an HMAC chain under the owner's key: edits, deletions, swaps and a
missing or wrong key fail closed.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest

import dpsql
from _helpers import sql_tampering as _sql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.account import Account
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import KEY_ENV, BatchRecord, Binding, Ledger, default_path
from dpsql.cli import main
from dpsql.errors import BudgetNotSetError, LedgerError, ProgrammingError
from dpsql.schema import Schema

SCHEMA = """
[tables.people]
privacy_unit = { column = "pid", max_rows = 2 }

[tables.people.columns.age]
type = "integer"
lower = 0
upper = 99
bin_width = 10
resolution = 1

[tables.people.columns.sex]
type = "categorical"
values = ["F", "M"]

[tables.people.columns.income]
type = "numeric"
lower = 0
upper = 1000
bin_width = 100
"""
BATCH = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
RECORD = BatchRecord.of(BATCH, None, PrivacyCost(epsilon=0.5), "matrix mechanism, discrete Laplace")


def _make_database(path: Path, rows: int = 400) -> Path:
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE people AS SELECT i // 2 AS pid, CAST(i % 100 AS INTEGER) AS "
                    "age, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex, CAST(i % 1000 AS DOUBLE) AS income "
                    f"FROM range({rows}) AS r(i)")
    return path


@pytest.fixture()
def owner(tmp_path: Path) -> dict[str, Path]:
    """A database, its schema, and the owner's `dpsql budget set --schema` (ε = 5)."""
    database = _make_database(tmp_path / "people.duckdb")
    schema = tmp_path / "schema.toml"
    schema.write_text(SCHEMA)
    assert main(["budget", "set", "--db", str(database), "--schema", str(schema), "--epsilon", "5"]) == 0
    return {"db": database, "schema": schema, "ledger": default_path(database)}


def _no_data_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data were read")

    monkeypatch.setattr(DuckDBBackend, "cell_data", refuse)


def _refused(database: Path, schema: str, phrase: str, monkeypatch: pytest.MonkeyPatch, batch: str = BATCH,
             **connect: object) -> None:
    """Every query on this connection fails with a LedgerError containing ``phrase``; nothing is read or charged."""
    with monkeypatch.context() as patch:
        _no_data_reads(patch)
        with dpsql.connect(database, schema=schema, **connect) as connection:  # type: ignore[arg-type]
            cursor = connection.cursor()
            with pytest.raises(LedgerError, match=phrase) as caught:
                cursor.execute(batch, epsilon=0.5)
            assert "Nothing was run or charged" in str(caught.value) and cursor.description is None
            assert "Budget: unknown, so every query fails until this is fixed" in cursor.explain(batch, epsilon=0.5)


# ------------------------------------------------------------------------------- the schema's fingerprint
CHANGES = {
    "max_rows": ("max_rows = 2", "max_rows = 3"),
    "privacy unit": ('privacy_unit = { column = "pid", max_rows = 2 }', 'privacy_unit = "row"'),
    "measure bounds": ("upper = 1000\nbin_width = 100", "upper = 1000\nbin_width = 100\nmeasure_upper = 5000"),
    "domain": ("upper = 99", "upper = 120"),
    "resolution": ("resolution = 1", "resolution = 2"),
    "categories": ('values = ["F", "M"]', 'values = ["F", "M", "X"]'),
    "out_of_domain": ('values = ["F", "M"]', 'values = ["F", "M"]\nout_of_domain = "exclude"'),
    "truncation": ("bin_width = 100", 'bin_width = 100\ntruncate = "svt"'),
    "table": ("[tables.people", "[tables.persons"),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_every_privacy_relevant_change_changes_the_fingerprint(change: str) -> None:
    old, new = CHANGES[change]
    assert old in SCHEMA
    assert Schema.load(SCHEMA.replace(old, new)).fingerprint() != Schema.load(SCHEMA).fingerprint()


def test_layout_key_order_bins_and_the_null_group_leave_the_fingerprint_alone() -> None:
    """The fingerprint is of the parsed declaration, not of the text; GROUP BY bins and `other`
    only choose which sums of the same base cells are shown."""
    reordered = SCHEMA.replace('type = "categorical"\nvalues = ["F", "M"]',
                               '# the sexes\nvalues = [ "F","M" ]\ntype = "categorical"')
    rebinned = SCHEMA.replace("bin_width = 10\nresolution = 1", "bin_width = 5\nresolution = 1")
    shown = SCHEMA.replace('values = ["F", "M"]', 'values = ["F", "M"]\nother = true')
    fingerprints = {Schema.load(text).fingerprint() for text in (SCHEMA, reordered, rebinned, shown)}
    assert len(fingerprints) == 1


@pytest.mark.slow
def test_the_fingerprint_is_the_same_in_another_process() -> None:
    """SHA-256 of canonical JSON: no Python hash(), no dict order, no float repr in it."""
    code = "import sys; from dpsql.schema import Schema; print(Schema.load(sys.stdin.read()).fingerprint())"
    outputs = {subprocess.run([sys.executable, "-c", code], input=SCHEMA, capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2")}
    assert outputs == {Schema.load(SCHEMA).fingerprint()}
    assert len(Schema.load(SCHEMA).fingerprint()) == 64


# ------------------------------------------------------------------------------- binding: schema and database
@pytest.mark.parametrize("change, named", [("max_rows", "tables.people.privacy_unit.max_rows"),
                                           ("privacy unit", "tables.people.privacy_unit"),
                                           ("measure bounds", "tables.people.columns.income.measure_bounds"),
                                           ("table", "tables.persons (not in the bound schema)")])
def test_a_schema_that_differs_from_the_bound_one_is_refused_and_charges_nothing(
        owner: dict[str, Path], monkeypatch: pytest.MonkeyPatch, change: str, named: str) -> None:
    old, new = CHANGES[change]
    batch = BATCH.replace("people", "persons") if change == "table" else BATCH
    _refused(owner["db"], SCHEMA.replace(old, new),
             rf"bound \(by the data owner with dpsql budget set on 20.*{re.escape(named)}",
             monkeypatch, batch)
    ledger = Ledger(owner["ledger"])
    assert ledger.history("people.duckdb") == [] and ledger.balance("people.duckdb").left == 5
    with dpsql.connect(owner["db"], schema=SCHEMA) as connection:  # the owner's schema answers
        assert connection.cursor().execute(BATCH, epsilon=0.5).rowcount == 2
    assert len(ledger.history("people.duckdb")) == 1


def test_another_database_file_with_the_same_name_is_refused(owner: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "elsewhere" / "people.duckdb"
    copy.parent.mkdir()
    shutil.copy(owner["db"], copy)  # the same bytes, another file
    _refused(copy, SCHEMA, "not the bound file", monkeypatch, ledger=owner["ledger"])
    other = _make_database(tmp_path / "other.duckdb", rows=10)
    _refused(other, SCHEMA, "not the bound file", monkeypatch, ledger=owner["ledger"], dataset="people.duckdb")
    assert Ledger(owner["ledger"]).history("people.duckdb") == []


def test_a_file_replaced_at_the_bound_path_is_refused(owner: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    os.replace(_make_database(tmp_path / "fresh.duckdb", rows=10), owner["db"])  # `mv fresh.duckdb people.duckdb`
    _refused(owner["db"], SCHEMA, "not the bound file", monkeypatch)
    assert Ledger(owner["ledger"]).history("people.duckdb") == []


def test_appending_rows_in_place_keeps_the_binding(owner: dict[str, Path]) -> None:
    with duckdb.connect(str(owner["db"])) as con:  # the owner adds data: DuckDB writes the same file
        con.execute("INSERT INTO people SELECT pid + 1000, age, sex, income FROM people")
        con.execute("CHECKPOINT")
    with dpsql.connect(owner["db"], schema=SCHEMA) as connection:
        assert connection.cursor().execute(BATCH, epsilon=0.5).rowcount == 2
        assert connection.budget.remaining == 4.5


def test_a_connection_object_cannot_stand_in_for_a_bound_file(owner: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with duckdb.connect(str(owner["db"])) as con:
        _refused(con, SCHEMA, "has no database file", monkeypatch, ledger=owner["ledger"], dataset="people.duckdb")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- owner actions
def test_the_first_total_needs_a_schema_and_leaves_nothing_behind(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    database = _make_database(tmp_path / "people.duckdb")
    assert main(["budget", "set", "--db", str(database), "--epsilon", "5"]) == 2
    assert "ProgrammingError: dataset 'people.duckdb' is not bound yet" in capsys.readouterr().err
    assert not default_path(database).exists() and not Path(f"{default_path(database)}.key").exists()


def test_the_key_is_created_private_beside_the_ledger(owner: dict[str, Path]) -> None:
    key = Path(f"{owner['ledger']}.key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(bytes.fromhex(key.read_text().strip())) == 32


def test_rebinding_is_an_explicit_recorded_owner_action(owner: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    wider = tmp_path / "wider.toml"
    wider.write_text(SCHEMA.replace(*CHANGES["measure bounds"]))
    books = ["budget", "set", "--db", str(owner["db"]), "--schema", str(wider), "--epsilon", "5"]
    assert main(books) == 2
    err = capsys.readouterr().err
    assert "ProgrammingError" in err and "measure_bounds" in err and "add --rebind" in err
    with dpsql.connect(owner["db"], schema=SCHEMA) as connection:  # nothing changed
        connection.cursor().execute(BATCH, epsilon=0.5)
    assert main([*books, "--rebind"]) == 0
    _refused(owner["db"], SCHEMA, "measure_bounds", monkeypatch)  # the old schema no longer matches
    with dpsql.connect(owner["db"], schema=wider) as connection:
        connection.cursor().execute(BATCH, epsilon=0.5)
    actions = Ledger(owner["ledger"]).actions("people.duckdb")
    assert [a.action for a in actions] == ["set", "rebind"]
    assert [a.binding.fingerprint for a in actions if a.binding] == [Schema.load(SCHEMA).fingerprint(),
                                                                     Schema.load(wider.read_text()).fingerprint()]
    capsys.readouterr()
    assert main(["budget", "history", "--db", str(owner["db"])]) == 0
    fingerprint = Schema.load(wider.read_text()).fingerprint()
    assert f"rebind total ε=5; bound to schema {fingerprint[:12]}" in capsys.readouterr().out


def test_a_second_dataset_on_the_same_database_file_is_refused_unless_rebound(
        owner: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Two datasets bound to one file would keep two budgets, and caps set on one would not apply to the other."""
    books = ["budget", "set", "--db", str(owner["db"]), "--schema", str(owner["schema"]), "--dataset", "again",
             "--epsilon", "5"]
    assert main(books) == 2
    err = capsys.readouterr().err
    assert "ProgrammingError" in err and "dataset 'people.duckdb'" in err and "--rebind" in err
    ledger = Ledger(owner["ledger"])
    with pytest.raises(BudgetNotSetError):
        ledger.balance("again")  # nothing was set
    binding = Binding.of(Schema.load(SCHEMA), owner["db"])
    with pytest.raises(ProgrammingError, match=r"already bound to dataset 'people\.duckdb'"):
        ledger.set_total("again", PrivacyCost(epsilon=5.0), binding=binding)
    assert main([*books, "--rebind"]) == 0  # the owner's decision, recorded
    assert [a.action for a in ledger.actions("again")] == ["rebind"]
    assert [a.action for a in ledger.actions("people.duckdb")] == ["set"]
    other = _make_database(owner["db"].parent / "other.duckdb")
    ledger.set_total("other", PrivacyCost(epsilon=1.0), binding=Binding.of(Schema.load(SCHEMA), other))
    assert [a.action for a in ledger.actions("other")] == ["set"]  # another file binds without --rebind


def test_a_total_change_without_schema_keeps_the_binding(owner: dict[str, Path]) -> None:
    assert main(["budget", "set", "--db", str(owner["db"]), "--epsilon", "7"]) == 0
    with dpsql.connect(owner["db"], schema=SCHEMA) as connection:
        assert connection.cursor().execute(BATCH, epsilon=0.5).connection.budget.remaining == 6.5
    with pytest.raises(ProgrammingError, match="needs the new binding"):
        Ledger(owner["ledger"]).set_total("people.duckdb", PrivacyCost(epsilon=7.0), rebind=True)


def test_analyst_names_with_totals_are_required_once_the_owner_sets_one(owner: dict[str, Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["budget", "set", "--db", str(owner["db"]), "--analyst", "ana", "--epsilon", "1"]) == 0
    _refused(owner["db"], SCHEMA, "has per-analyst totals, .* this connection names no analyst", monkeypatch)
    _refused(owner["db"], SCHEMA, "analyst 'mallory' has none", monkeypatch, analyst="mallory")
    with dpsql.connect(owner["db"], schema=SCHEMA, analyst="ana") as connection:
        assert connection.cursor().execute(BATCH, epsilon=0.5).rowcount == 2


# ------------------------------------------------------------------------------- tamper evidence
TAMPERING: dict[str, Callable[[Path], None]] = {
    "edited amount": _sql("UPDATE charges SET price = '1/100', cost = '1/100' WHERE id = 3"),
    "edited total": _sql("UPDATE actions SET total = '500' WHERE id = 1"),
    "deleted charge": _sql("DELETE FROM charges WHERE id = 3"),
    "deleted last charge": _sql("DELETE FROM charges WHERE id = 4"),
    "deleted last charge and rewound head": _sql(
        "UPDATE head SET count = 3, last = (SELECT mac FROM charges WHERE id = 3)", "DELETE FROM charges WHERE id = 4"),
    "swapped rows": _sql("UPDATE charges SET id = -id WHERE id IN (3, 4)", "UPDATE charges SET id = 3 WHERE id = -4",
                         "UPDATE charges SET id = 4 WHERE id = -3"),
    "swapped amounts": _sql("UPDATE charges SET price = CASE id WHEN 2 THEN '1/4' ELSE '1/2' END, "
                            "cost = CASE id WHEN 2 THEN '1/4' ELSE '1/2' END WHERE id IN (2, 4)"),
    "copied row": _sql("INSERT INTO charges SELECT 5, time, dataset, analyst, batch_hash, "
                       "sql_hash, mechanism, cost_family, cost, price, mac FROM charges WHERE id = 4"),
    "deleted head": _sql("DELETE FROM head"),
}


@pytest.fixture()
def books(tmp_path: Path) -> Ledger:
    """A ledger with one action (#1) and three charges (#2 ε=1/2, #3 ε=1/2, #4 ε=1/4)."""
    ledger = Ledger(tmp_path / "books.ledger")
    bound = Binding.of(Schema.load(SCHEMA))
    ledger.set_total("people", PrivacyCost(epsilon=5.0), binding=bound)
    for cost in (0.5, 0.5, 0.25):
        ledger.charge("people", PrivacyCost(epsilon=cost), RECORD, binding=bound)
    assert ledger.balance("people").limits[0].spent == Fraction(5, 4)
    return ledger


def _every_operation_fails(ledger: Ledger, phrase: str) -> None:
    bound = Binding.of(Schema.load(SCHEMA))
    for operation in (lambda: ledger.balance("people"), lambda: ledger.history("people"),
                      lambda: ledger.actions("people"),
                      lambda: ledger.charge("people", PrivacyCost(epsilon=0.1), RECORD, binding=bound),
                      lambda: ledger.set_total("people", PrivacyCost(epsilon=20.0), binding=bound),
                      lambda: Account(ledger=ledger, dataset="people", binding=bound).budget(RECORD)):
        with pytest.raises(LedgerError, match=phrase):
            operation()


@pytest.mark.parametrize("tamper", TAMPERING, ids=list(TAMPERING))
def test_an_edited_or_shortened_history_fails_closed(books: Ledger, tamper: str) -> None:
    TAMPERING[tamper](books.path)
    _every_operation_fails(books,
                           "its history does not verify against its key: .*Nothing was run or charged. Restore the "
                                  "file from a backup")
    with sqlite3.connect(books.path) as db:  # and nothing was appended by the refused charge
        assert db.execute("SELECT COUNT(*) FROM charges WHERE price = '1/10'").fetchone()[0] == 0


def test_a_missing_key_fails_closed(books: Ledger) -> None:
    books.key_path.rename(books.key_path.with_name("moved.key"))
    _every_operation_fails(books, "key file of ledger .* is missing .* Restore the key file from a backup")
    assert Ledger(books.path, key_file=books.key_path.with_name("moved.key")).balance("people").left == Fraction(15, 4)


def test_another_ledgers_key_fails_closed(books: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = Ledger(tmp_path / "other.ledger")
    other.set_total("people", PrivacyCost(epsilon=1.0), binding=Binding.of(Schema.load(SCHEMA)))
    monkeypatch.setenv(KEY_ENV, str(other.key_path))
    _every_operation_fails(Ledger(books.path), "is not the key of ledger")


# ------------------------------------------------------------------------------- version-1 ledgers
V1_TABLES = [
    "CREATE TABLE ledger_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ("CREATE TABLE budgets (dataset TEXT NOT NULL, analyst TEXT NOT NULL, family TEXT NOT NULL, total TEXT NOT NULL, "
     "PRIMARY KEY (dataset, analyst))"),
    ("CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, dataset "
     "TEXT NOT NULL, analyst TEXT NOT NULL, batch_hash TEXT NOT NULL, sql_hash TEXT NOT NULL, mechanism TEXT NOT NULL, "
     "cost_family TEXT NOT NULL, cost TEXT NOT NULL, price TEXT NOT NULL)"),
    ("CREATE TABLE actions (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, dataset "
     "TEXT NOT NULL, analyst TEXT NOT NULL, action TEXT NOT NULL, family TEXT NOT NULL, total TEXT NOT "
     "NULL, actor TEXT NOT NULL)"),
    "INSERT INTO ledger_meta VALUES ('format', 'dpsql-ledger'), ('version', '1')",
    "INSERT INTO budgets VALUES ('people.duckdb', '', 'epsilon', '3'), ('firms', '', 'epsilon', '2')",
    ("INSERT INTO actions (time, dataset, analyst, action, family, total, actor) VALUES "
     "('2026-01-01T00:00:00.000000+00:00', 'people.duckdb', '', 'set', 'epsilon', '3', 'owner'), "
     "('2026-01-01T00:00:01.000000+00:00', 'firms', '', 'set', 'epsilon', '2', 'owner')"),
    ("INSERT INTO charges (time, dataset, analyst, batch_hash, sql_hash, mechanism, cost_family, cost, price) VALUES "
     "('2026-01-02T00:00:00.000000+00:00', 'people.duckdb', '', 'b', 's', 'm', 'epsilon', '1/2', '1/2'), "
     "('2026-01-03T00:00:00.000000+00:00', 'firms', '', 'b', 's', 'm', 'epsilon', '1', '1')"),
]


def test_a_version_1_ledger_is_refused_until_the_owner_upgrades_it(owner: dict[str, Path],
                                                                   capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    owner["ledger"].unlink()
    Path(f"{owner['ledger']}.key").unlink()
    with sqlite3.connect(owner["ledger"]) as db:
        for statement in V1_TABLES:
            db.execute(statement)
    _refused(owner["db"], SCHEMA, r"format version 1.*dpsql budget set --db DATABASE --schema SCHEMA", monkeypatch)
    assert main(["budget", "set", "--db", str(owner["db"]), "--schema", str(owner["schema"]), "--epsilon", "3"]) == 0
    ledger = Ledger(owner["ledger"])
    assert [c.price for c in ledger.history("people.duckdb")] == [Fraction(1, 2)]  # the history is kept
    assert [a.action for a in ledger.actions("people.duckdb")] == ["set", "bind"]
    assert ledger.balance("firms").left == 1
    with dpsql.connect(owner["db"], schema=SCHEMA) as connection:
        assert connection.cursor().execute(BATCH, epsilon=0.5).connection.budget.remaining == 2
    with pytest.raises(LedgerError, match=r"dataset 'firms' .* is not bound"):  # until its owner binds it
        ledger.charge("firms", PrivacyCost(epsilon=0.1), RECORD, binding=Binding.of(Schema.load(SCHEMA)))
    with sqlite3.connect(owner["ledger"]) as db:  # and the upgraded history is chained like any other
        db.execute("UPDATE charges SET price = '1/4' WHERE dataset = 'firms'")
    with pytest.raises(LedgerError, match="does not verify"):
        ledger.balance("people.duckdb")


def test_an_unbound_dataset_names_the_command_that_binds_it(tmp_path: Path) -> None:
    with pytest.raises(BudgetNotSetError, match=r"no privacy budget is set for dataset 'people'.*--schema SCHEMA"):
        ledger = Ledger(tmp_path / "books.ledger")
        ledger.set_total("firms", PrivacyCost(epsilon=1.0), binding=Binding.of(Schema.load(SCHEMA)))
        ledger.charge("people", PrivacyCost(epsilon=0.1), RECORD, binding=Binding.of(Schema.load(SCHEMA)))


def test_a_version_1_file_put_in_place_of_an_upgraded_ledger_is_not_upgraded(owner: dict[str, Path]) -> None:
    """A downgrade: someone without the key replaces the ledger with a version-1 file (any history they
    like); the owner's next `budget set` must not sign it."""
    owner["ledger"].unlink()
    with sqlite3.connect(owner["ledger"]) as db:
        for statement in V1_TABLES:
            db.execute(statement)
    binding = Binding.of(Schema.load(SCHEMA), owner["db"])
    with pytest.raises(LedgerError, match=r"its key .* exists, so it was upgraded before"):
        Ledger(owner["ledger"]).set_total("people.duckdb", PrivacyCost(epsilon=3.0), binding=binding)
    with sqlite3.connect(owner["ledger"]) as db:
        assert db.execute("SELECT value FROM ledger_meta WHERE key = 'version'").fetchone() == ("1",)


@pytest.mark.parametrize("binding", ["people.duckdb", ("people.duckdb", "schema.toml"), 3])
def test_a_binding_that_is_not_one_is_refused_before_the_ledger_is_created(tmp_path: Path, binding: object) -> None:
    path = tmp_path / "ledger.dpsql-ledger"
    with pytest.raises(ProgrammingError, match=r"binding= must be a dpsql\.budget\.ledger\.Binding.*Nothing was set"):
        Ledger(path).set_total("people.duckdb", PrivacyCost(epsilon=1.0), binding=binding)
    assert not path.exists()


def test_a_rebind_to_the_same_binding_says_there_is_nothing_to_rebind(owner: dict[str, Path]) -> None:
    binding = Binding.of(Schema.load(SCHEMA), owner["db"])
    with pytest.raises(ProgrammingError, match="already bound to this schema and these data: there is nothing to "
                                               "rebind"):
        Ledger(owner["ledger"]).set_total("people.duckdb", PrivacyCost(epsilon=7.0), binding=binding, rebind=True)
    assert [a.action for a in Ledger(owner["ledger"]).actions("people.duckdb")] == ["set"]  # nothing recorded
