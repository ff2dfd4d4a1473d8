"""Bounded work before any charge (issue 29 §2): a plain GROUP BY is a partition of the cells,
planned and answered in closed form at any size the cell limit admits, never with a dense
n × n matrix. Large cases run in a subprocess under an address-space cap (RLIMIT_AS) and a
generous CPU cap (RLIMIT_CPU), so a dense n × n step fails them instead of starving the machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dpsql import strategies
from dpsql.matrix import linalg
from dpsql.matrix.partitions import Parts, part_of_cell, partition_form
from dpsql.matrix.workloads import AllRange, Explicit, Identity, Kron, Prefix, Ranges, Total, VStack, Weighted, Workload
from dpsql.planning import accuracy, planner
from dpsql.schema import Ordered, Schema
from dpsql.sql.compile import compile_batch
from dpsql.sql.parse import parse_batch
from dpsql.sql.vectors import COUNTS

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30

#: Runs one batch (argv: a JSON of the settings below) over a one-column table t(d) of ``cells``
#: integer cells, or the given schema and table; prints a JSON report.
SCRIPT = """
import json, resource, sys
settings = json.loads(sys.argv[1])
for limit, value in ((resource.RLIMIT_AS, settings["memory"]), (resource.RLIMIT_CPU, settings["cpu"])):
    resource.setrlimit(limit, (value, value))
import duckdb, dpsql
from dpsql.schema import Schema
cells = settings["cells"]
columns = settings["columns"] or {"d": {"type": "integer", "lower": 0, "upper": cells - 1}}
data = duckdb.connect()
data.execute(settings["table"] or f"CREATE TABLE t AS SELECT i * 7 % {cells} AS d FROM range(20000) r(i)")
report = {}
with dpsql.connect(data, schema=Schema.load({"tables": {"t": {"columns": columns}}}),
                   budget=dpsql.Budget(**{settings["cost"]: 1.0})) as connection:
    cursor = connection.cursor()
    cost = {settings["cost"]: 0.5}
    try:
        report["explain"] = cursor.explain(settings["sql"], **cost)
        if settings["execute"]:
            cursor.execute(settings["sql"], **cost)
            report["rows"] = [list(row) for row in cursor.fetchall()]
    except Exception as err:
        report["error"] = type(err).__name__ + ": " + str(err)
    report["spent"] = connection.budget.spent
print(json.dumps(report, default=str))
"""


def run_capped(sql: str, cells: int = 0, *, execute: bool = True, memory: int = 2 * GIB, cpu: int = 120,
               columns: dict[str, object] | None = None, table: str | None = None,
               cost: str = "epsilon") -> dict[str, object]:
    """The batch's EXPLAIN (and rows) at ``cost`` = 0.5 (epsilon or rho) from a subprocess capped at
    ``memory`` bytes of address space and ``cpu`` CPU seconds; fails the test if the subprocess dies
    (MemoryError, SIGXCPU)."""
    settings = {"sql": sql, "cells": cells, "execute": execute, "memory": memory, "cpu": cpu, "columns": columns,
                "table": table, "cost": cost}
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(settings)], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"},
                          check=False)
    assert done.returncode == 0, f"the subprocess failed ({done.returncode}): {done.stderr[-3000:]}"
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize(("cost", "low", "high"), [("epsilon", 2.7, 2.9), ("rho", 0.9, 1.0)])
def test_a_group_by_over_1e5_cells_is_answered_in_closed_form(cost: str, low: float, high: float) -> None:
    """Before: numpy's MemoryError (a dense 10⁵ × 10⁵ membership matrix, then (AᵀA)⁺; under ρ,
    ResidualPlanner's dense per-attribute matrices too)."""
    report = run_capped("SELECT d, COUNT(*) AS n FROM t GROUP BY d", 100_000, cost=cost)
    assert "error" not in report, report["error"]
    assert "identity is optimal (closed form)" in str(report["explain"])
    rows = report["rows"]
    assert isinstance(rows, list) and len(rows) == 100_000
    stddevs = {row[2] for row in rows}
    # one cell at 0.5: Laplace √2·2 (exact lattice: a little less), Gaussian σ = 1 (a little less)
    assert len(stddevs) == 1 and low < stddevs.pop() <= high
    assert report["spent"] == pytest.approx(0.5)


@pytest.mark.slow
def test_a_group_by_over_1e6_cells_is_answered_within_the_cell_limit() -> None:
    report = run_capped("SELECT d, COUNT(*) AS n FROM t GROUP BY d", 1_000_000)
    assert "error" not in report, report["error"]
    assert isinstance(report["rows"], list) and len(report["rows"]) == 1_000_000


