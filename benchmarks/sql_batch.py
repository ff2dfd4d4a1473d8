"""1,000 range and GROUP BY statements over 10 million rows: dpsql's joint answer against two baselines.

Prints
  (a) dpsql's private wall time (parse, plan, one scan, measure, answer) divided by DuckDB's time to
      run the same 1,000 statements exactly, one by one;
  (b) dpsql's RMSE divided by the RMSE of answering each statement separately with the Laplace
      mechanism at an even split of the same total ε (each statement gets ε/1000; every statement's
      answers have L1 sensitivity 1, so each has variance 2·(1000/ε)²).
Both RMSEs are the exact expected ones; the empirical RMSE of dpsql's release against the exact
answers is printed beside them.

Run: python benchmarks/sql_batch.py [--rows 10000000] [--statements 1000] [--epsilon 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
from _machine import header

import dpsql
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.schema import Schema

SCHEMA = {"tables": {"events": {"columns": {
    "x": {"type": "integer", "lower": 0, "upper": 255, "bin_width": 16, "resolution": 1},
    "y": {"type": "integer", "lower": 0, "upper": 63, "bin_width": 8, "resolution": 1},
    "g": {"type": "categorical", "values": [f"g{i}" for i in range(8)]},
}}}}


def build(path: Path, rows: int, seed: int = 1) -> None:
    """A 10M-row table with skewed x, y and a categorical g (generated inside DuckDB)."""
    with duckdb.connect(str(path)) as connection:
        connection.execute(f"SELECT setseed({1 / (seed + 1)})")
        connection.execute(f"""
            CREATE TABLE events AS
            SELECT CAST(least(255, floor(256 * pow(random(), 1.7))) AS INTEGER) AS x,
                   CAST(floor(64 * random()) AS INTEGER) AS y,
                   'g' || CAST(floor(8 * pow(random(), 2)) AS INTEGER) AS g
            FROM range({rows})""")


def statements(count: int, seed: int = 2) -> list[str]:
    """70 % 1-D ranges on x, 20 % 2-D ranges on x and y, 10 % GROUP BY g with a range on x."""
    rng = np.random.default_rng(seed)
    result = []
    for k in range(count):
        lo, hi = sorted(rng.integers(0, 256, size=2))
        if k % 10 < 7:
            result.append(f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi}")
        elif k % 10 < 9:
            y0, y1 = sorted(rng.integers(0, 64, size=2))
            result.append(f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi} AND y BETWEEN {y0} AND {y1}")
        else:
            result.append(f"SELECT g, COUNT(*) AS n FROM events WHERE x >= {lo} GROUP BY g ORDER BY g")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--statements", type=int, default=1000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    arguments = parser.parse_args()
    print(header(f"{arguments.statements} statements over {arguments.rows:,} rows, ε = {arguments.epsilon}"))
    folder = Path(tempfile.mkdtemp(prefix="dpsql-bench-"))
    database = folder / "events.duckdb"
    started = time.perf_counter()
    build(database, arguments.rows)
    print(f"built the table in {time.perf_counter() - started:.1f} s")
    batch = statements(arguments.statements)

    with duckdb.connect(str(database), read_only=True) as connection:
        started = time.perf_counter()
        exact = [connection.execute(sql).fetchall() for sql in batch]
        duckdb_seconds = time.perf_counter() - started

    Ledger(default_path(database)).set_total(database.name, PrivacyCost(epsilon=arguments.epsilon),  # the owner's step
                                             binding=Binding.of(Schema.load(SCHEMA), database))
    with dpsql.connect(str(database), schema=SCHEMA) as con:
        cursor = con.cursor()
        started = time.perf_counter()
        cursor.execute(";\n".join(batch), epsilon=arguments.epsilon)
        tables = cursor.fetch_arrow_tables()
        dpsql_seconds = time.perf_counter() - started
        plan = cursor.explain(";\n".join(batch), epsilon=arguments.epsilon)

    noisy, stddev, truth = [], [], []
    for table, rows in zip(tables, exact):
        noisy.extend(table.column("n").to_pylist())
        stddev.extend(table.column("n_stddev").to_pylist())
        truth.extend(row[-1] for row in rows)
    noisy_array, truth_array = np.array(noisy), np.array(truth, dtype=float)
    dpsql_rmse = float(np.sqrt(np.mean(np.square(stddev))))
    empirical = float(np.sqrt(np.mean((noisy_array - truth_array) ** 2)))
    separate_rmse = float(np.sqrt(2.0) * arguments.statements / arguments.epsilon)

    print(plan.splitlines()[0])
    print(f"answers: {len(noisy):,} (every declared group of every statement)")
    print(f"DuckDB exact, one by one: {duckdb_seconds:8.2f} s")
    print(f"dpsql private, one batch: {dpsql_seconds:8.2f} s")
    print(f"(a) time ratio dpsql / DuckDB = {dpsql_seconds / duckdb_seconds:.3f}   (goal ≤ 1)")
    print(f"dpsql expected RMSE {dpsql_rmse:.2f} (empirical {empirical:.2f}); "
          f"separate Laplace at ε/{arguments.statements}: "
          f"{separate_rmse:.2f}")
    print(f"(b) RMSE ratio dpsql / separate = {dpsql_rmse / separate_rmse:.4f}   (goal ≤ 0.1)")


if __name__ == "__main__":
    main()
