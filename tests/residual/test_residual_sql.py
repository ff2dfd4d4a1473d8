"""Batches of COUNT(*) … GROUP BY through SQL, answered by ResidualPlanner: route choice, one scan,
consistent marginals, unbiased answers with the reported variances, EXPLAIN and the privacy unit.

Every test draws noise from a seeded ``SeededRandomSource``; statistical tolerances are stated in
standard errors of the predicted variance.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import dpsql
from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.matrix.workloads import VStack, Weighted
from dpsql.noise import SeededRandomSource
from dpsql.planning import accuracy
from dpsql.schema import Schema

SIZES = [2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9]
ROWS = 3000


def wide_table(rows: int = ROWS, seed: int = 3) -> duckdb.DuckDBPyConnection:
    """Columns a0…a14 of correlated small integers, with NULLs and undeclared values (outside cells)."""
    rng = np.random.default_rng(seed)
    latent = rng.integers(0, 4, rows)
    columns = {}
    for i, n in enumerate(SIZES):
        values = np.where(rng.random(rows) < 0.6, latent % n, rng.integers(0, n + 1, rows))  # n is undeclared
        columns[f"a{i}"] = pa.array(values, mask=rng.random(rows) < 0.03)
    con = duckdb.connect()
    con.register("source", pa.table(columns))
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    con.unregister("source")
    return con


def wide_schema(*, other: bool = True, unit_rows: int | None = None, exclude: bool = False) -> Schema:
    policy: dict[str, object] = {"out_of_domain": "exclude"} if exclude else {"other": other}
    columns: dict[str, dict[str, object]] = {f"a{i}": {"type": "categorical", "values": list(range(n)), **policy}
                                             for i, n in enumerate(SIZES)}
    table: dict[str, object] = {"columns": columns}
    if unit_rows is not None:
        columns["person"] = {"type": "integer", "lower": 0, "upper": 10_000}
        table["privacy_unit"] = {"column": "person", "max_rows": unit_rows}
    return Schema.load({"tables": {"t": table}})


def two_way(columns: Sequence[int]) -> str:
    return ";\n".join(f"SELECT a{i}, a{j}, COUNT(*) AS n FROM t GROUP BY a{i}, a{j}"
                      for i, j in itertools.combinations(columns, 2))


def counts(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column("n").to_numpy(zero_copy_only=False))


# ----------------------------------------------------------------------------- the check
def test_every_two_way_group_by_over_fifteen_columns_is_consistent_through_the_dbapi() -> None:
    con = wide_table()
    budget = Budget(rho=2.0)
    with dpsql.connect(con, schema=wide_schema(), budget=budget, rng=SeededRandomSource(11)) as connection:
        cursor = connection.cursor()
        cursor.execute(two_way(range(15)), rho=1.0)
        tables = cursor.fetch_arrow_tables()
        assert budget.spent == pytest.approx(1.0)
    assert len(tables) == 105
    metadata = json.loads(tables[0].schema.metadata[b"dpsql"])
    assert metadata["mechanism"].startswith("ResidualPlanner") and metadata["budget_spent"] == "ρ=1"
    totals = np.array([counts(t).sum() for t in tables])
    assert np.ptp(totals) <= 1e-9 * abs(totals[0])  # one reconstructed total, read from every table
    assert abs(totals[0] - ROWS) < 6 * float(counts_stddev(tables[0]))  # and it is an estimate of the row count
    one_way: dict[int, list[np.ndarray]] = {}
    for (i, j), table in zip(itertools.combinations(range(15), 2), tables):
        assert table.num_rows == (SIZES[i] + 1) * (SIZES[j] + 1)  # every declared value and the NULL group
        grid = counts(table).reshape(SIZES[i] + 1, SIZES[j] + 1)
        one_way.setdefault(i, []).append(grid.sum(axis=1))
        one_way.setdefault(j, []).append(grid.sum(axis=0))
    for i, margins in one_way.items():
        for other in margins[1:]:
            np.testing.assert_allclose(other, margins[0], rtol=1e-9, atol=1e-6, err_msg=f"a{i}'s margins disagree")


def counts_stddev(table: pa.Table) -> float:
    """The reconstructed total's standard error, from one cell's (all cells share σ_S's)."""
    return float(np.sqrt(np.sum(table.column("n_stddev").to_numpy() ** 2)))


def test_excluded_outside_cells_are_not_attributes_and_visible_totals_agree() -> None:
    """``out_of_domain = "exclude"``: rows with NULL or undeclared values leave the table, the
    attributes have only their declared values, and the reported tables' totals agree exactly."""
    con = wide_table()
    every_column_clean = " AND ".join(f"a{i} < {n}" for i, n in enumerate(SIZES))  # every excluded column filters
    (clean,) = con.execute(f"SELECT COUNT(*) FROM t WHERE {every_column_clean}").fetchall()[0]
    prepared = engine.prepare(two_way(range(6)), wide_schema(exclude=True), PrivacyCost(rho=1.0))
    assert (prepared.chosen is prepared.residual) and isinstance(prepared.residual, engine.ResidualPlan)
    assert prepared.residual.selection.domains == tuple(SIZES[:6])
    with_outside = engine.prepare(two_way(range(6)), wide_schema(other=False), PrivacyCost(rho=1.0)).residual
    assert with_outside is not None and prepared.residual.total_variance < with_outside.total_variance
    tables = engine.run(prepared, backend=DuckDBBackend(con), budget=Budget(rho=1.0), rng=SeededRandomSource(2))
    totals = np.array([counts(t).sum() for t in tables])
    assert np.ptp(totals) <= 1e-9 * totals[0] and abs(totals[0] - clean) < 6 * counts_stddev(tables[0])
    assert all(t.num_rows == SIZES[i] * SIZES[j] for (i, j), t in zip(itertools.combinations(range(6), 2), tables))


# ----------------------------------------------------------------------------- route choice
def test_the_batch_is_scanned_once_and_beats_the_statement_groups() -> None:
    con = wide_table()
    prepared = engine.prepare(two_way(range(8)), wide_schema(other=False), PrivacyCost(rho=0.5))
    assert ((prepared.chosen is prepared.residual) and isinstance(prepared.residual, engine.ResidualPlan)
            and not prepared.residual.optimal)
    assert prepared.residual.total_variance < 0.8 * prepared.groups.expected_total  # joint answering pays at 8 columns

    class Counting(DuckDBBackend):
        calls: ClassVar[list[str]] = []

        def marginal_counts(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append("marginals")
            return super().marginal_counts(*args, **kwargs)

        def cell_data(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append("cells")
            return super().cell_data(*args, **kwargs)

        def cell_data_sets(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append("cells")
            return super().cell_data_sets(*args, **kwargs)

    backend = Counting(con)
    messages: list[str] = []
    engine.run(prepared, backend=backend, budget=Budget(rho=1.0), rng=SeededRandomSource(0), progress=messages.append)
    assert backend.calls == ["marginals"]
    assert any("GROUPING SETS" in m for m in messages) and any("reconstructing 28 marginals" in m for m in messages)


def test_when_every_cell_is_reported_residual_planner_meets_the_svd_bound_and_skips_the_groups() -> None:
    """Every group reported (``other = true``): the batch's Gram is the marginal Gram, so
    ResidualPlanner's statement-weighted error (each block's rows weighted by c_b = 1/m_s,
    dpsql.planning.weights) is the SVD bound of the batch's own workload so weighted (computed densely
    here over the 4·5·6 = 120 cells) and the statement groups are not planned."""
    sql = two_way(range(1, 4)) + "; SELECT a2, COUNT(*) AS n FROM t GROUP BY a2"
    prepared = engine.prepare(sql, wide_schema(), PrivacyCost(rho=0.5))
    route = prepared.residual
    assert (route is not None and route.optimal and (prepared.chosen is prepared.residual)
            and isinstance(prepared.groups, engine.NotApplicable))
    blocks = route.compiled.groups[0].blocks
    assert route.block_weights == tuple(1 / b.workload.shape[0] for b in blocks)
    W = VStack([Weighted(math.sqrt(c), b.workload) for c, b in zip(route.block_weights, blocks)])
    assert W.shape == (4 * 5 + 4 * 6 + 5 * 6 + 5, 120)
    assert route.weighted_variance == pytest.approx(accuracy.svd_bound(W), rel=1e-8)  # ρ = 1/2 is the bound's unit
    assert "statement groups were not planned" in engine.explain(prepared)
    both = engine.prepare(sql, wide_schema(), PrivacyCost(rho=0.5), plan_all_routes=True)
    assert ((both.chosen is both.residual) and both.groups.measurements
            and isinstance(both.residual, engine.ResidualPlan))
    assert both.residual.total_variance <= both.groups.expected_total * (1 + 1e-9)  # the certificate, checked
    filtered = engine.prepare(sql + "; SELECT a1, COUNT(*) AS n FROM t WHERE a3 = 2 GROUP BY a1", wide_schema(),
                              PrivacyCost(rho=0.5))
    # compared
    assert (isinstance(filtered.residual, engine.ResidualPlan) and not filtered.residual.optimal
            and filtered.groups.measurements)


@pytest.mark.parametrize(("sql", "cost", "reason"), [
    (two_way(range(4)), {"epsilon": 1.0}, "charged in ε"),
    (two_way(range(4)) + "; SELECT a0, COUNT(a1) AS c FROM t GROUP BY a0", {"rho": 1.0}, "COUNT(*) only"),
    ("SELECT COUNT(*) AS n FROM t", {"rho": 1.0}, "only counts all rows"),
])
def test_residual_planner_declines_with_a_reason(sql: str, cost: dict[str, float], reason: str) -> None:
    prepared = engine.prepare(sql, wide_schema(), PrivacyCost(**cost))
    assert prepared.chosen is not prepared.residual and isinstance(prepared.residual, engine.NotApplicable)
    assert reason in str(prepared.residual.reason) and reason in engine.explain(prepared)


def test_a_single_marginal_stays_with_the_statement_groups() -> None:
    """One GROUP BY: identity is already optimal, and ties go to the standard route."""
    prepared = engine.prepare("SELECT a1, a2, COUNT(*) AS n FROM t GROUP BY a1, a2", wide_schema(),
                              PrivacyCost(rho=1.0))
    assert isinstance(prepared.residual, engine.ResidualPlan) and prepared.chosen is not prepared.residual
    assert prepared.residual.total_variance == pytest.approx(prepared.groups.expected_total, rel=1e-6)


def test_explain_shows_both_routes_and_the_svd_bound_without_spending() -> None:
    budget = Budget(rho=1.0)
    with dpsql.connect(wide_table(), schema=wide_schema(), budget=budget, rng=SeededRandomSource(0)) as connection:
        text = connection.cursor().explain(two_way(range(6)), rho=0.5)
    assert budget.spent == 0.0
    assert "Route: ResidualPlanner" in text and "statement groups" in text
    assert "15 marginals" in text and "SVD lower bound for these marginals" in text and "error / bound = 1.000" in text


# ----------------------------------------------------------------------------- accuracy
STAT_COLUMNS = range(4)
STAT_SQL = two_way(STAT_COLUMNS) + """;
SELECT a2, COUNT(*) AS n FROM t WHERE a1 = 1 OR a1 = 2 GROUP BY a2;
SELECT a3, COUNT(*) AS n FROM t WHERE a1 IN (0, 2) GROUP BY a3;
SELECT COUNT(*) AS n FROM t
"""


def declared(i: int) -> str:
    return f"a{i} IN ({', '.join(map(str, range(SIZES[i])))})"


def truth_queries() -> list[tuple[str, int]]:
    """Exact answers of STAT_SQL's reported rows (``other = false``: declared values only), by plain SQL."""
    pairs = [(f"SELECT a{i}, a{j}, COUNT(*) FROM t WHERE {declared(i)} AND {declared(j)} GROUP BY ALL", 2)
             for i, j in itertools.combinations(STAT_COLUMNS, 2)]
    return pairs + [(f"SELECT a2, COUNT(*) FROM t WHERE (a1 = 1 OR a1 = 2) AND {declared(2)} GROUP BY ALL", 1),
                    (f"SELECT a3, COUNT(*) FROM t WHERE a1 IN (0, 2) AND {declared(3)} GROUP BY ALL", 1),
                    ("SELECT COUNT(*) FROM t", 0)]


@pytest.mark.slow  # 300 releases: about 12 s of CPU
def test_answers_are_unbiased_with_the_reported_variance() -> None:
    """300 seeded releases of six 2-way marginals, two filtered statements and the total, with
    ``other = false`` (the outside cells are measured, not reported). Per answer, the mean error is
    within 4.5 standard errors of 0 and the sample variance within 6 standard errors (√(2/R)) of the
    reported one; the 81 answers make a chance failure about 1 in 1,000."""
    con, runs = wide_table(rows=800, seed=5), 300
    planned = engine.prepare(STAT_SQL, wide_schema(other=False), PrivacyCost(rho=0.05))
    # the routes' objectives are within 1 %: answer with ResidualPlanner, under test here
    assert isinstance(planned.residual, engine.ResidualPlan)
    prepared = replace(planned, chosen=planned.residual)
    assert prepared.chosen is prepared.residual
    backend = DuckDBBackend(con)
    expected = [{tuple(row[:groups]): int(row[groups]) for row in con.execute(sql).fetchall()}
                for sql, groups in truth_queries()]
    errors, stddevs = [], None
    for seed in range(runs):
        tables = engine.run(prepared, backend=backend, budget=Budget(rho=100.0), rng=SeededRandomSource(seed))
        row_errors, row_stddevs = [], []
        for table, exact in zip(tables, expected):
            keys = [name for name in table.column_names if not name.startswith("n")]
            for r, value in enumerate(table.column("n").to_pylist()):
                key = tuple(table.column(k)[r].as_py() for k in keys)
                row_errors.append(value - exact.get(key, 0))
                row_stddevs.append(table.column("n_stddev")[r].as_py())
        errors.append(row_errors)
        stddevs = stddevs if stddevs is not None else np.array(row_stddevs)
        assert np.array_equal(stddevs, row_stddevs)  # the variance is exact and data-independent
    e = np.array(errors)
    assert e.shape[1] == 71 + 4 + 5 + 1
    z = e / stddevs
    assert np.all(np.abs(z.mean(axis=0)) < 4.5 / math.sqrt(runs))
    assert np.all(np.abs(z.var(axis=0, ddof=1) - 1) < 6 * math.sqrt(2 / runs))
    # Pooled over answers (correlated, so the standard error lies between √(2/(81R)) = 0.009 and
    # √(2/R) = 0.08): a reported variance 20 % off fails this.
    assert abs(z.var(axis=0, ddof=1).mean() - 1) < 0.1


def test_a_privacy_unit_of_k_rows_measures_at_rho_over_k_squared() -> None:
    sql = two_way(range(5))
    single = engine.prepare(sql, wide_schema(), PrivacyCost(rho=0.5))
    units = engine.prepare(sql, wide_schema(unit_rows=3), PrivacyCost(rho=0.5))
    assert ((units.chosen is units.residual) and isinstance(single.residual, engine.ResidualPlan)
            and isinstance(units.residual, engine.ResidualPlan))
    assert float(units.residual.selection.rho) == pytest.approx(0.5 / 9, rel=1e-9)
    assert units.residual.total_variance == pytest.approx(9 * single.residual.total_variance, rel=1e-6)
    assert "ρ/3² for privacy units of up to 3 rows" in engine.explain(units)
