"""A CSV or Parquet file where a database is expected: read once into a locked in-memory DuckDB table
named by the schema, bound in the ledger by its content hash (a changed file is refused as a changed
database is), its ledger next to it, and its errors free of the file's contents."""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.backends import file_identity
from dpsql.backends.base import content_identity, data_file_suffix, data_file_table
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.errors import LedgerError, OperationalError, ProgrammingError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

SCHEMA = Schema.load({"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "income": {"type": "numeric", "lower": 0, "upper": 1000, "bin_width": 500}}}}})
BATCH = """SELECT sex, COUNT(*) AS n FROM people GROUP BY sex;
SELECT SUM(income) AS s FROM people WHERE age BETWEEN 25 AND 34"""
EXACT = ["SELECT sex, COUNT(*) AS n FROM {t} GROUP BY sex ORDER BY sex",
         "SELECT SUM(income) AS s FROM {t} WHERE age BETWEEN 25 AND 34"]


def _rows(count: int = 1500) -> pa.Table:
    return pa.table({"age": [i % 100 for i in range(count)], "sex": ["F" if i % 3 == 0 else "M" for i in range(count)],
                     "income": [float(i % 1000) for i in range(count)]})


def _write(folder: Path, name: str, rows: pa.Table) -> Path:
    path = folder / name
    if name.endswith(".parquet"):
        pq.write_table(rows, path)
    elif name.endswith(".csv.gz"):
        plain = folder / "plain.csv"
        pa_csv.write_csv(rows, plain)
        path.write_bytes(gzip.compress(plain.read_bytes()))
    else:
        pa_csv.write_csv(rows, path)
    return path


def _owner_sets(path: Path) -> Ledger:
    ledger = Ledger(default_path(path))
    ledger.set_total(path.name, PrivacyCost(rho=1e9), binding=Binding.of(SCHEMA, path))
    return ledger


@pytest.mark.parametrize("name", ["people.csv", "people.parquet", "people.csv.gz"])
def test_a_data_file_answers_like_duckdb_on_the_same_file(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, name, _rows())
    ledger = _owner_sets(path)
    assert ledger.path == tmp_path / f"{name}.dpsql-ledger"  # next to the file, as for a database
    with dpsql.connect(path, schema=SCHEMA) as private:
        tables = private.cursor().execute(BATCH, rho=1e8).fetch_arrow_tables()
    reader = "read_parquet" if name.endswith(".parquet") else "read_csv"
    exact = [duckdb.sql(sql.format(t=f"{reader}('{path}')")).fetchall() for sql in EXACT]
    counts, total = tables[0].to_pylist(), tables[1].to_pylist()[0]
    assert [row["sex"] for row in counts] == ["F", "M"]
    for row, (_, n) in zip(counts, exact[0], strict=True):
        assert row["n"] == pytest.approx(n, abs=6 * row["n_stddev"] + 1e-6)
    assert total["s"] == pytest.approx(exact[1][0][0], abs=6 * total["s_stddev"] + 1e-6)
    assert len(ledger.history(path.name)) == 1


def test_a_changed_file_is_refused_and_charged_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, "people.csv", _rows())
    ledger = _owner_sets(path)
    with path.open("a") as handle:
        handle.write("30,M,10\n")  # one more row, written in place: the inode stays, the contents change
    with (pytest.raises(LedgerError, match=r"contents of file .*people.csv' changed since the dataset was bound"),
          dpsql.connect(path, schema=SCHEMA) as private):
        private.cursor().execute(BATCH, epsilon=1.0)
    assert ledger.history(path.name) == []


def test_the_schema_names_the_table_and_the_file_is_not_in_memory_data(tmp_path: Path) -> None:
    path = _write(tmp_path, "adult.csv", _rows(10))
    with DuckDBBackend(path, table="people") as backend:
        assert not backend.in_memory and backend.identity == file_identity(path) == content_identity(path)
        assert backend.connection.sql('SELECT COUNT(*) FROM "people"').fetchall() == [(10,)]
        with pytest.raises(duckdb.Error):  # the locked copy reads no file
            backend.connection.sql(f"SELECT * FROM read_csv('{path}')").fetchall()
    with DuckDBBackend(path) as backend:  # no name given: the file's name without its ending
        assert backend.connection.sql('SELECT COUNT(*) FROM "adult"').fetchall() == [(10,)]
    with pytest.raises(ProgrammingError, match="budget= is an in-memory budget"):
        dpsql.connect(path, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(ProgrammingError, match="rng= is for tests"):
        dpsql.connect(path, schema=SCHEMA, rng=SeededRandomSource(1))


def test_a_file_is_one_table(tmp_path: Path) -> None:
    path = _write(tmp_path, "people.csv", _rows(10))
    two = Schema.load({"tables": {name: {"columns": {"age": {"type": "integer", "lower": 0, "upper": 9}}}
                                  for name in ("people", "visits")}})
    with pytest.raises(ProgrammingError, match=r"declares 2 tables \(people, visits\)"):
        dpsql.connect(path, schema=two)


def test_an_unreadable_file_is_refused_without_quoting_it(tmp_path: Path) -> None:
    path = tmp_path / "people.parquet"
    path.write_text("secret-value-123,not,a,parquet,file\n")
    with pytest.raises(OperationalError, match=r"cannot read .*people.parquet' with read_parquet") as caught:
        DuckDBBackend(path, table="people")
    assert "secret-value-123" not in str(caught.value) and caught.value.__cause__ is None
    with pytest.raises(OperationalError, match="no data file at"):
        DuckDBBackend(tmp_path / "missing.csv")


@settings(max_examples=25, deadline=None)
@given(first=st.binary(max_size=200), second=st.binary(max_size=200))
def test_the_content_identity_changes_exactly_with_the_bytes(tmp_path_factory: pytest.TempPathFactory, first: bytes,
                                                             second: bytes) -> None:
    path = tmp_path_factory.mktemp("identity") / "data.csv"
    path.write_bytes(first)
    before = content_identity(path)
    path.write_bytes(second)
    assert (content_identity(path) == before) == (first == second)


def test_data_file_names() -> None:
    assert [data_file_suffix(name) for name in ("a.csv", "A.CSV", "a.csv.gz", "a.tsv", "a.parquet", "a.duckdb",
                                                ":memory:", 3)] == [".csv", ".csv", ".csv.gz", ".tsv", ".parquet",
                                                                    None, None, None]
    assert [data_file_table(name) for name in ("adult.csv", "/x/pums.2023.csv.gz", "p.parquet")] == [
        "adult", "pums.2023", "p"]
