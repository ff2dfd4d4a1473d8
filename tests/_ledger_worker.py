"""A child process for the ledger's race and crash tests: private batches through ``dpsql.connect``.

    python tests/_ledger_worker.py race DB GO_FILE   one batch at ε = 1 once GO_FILE exists; exit 0 if
                                                     answered, 3 on BudgetExhaustedError
    python tests/_ledger_worker.py loop DB ANSWERS   batches at ε = 1 until killed; each answer is
                                                     appended to ANSWERS (flush + fsync) after execute returns

Both print "ready" once connected, so the parent can time its signal.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpsql.budget.ledger import Binding

SCHEMA = {"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
    "sex": {"type": "categorical", "values": ["F", "M"]},
}}}}
BATCH = "SELECT sex, COUNT(*) AS n FROM people WHERE age >= ? GROUP BY sex"
EXHAUSTED = 3


def make_database(path: Path) -> None:
    """A small people table (300 rows) for the children to query."""
    import duckdb

    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE people AS SELECT CAST(i % 100 AS INTEGER) AS age, "
                    "CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END AS sex FROM range(300) AS r(i)")


def binding(path: Path) -> Binding:
    """The binding the data owner records with ``dpsql budget set --db PATH --schema ...``."""
    from dpsql.budget.ledger import Binding
    from dpsql.schema import Schema

    return Binding.of(Schema.load(SCHEMA), path)


def main(mode: str, database: str, path: str) -> int:
    import dpsql

    cursor = dpsql.connect(database, schema=SCHEMA).cursor()
    print("ready", flush=True)
    if mode == "race":
        while not os.path.exists(path):
            time.sleep(0.001)
        try:
            cursor.execute(BATCH, [0], epsilon=1.0, reuse=False)
        except dpsql.BudgetExhaustedError:
            return EXHAUSTED
        return 0
    with open(path, "a", encoding="utf-8") as answers:
        for number in range(10**9):
            rows = cursor.execute(BATCH, [number % 100], epsilon=1.0, reuse=False).fetchall()
            answers.write(f"{number} {rows}\n")
            answers.flush()
            os.fsync(answers.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