# ================================================================================ the closed forms
def _random_partition(seed: int, rows: int, cells: int) -> np.ndarray:
    """A weighted partition: each cell in one row or none, each row one weight."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(-1, rows, size=cells)
    weights = rng.choice([0.5, 1.0, 2.0, 3.0], size=rows)
    dense = np.zeros((rows, cells))
    dense[owner[owner >= 0], np.flatnonzero(owner >= 0)] = weights[owner[owner >= 0]]
    return dense


@pytest.mark.parametrize("seed", range(5))
def test_partition_closed_forms_match_the_dense_algebra(seed: int) -> None:
    dense = _random_partition(seed, 6, 20)
    repeated = np.vstack([dense, 3.0 * dense[:2]])  # the same parts read again (a SUM and an AVG of one column)
    for W in (Explicit(dense), Explicit(sp.csr_array(dense)), Weighted(2.0, Explicit(dense)), Explicit(repeated),
              VStack([Explicit(dense[:3]), Explicit(dense[3:])]),
              VStack([Explicit(dense), Weighted(0.5, Explicit(dense))]), Kron([Explicit(dense[:2, :4]), Identity(3)]),
              Kron([Explicit(repeated[:, :5]), Explicit(np.ones((2, 2)))])):
        _check_closed_forms(W)


def test_totals_and_disjoint_ranges_are_partitions_in_closed_form() -> None:
    """Range leaves (issue 31 item 2): a total, a single marginal, intervals pairwise equal or disjoint."""
    split = Ranges(10, [(0, 2), (5, 5), (7, 9), (0, 2)])  # cells 3, 4 and 6 unread; one interval twice
    for W in (Total(7), Kron([Identity(4), Total(5)]), split, Kron([split, Total(3)]), Kron([Total(2), split]),
              VStack([Ranges(10, [(0, 2)]), Weighted(2.0, Ranges(10, [(7, 9), (0, 2)]))]), Prefix(1)):
        _check_closed_forms(W)
    for W in (Prefix(4), AllRange(3), Ranges(10, [(0, 4), (4, 9)]), VStack([Ranges(10, [(0, 9)]), Identity(10)])):
        assert partition_form(W) is None


def _check_closed_forms(W: Workload) -> None:
    """W's partition closed forms against the dense algebra."""
    form = partition_form(W)
    assert form is not None, W
    identity = strategies.identity(W.shape[1])
    assert form.identity_error() == pytest.approx(accuracy.expected_error(W, identity))
    np.testing.assert_allclose(form.identity_variances(), accuracy.per_query_variance(W, identity))
    assert form.root_trace() == pytest.approx(np.linalg.svd(W.dense(), compute_uv=False).sum())
    assert form.read_cells() == np.count_nonzero(np.abs(W.dense()).sum(axis=0))
    parts = Parts(*part_of_cell(W))
    R = parts.dense()
    np.testing.assert_allclose(W.dense() @ np.linalg.pinv(R) @ R, W.dense(), atol=1e-12)  # R supports W
    assert form.parts_error() == pytest.approx(np.trace(W.dense() @ np.linalg.pinv(R.T @ R) @ W.dense().T))
    assert accuracy.expected_error(W, parts) == pytest.approx(form.parts_error())


def test_overlapping_or_unequal_rows_are_not_partitions() -> None:
    assert partition_form(Explicit(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))) is None  # cell 1 twice
    assert partition_form(Explicit(np.array([[1.0, 2.0, 0.0]]))) is None  # unequal weights in a row
    assert partition_form(VStack([Explicit(np.eye(3)), Explicit(np.ones((1, 3)))])) is None  # GROUP BY + total
    assert partition_form(VStack([Explicit(np.eye(3)), Explicit(np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))])) is None
    assert partition_form(strategies.hierarchical(8, 2)) is None


def test_a_single_cell_partition_plans_identity_with_its_exact_error_and_bound() -> None:
    W = Kron([Explicit(np.eye(50)[:49]), Explicit(np.array([[0.0, 1.0, 0.0]]))])  # GROUP BY d WHERE e = 'x'
    plan = planner.plan(W, noise="laplace", sizes=[50, 3], ordered=[True, False])
    assert plan.name == "identity" and list(plan.candidates) == ["identity"]
    assert plan.expected_error == pytest.approx(accuracy.expected_error(W, Identity(150), noise="laplace"))
    bound, exact = plan.svd_bound()
    assert exact and bound == pytest.approx(accuracy.svd_bound(W))
    assert "closed form" in plan.notes[0]


