"""Every 1- and 2-way GROUP BY count of a table through the DB-API: ResidualPlanner against the
statement-group route, on the real Adult data (14 columns, 48,842 rows) and on a generated
15-column table. Every column is declared ``out_of_domain = "exclude"`` (the codes are clean), so
no outside cell takes noise and the tables' totals agree exactly.

Prints, per data set: statements and answers; the seconds to plan (parse, compile, ResidualPlanner
selection; and with the statement-group route planned too, whose optimized strategies are cached
on disk, so a second run is faster) and to
execute through the DB-API (planning again, one GROUPING SETS scan, measurement, reconstruction,
Arrow tables); the expected RMSE per
answer of both routes and their ratio; the empirical RMSE of the release against the exact
counts; and the largest disagreement between the tables' totals (they are one reconstructed
number).

Run: python benchmarks/sql_marginals.py [--rho 1.0] [--adult ../shared/data/adult.csv]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import duckdb
import numpy as np
from _machine import header

import dpsql
from dpsql import engine
from dpsql.budget.accounting import PrivacyCost
from dpsql.schema import Schema

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def adult(path: Path) -> tuple[duckdb.DuckDBPyConnection, dict[str, int]]:
    """adult.csv (integer codes) as table ``adult``, columns renamed to SQL identifiers."""
    domain = json.loads((path.parent / "adult-domain.json").read_text())
    names = {original: original.replace("-", "_").replace(">", "_over_").lower() for original in domain}
    con = duckdb.connect()
    select = ", ".join(f'CAST("{o}" AS INTEGER) AS {n}' for o, n in names.items())
    con.execute(f"CREATE TABLE adult AS SELECT {select} FROM read_csv('{path}', header = true)")
    return con, {names[o]: size for o, size in domain.items()}


def generated(rows: int = 100_000, seed: int = 0) -> tuple[duckdb.DuckDBPyConnection, dict[str, int]]:
    """15 correlated categorical columns of 2…9 values (a shared latent variable plus noise)."""
    sizes = {f"a{i}": n for i, n in enumerate([2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9])}
    con = duckdb.connect()
    con.execute(f"SELECT setseed({1 / (seed + 2)})")
    columns = ", ".join(f"CAST(CASE WHEN random() < 0.6 THEN latent % {n} ELSE floor(random() * "
                        f"{n}) END AS INTEGER) AS {c}"
                        for c, n in sizes.items())
    con.execute(f"CREATE TABLE synth AS SELECT {columns} FROM (SELECT CAST(floor(random() * 4) AS INTEGER) AS latent "
                f"FROM range({rows}))")
    return con, sizes


def batch(table: str, columns: list[str]) -> list[tuple[str, list[str]]]:
    one = [(f"SELECT {c}, COUNT(*) AS n FROM {table} GROUP BY {c}", [c]) for c in columns]
    two = [(f"SELECT {a}, {b}, COUNT(*) AS n FROM {table} GROUP BY {a}, {b}", [a, b])
           for a, b in itertools.combinations(columns, 2)]
    return one + two


def run(name: str, con: duckdb.DuckDBPyConnection, table: str, sizes: dict[str, int], rho: float) -> None:
    schema = {"tables": {table: {"columns": {c: {"type": "categorical", "values": list(range(n)),
                                                 "out_of_domain": "exclude"}
                                            for c, n in sizes.items()}}}}
    statements = batch(table, list(sizes))
    sql = ";\n".join(s for s, _ in statements)
    started = time.perf_counter()
    prepared = engine.prepare(sql, Schema.load(schema), PrivacyCost(rho=rho), plan_all_routes=True)
    compared = time.perf_counter() - started
    started = time.perf_counter()
    engine.prepare(sql, Schema.load(schema), PrivacyCost(rho=rho))
    planned = time.perf_counter() - started
    assert isinstance(prepared.residual, engine.ResidualPlan)
    rp = math.sqrt(prepared.residual.total_variance / prepared.residual.answer_count)
    groups = math.sqrt(prepared.groups.expected_total / sum(m.plan.queries for m in prepared.groups.measurements))
    with dpsql.connect(con, schema=schema, budget=dpsql.Budget(rho=rho)) as connection:
        started = time.perf_counter()
        tables = connection.cursor().execute(sql, rho=rho).fetch_arrow_tables()
        ran = time.perf_counter() - started
    errors, totals = [], []
    for (_, keys), result in zip(statements, tables):
        exact = {tuple(r[:-1]): r[-1] for r in con.execute(
            f"SELECT {', '.join(keys)}, COUNT(*) FROM {table} GROUP BY ALL").fetchall()}
        noisy = result.column("n").to_numpy()
        rows = zip(*(result.column(k).to_pylist() for k in keys))
        errors.extend(v - exact.get(key, 0) for v, key in zip(noisy, rows))
        totals.append(float(noisy.sum()))
    route = json.loads(tables[0].schema.metadata[b"dpsql"])["mechanism"]
    print(f"\n{name}: {len(statements)} statements, {len(errors):,} answers, ρ = {rho:g}")
    print(f"  plan {planned:.2f} s ({compared:.2f} s with the statement groups planned too); DB-API execute "
          f"{ran:.2f} s (plans again, then scans, measures, answers: ≈ {ran - planned:.2f} s after planning)")
    print(f"  answered by: {route}; certified optimal (error = SVD bound): {prepared.residual.optimal}")
    print(f"  expected RMSE per answer: ResidualPlanner {rp:.3f}, statement groups {groups:.3f} "
          f"(ratio {groups / rp:.3f})")
    print(f"  empirical RMSE of the release: {float(np.sqrt(np.mean(np.square(errors)))):.3f}")
    print(f"  tables' totals: {min(totals):.3f} … {max(totals):.3f} (spread {max(totals) - min(totals):.2e})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rho", type=float, default=1.0)
    parser.add_argument("--adult", type=Path, default=SHARED / "adult.csv")
    args = parser.parse_args()
    print(header("sql_marginals"))
    if args.adult.exists():
        con, sizes = adult(args.adult)
        run("Adult (14 columns, 48,842 rows)", con, "adult", sizes, args.rho)
    else:
        print(f"\n(skipping Adult: {args.adult} not found)")
    con, sizes = generated()
    run("generated (15 columns, 100,000 rows)", con, "synth", sizes, args.rho)


if __name__ == "__main__":
    main()
