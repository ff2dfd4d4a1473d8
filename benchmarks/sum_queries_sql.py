"""Seed 003's prefix-sum experiment through SQL: the engine picks TaMM or TiMM at the released θ.

Same data as ``sum_queries.py`` (40,000 synthetic incomes, whole dollars, outer bound U = 10⁷) in a
DuckDB table; the batch is 1,000 statements ``SELECT SUM(income) FROM people WHERE income <
800·i``; the schema declares income with ``bin_width = 800``, ``out_of_domain = "clamp"`` and
``truncate`` = svt or recursive. Each trial runs the whole batch through ``dpsql.connect``: θ is
chosen with 10 % of ε, then each statement group is answered from value cells (TaMM) or from
separate truncated sums (TiMM), whichever has the lower expected error at that θ.

Prints, per selector and trial: θ, the answering choice and its error scores, the strategy, the
plan and run times, and the median relative error |ŷ − y| / max(y, 100) against the exact
(untruncated) prefix sums — the metric of ``sum_queries.py``.

Run: python benchmarks/sum_queries_sql.py [--trials 3] [--rows 40000] [--epsilon 0.01]
"""

from __future__ import annotations

import argparse
import json
import time

import duckdb
import numpy as np
import pyarrow as pa
from _machine import header
from sum_queries import BUCKETS, WIDTH, incomes

import dpsql
from dpsql.noise import SeededRandomSource


def schema(method: str) -> dict[str, object]:
    income = {"type": "integer", "lower": 0, "upper": 10_000_000, "bin_width": WIDTH, "out_of_domain": "clamp",
              "truncate": method}
    return {"tables": {"people": {"columns": {"income": income}}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=float, default=0.01)
    args = parser.parse_args()
    print(header("sum_queries_sql"))
    values = incomes(args.rows, np.random.default_rng(args.seed)).astype(np.int64)
    limits = WIDTH * np.arange(1, BUCKETS + 1)
    truth = np.array([values[values < limit].sum() for limit in limits], dtype=np.float64)
    sql = ";\n".join(f"SELECT SUM(income) AS s FROM people WHERE income < {limit}" for limit in limits)
    with duckdb.connect() as con:  # in memory: seeded trials (rng=) are for in-memory data only
        con.register("source", pa.table({"income": values}))
        con.execute("CREATE TABLE people AS SELECT * FROM source")
        con.unregister("source")
        for method in ("svt", "recursive"):
            for trial in range(args.trials):
                connection = dpsql.connect(con, schema=schema(method), budget=dpsql.Budget(epsilon=args.epsilon),
                                           rng=SeededRandomSource(1000 + trial))
                started = time.perf_counter()
                cursor = connection.cursor().execute(sql, epsilon=args.epsilon)
                seconds = time.perf_counter() - started
                tables = cursor.fetch_arrow_tables()
                connection.close()
                estimate = np.array([t.column("s")[0].as_py() for t in tables])
                metadata = json.loads(tables[0].schema.metadata[b"dpsql"])
                error = np.median(np.abs(estimate - truth) / np.maximum(truth, 100.0))
                print(f"\n{method} trial {trial}: θ = {metadata['truncation_threshold']['income']:,.0f}; "
                      f"strategy {metadata['strategy']}; {seconds:.1f} s (plan and run)")
                print(f"  {metadata['answering'][0]}")
                print(f"  median relative error over the 1,000 queries: {error:.4f}")


if __name__ == "__main__":
    main()