def test_parts_profile_and_projector_match_the_dense_pseudo_inverse() -> None:
    dense = _random_partition(7, 5, 30)
    W = Explicit(dense)
    parts = Parts(*part_of_cell(W))
    R = parts.dense()
    np.testing.assert_allclose(parts.profile().dense(), np.linalg.pinv(R.T @ R), atol=1e-12)
    np.testing.assert_allclose(parts.projector().dense(), np.linalg.pinv(R) @ R, atol=1e-12)
    weights = np.abs(dense).max(axis=1)
    assert accuracy.expected_error(W, parts) == pytest.approx(float(np.sum(weights**2)))
    np.testing.assert_allclose(linalg.quadratic_diag(W, linalg.pinv_gram(parts)), weights**2)
    assert parts.sensitivity("l1") == parts.sensitivity("l2") == 1.0


def test_an_in_list_of_999_values_is_cheap_and_planned_in_closed_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 17.8 s of CPU — every IN value rebuilt the domain's n-cell arrays (value_bounds and the
    boundary search) and the 1,999 cells it makes were planned with dense n × n algebra."""
    calls = []
    original = Ordered.value_bounds
    monkeypatch.setattr(Ordered, "value_bounds", lambda self: calls.append(1) or original(self))
    schema = Schema.load({"tables": {"t": {"columns": {"d": {"type": "integer", "lower": 0, "upper": 99_999}}}}})
    sql = "SELECT COUNT(*) FROM t WHERE d IN (" + ", ".join(str(3 * i) for i in range(999)) + ")"
    compiled = compile_batch(parse_batch(sql), schema)
    assert len(calls) <= 4  # once per reading of the atom (the axis, then the WHERE), not once per value
    group = compiled.groups[0]
    assert group.cells == 1_999  # 999 values, the 998 gaps between them, the rest, the outside cell
    plan = planner.plan(group.workload(COUNTS), noise="laplace", sizes=[group.cells])
    assert plan.name == "workload" and isinstance(plan.strategy, Parts)
    assert plan.expected_error == pytest.approx(2.0)  # one query of sensitivity 1, Laplace at ε = 1: 2b²


def test_an_in_list_is_answered_exactly_as_its_cells_add_up() -> None:
    report = run_capped("SELECT COUNT(*) AS n FROM t WHERE d IN (" + ", ".join(map(str, range(0, 3000, 3))) + ")",
                        100_000)
    assert "error" not in report, report["error"]
    assert "measuring each set's total once is optimal" in str(report["explain"])
    (count, stddev), = report["rows"]  # type: ignore[misc]
    assert abs(count - _in_list_rows()) < 40 * stddev


def _in_list_rows() -> int:
    """Rows of run_capped's table (d = 7 i mod 10⁵, i < 20,000) with d a multiple of 3 below 3,000."""
    values = np.arange(20_000) * 7 % 100_000
    return int(np.count_nonzero((values % 3 == 0) & (values < 3000)))


def test_a_sum_grouped_by_its_own_column_keeps_its_per_cell_bounds_at_1e5_cells() -> None:
    """SUM(d) GROUP BY d: per-cell bounds turn the identity into a diagonal strategy, whose (AᵀA)⁺,
    support check and answers are entry by entry. Before: a dense n × n (AᵀA)⁺ (numpy's MemoryError
    from 5,000 cells on; at 10⁵ the dense limit dropped the per-cell bounds) and an O(n²) loop."""
    report = run_capped("SELECT d, SUM(d) AS s FROM t GROUP BY d", 100_000)
    assert "error" not in report, report["error"]
    assert "cell-bounded sum(d): per-cell bounds 2…99,999" in str(report["explain"])
    rows = report["rows"]
    assert isinstance(rows, list) and len(rows) == 100_000
    assert rows[-1][2] > 100 * rows[1][2]  # the stddev of each sum follows its own cell's bound


def test_a_diagonal_strategy_has_a_sparse_exact_profile() -> None:
    diagonal = np.array([2.0, 0.0, 5.0, 1.0])
    A = Explicit(sp.diags_array(diagonal, format="csr"))
    assert linalg.diagonal_entries(A) is not None and linalg.diagonal_entries(Explicit(np.diag(diagonal))) is None
    np.testing.assert_allclose(linalg.pinv_gram(A).dense(), np.linalg.pinv(np.diag(diagonal**2)))
    np.testing.assert_allclose(linalg.projector(A).dense(), np.linalg.pinv(np.diag(diagonal)) @ np.diag(diagonal))
    W = Explicit(np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 3.0]]))
    np.testing.assert_allclose(linalg.quadratic_diag(W, linalg.pinv_gram(A)), [1 / 4 + 1 / 25, 9.0])
