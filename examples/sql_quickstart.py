"""SQL quickstart: a small table, a schema, and a batch of queries answered privately with error bars.

Run: python examples/sql_quickstart.py
"""

from __future__ import annotations

import json

import duckdb
import numpy as np

import dpsql
from dpsql.answers.tables import format_table

# A small table of people (generated here; in practice, your own DuckDB database).
rng = np.random.default_rng(3)
data = duckdb.connect()
data.execute("CREATE TABLE people (age INTEGER, sex VARCHAR, income DOUBLE)")
data.executemany("INSERT INTO people VALUES (?, ?, ?)",
                 [(int(a), str(s), float(i))
                  for a, s, i in zip(rng.integers(0, 100, 5000), rng.choice(["F", "M"], 5000),
                                                                 rng.lognormal(10, 0.8, 5000))])

schema = {  # public knowledge: domains are declared, never read from the data
    "tables": {"people": {"columns": {
        "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "income": {"type": "numeric", "lower": 0, "upper": 200000, "bin_width": 20000},
    }}}
}

with dpsql.connect(data, schema=schema, budget=dpsql.Budget(epsilon=2.0)) as connection:
    cursor = connection.cursor()
    batch = """
        SELECT sex, COUNT(*) AS n FROM people GROUP BY sex;
        SELECT COUNT(*) AS adults FROM people WHERE age BETWEEN 18 AND 64;
        SELECT age, AVG(income) AS mean_income FROM people WHERE age >= 20 GROUP BY age;
    """
    print(cursor.explain(batch, epsilon=1.0))  # free: shows the plan, expected RMSE and cost
    cursor.execute(batch, epsilon=1.0)        # one joint release, charged once
    for table in cursor.fetch_arrow_tables():
        print(format_table(table), end="\n\n")
    metadata = json.loads(cursor.fetch_arrow_tables()[0].schema.metadata[b"dpsql"])
    print(f"Budget left: {connection.budget.remaining:g}; expected RMSE per data vector: {metadata['expected_rmse']}")
