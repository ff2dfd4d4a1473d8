"""A ledger budget as a person reads it: a one-line repr, a few lines of str, the rest behind details()."""

from __future__ import annotations

from pathlib import Path

import duckdb

import dpsql
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.schema import Schema

SCHEMA = Schema.load({"tables": {"people": {"columns": {"sex": {"type": "categorical", "values": ["F", "M"]}}}}})
BATCH = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"


def test_the_budget_prints_in_a_few_lines_and_details_list_the_charges(tmp_path: Path) -> None:
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE people AS SELECT CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex "
                    "FROM range(100) AS r(i)")
    Ledger(default_path(path)).set_total(path.name, PrivacyCost(epsilon=5.0), binding=Binding.of(SCHEMA, path))
    with dpsql.connect(path, schema=SCHEMA) as private:
        private.cursor().execute(BATCH, epsilon=1.0)
        private.cursor().execute(BATCH, epsilon=0.5, reuse=False)
        budget = private.budget
    assert repr(budget) == "<LedgerBudget dataset 'people.duckdb': total ε=5, spent 1.5, left 3.5, 2 charge(s)>"
    lines = str(budget).splitlines()
    assert lines[1:] == ["  total  ε=5", "  spent  ε=1.5", "  left   ε=3.5",
                         "  2 charge(s); budget.details() lists them"]
    assert len(str(budget)) < 300 and "people.duckdb.dpsql-ledger" in lines[0]
    details = budget.details().splitlines()
    assert "dataset 'people.duckdb': total ε=5, spent 1.5, left 3.5" in details
    assert any(line.startswith("bound to schema ") and "inode" in line for line in details)
    assert [line.split()[2] for line in details if line.startswith("  #")] == ["ε=1", "ε=0.5"]
