"""Answers under a seeded generator are pinned: a restructuring of the engine must not change them.

Eight batches cover the answering paths. A batch is one or more executes on one connection (each
recorded), over a schema of its own:

- statement groups under ε-DP: GROUP BY counts, ranges, SUM and AVG read as value cells or measured apart;
- ResidualPlanner under ρ-zCDP: COUNT(*) marginals;
- a truncated SUM (threshold released first, then the sums clamped at ±θ) with a privacy unit of several rows;
- a rounded value-cell SUM;
- order statistics: MEDIAN, PERCENTILE_CONT, PERCENTILE_DISC, QUANTILE_DISC, MIN and MAX (prefix counts,
  and the intervals widened to cell boundaries), grouped and filtered;
- joins under ε-DP, two executes: a public lookup table (``regions``, INNER and LEFT, a public column grouped by and
  filtered on; its rows come from the schema, never from the database), then the table joined to its
  privacy unit's table (``t JOIN people``, the cap after the join);
- reuse, two executes on one connection: the second batch has a statement answered free from the kept
  release, one measured and combined with it, and one measured; the metadata's ``reuse`` is pinned too;
- local DP (``dpsql.local.sql``): the batch's cells, a closed-form strategy (Hadamard response, published
  as exactly ε-LDP integer weights), one seeded report per row and the batch answered from the reports.
  Its draws are the report outputs (``randomize_cells``: uniform integers from the seeded source, not
  a ``dpsql.noise`` sampler), with the published strategy's SHA-256 as their parameter. The strategy is
  not ``design_batch``'s: that one is a numerical optimizer's float endpoint, whose integer weights (and
  so every report) may differ between BLAS kernels; the optimizer is tested in test_local_optimize.

The data are a fixed arithmetic pattern (no random generator whose stream could change between library
versions), each batch has its own seeded ``SeededRandomSource``, and ``fixtures/pinned_answers.json``
holds, per batch, what the engine drew and what it answered.

What is exact is compared exactly, what is computed in floating point within a tolerance derived from
the computation, so that the test passes under every BLAS kernel (OpenBLAS picks its kernels by CPU,
and they round differently in the last bits):

- Plan structure and costs, exactly: every noise draw's sampler, size and the plan it measures, each
  statement's columns, the metadata's strategy names and ``budget_spent`` (and ``reuse``, where a
  batch reuses; the local mechanism, strategy hash and report count in local mode).
- The noise, exactly: each sampler's rational parameter and its integer draws, where they are exact
  quantities: functions of integers (an integer strategy's Δ) and of budget shares computed in closed
  form. A changed plan, split or sampler moves them.
- Except in a batch where a numerical optimizer over a dense matrix chose a strategy (:data:`OPTIMIZED`:
  HDMM's OPT₀, OPT⊗, OPT₊ and Eigen-Design). Its float entries are an optimizer's endpoint, which
  differs between kernels (measured on the rounded value-cell batch: Δ₂² and σ² 2.2 % apart between
  the Haswell and SkylakeX kernels, at expected errors equal to 10⁻⁶), and the batch's budget split
  weighs every measurement by such errors, so every share differs in its last bits (measured:
  4·10⁻⁸ relatively). An exact sampler given another rational draws other integers from the same
  random words, so there neither parameters nor draws are exact quantities: the parameters are
  compared to within :data:`SHARE_TOLERANCE` (closed-form strategies) or :data:`OPTIMIZED_PARAMETER`
  (the optimizer's), and every draw is replaced by zeros (the samplers are tested exactly elsewhere:
  test_noise, test_calibration), so that the answers are the plan's W Ã⁺ Ã x = W x up to float
  rounding, whichever endpoint the kernel reached. OPT_M (``HDMM-marginals``: a handful of marginal
  weights) is pinned exactly: its integer weights agree under the five kernels in these batches. Not
  in every batch: a joins batch under ρ-zCDP reached Δ₂² 9·10⁻¹⁰ apart between the SkylakeX and Haswell
  kernels, enough to move the weights' rounding, so the joins are pinned under ε.
- Standard errors (and expected RMSEs) to :data:`STDDEV_TOLERANCE` relatively: endpoints' errors agree
  to ~10⁻⁶ (measured: 8.5·10⁻⁷ at most across five kernels).
- Values to :data:`VALUE_TOLERANCE` relatively: given the same integer noise they are least-squares
  solutions over strategies of at most a few hundred cells and condition numbers ≤ 10³, whose float
  rounding is below n·κ·2^-53 ≈ 10⁻¹⁰ relatively (measured: 4·10⁻¹⁵); a changed draw moves them by
  whole noise units.

To pin again after an intended change of answers: ``python tests/test_pinned_answers.py --write`` (and
say why in the commit). The pins were written under OpenBLAS's SkylakeX kernels and pass under its
Haswell, Sandybridge, Nehalem and Prescott kernels; ``.ci/run`` runs this test again under Haswell
and Sandybridge.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import dpsql
import dpsql.local.sql
import dpsql.noise
from _helpers import MIXED_COLUMNS
from dpsql.budget.accounting import Budget
from dpsql.engine.measuring.measurements import PlannedVector
from dpsql.local import protocol
from dpsql.local.baselines import hadamard
from dpsql.noise import SeededRandomSource
from dpsql.planning import mechanism
from dpsql.schema import Schema

PINS = Path(__file__).parent / "fixtures" / "pinned_answers.json"
ROWS = 3000

#: Plans whose strategy is a numerical optimizer's dense endpoint (module docstring).
OPTIMIZED = frozenset({"HDMM", "HDMM-Kron", "HDMM-union", "Eigen-Design"})
#: An optimized strategy's noise parameter, relatively: its endpoints differ by a few % between kernels.
OPTIMIZED_PARAMETER = 0.1
#: A closed-form strategy's noise parameter in a batch split by optimized errors, relatively (4·10⁻⁸ measured).
SHARE_TOLERANCE = 1e-6
#: Standard errors and expected RMSEs, relatively: endpoints' errors agree to 10⁻⁶..10⁻⁵.
STDDEV_TOLERANCE = 1e-4
#: Values, relatively (and absolutely near zero): float rounding of the least squares, ≈ 10⁻¹⁰.
VALUE_TOLERANCE = 1e-9
#: The samplers the engine draws noise with (``dpsql.noise``, looked up there by every caller).
SAMPLERS = ("discrete_laplace_wide", "discrete_gaussian_wide", "discrete_gaussian", "discrete_gaussian_scalar")

COLUMNS: dict[str, dict[str, object]] = {
    "person": {"type": "integer", "lower": 0, "upper": 999, "bin_width": 1000}, **MIXED_COLUMNS}
UNIT = {"column": "person", "max_rows": 3}
#: The joins batch's schema: ``region`` references a public lookup table and ``t``'s privacy unit is ``people``'s.
JOINED: dict[str, dict[str, object]] = {
    "t": {"columns": {**COLUMNS, "region": {**MIXED_COLUMNS["region"], "references": "regions.code"}},
          "privacy_unit": {**UNIT, "table": "people"}},
    "people": {"columns": {"kind": {"type": "categorical", "values": ["a", "b", "c"]}},
               "privacy_unit": {"column": "person", "max_rows": 1}},
    "regions": {"public": True, "columns": ["code", "name", "area"],
                "rows": [["N", "North", "A"], ["E", "East", "A"], ["S", "South", "B"]]},
}


class Batch(NamedTuple):
    """Executes (SQL, cost) in order on one connection, over a schema of ``tables``; ``local``: the one
    execute is answered in local mode (``dpsql.local.sql``) instead."""

    executes: tuple[tuple[str, dict[str, float]], ...]
    tables: dict[str, dict[str, object]]
    local: bool = False


PLAIN = {"t": {"columns": COLUMNS}}
BATCHES: dict[str, Batch] = {  # seeded by position: append new batches, so that the others keep their seeds
    "statement groups, epsilon": Batch((("""
        SELECT sex, COUNT(*) AS n FROM t GROUP BY sex;
        SELECT region, sex, COUNT(*) AS n FROM t GROUP BY region, sex;
        SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 3 AND 11;
        SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 0 AND 15;
        SELECT COUNT(*) AS n FROM t WHERE age >= 12;
        SELECT sex, SUM(income) AS s, AVG(income) AS a FROM t GROUP BY sex;
        SELECT rooms, COUNT(*) AS n, AVG(income) AS a FROM t WHERE age < 10 GROUP BY rooms;
        SELECT region, SUM(rooms) AS r, AVG(rooms) AS ar, COUNT(*) AS n FROM t GROUP BY region
        """, {"epsilon": 1.0}),), PLAIN),
    "residual planner, rho": Batch((("""
        SELECT sex, region, COUNT(*) AS n FROM t GROUP BY sex, region;
        SELECT region, rooms, COUNT(*) AS n FROM t GROUP BY region, rooms;
        SELECT sex, rooms, COUNT(*) AS n FROM t GROUP BY sex, rooms;
        SELECT COUNT(*) AS n FROM t
        """, {"rho": 0.5}),), PLAIN),
    "truncated sum, privacy unit": Batch((("""
        SELECT region, SUM(wealth) AS w, AVG(wealth) AS a, COUNT(*) AS n FROM t GROUP BY region;
        SELECT COUNT(*) AS n FROM t WHERE age < 5
        """, {"epsilon": 2.0}),), {"t": {"columns": COLUMNS, "privacy_unit": UNIT}}),
    "rounded value cells, rho": Batch((("""
        SELECT sex, SUM(score) AS s, AVG(score) AS a, COUNT(*) AS n FROM t GROUP BY sex;
        SELECT region, SUM(score) AS s FROM t GROUP BY region
        """, {"rho": 0.25}),), PLAIN),
    "order statistics, epsilon": Batch((("""
        SELECT sex, MEDIAN(age) AS m, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY income) AS p90 FROM t GROUP BY sex;
        SELECT MIN(rooms) AS lo, MAX(age) AS hi, QUANTILE_DISC(age, 0.25) AS q FROM t WHERE region = 'N';
        SELECT region, PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY rooms) AS d, MAX(income) AS top FROM t
          WHERE age >= 4 GROUP BY region
        """, {"epsilon": 1.0}),), PLAIN),
    "joins, epsilon": Batch((("""
        SELECT r.name, COUNT(*) AS n, SUM(income) AS s FROM t JOIN regions r ON t.region = r.code GROUP BY r.name;
        SELECT r.area, sex, COUNT(*) AS n, AVG(rooms) AS a FROM t LEFT JOIN regions r ON t.region = r.code
          WHERE age < 15 GROUP BY r.area, sex
        """, {"epsilon": 1.0}), ("""
        SELECT p.kind, COUNT(*) AS n, SUM(t.income) AS s FROM t JOIN people p USING (person) GROUP BY p.kind;
        SELECT t.sex, COUNT(*) AS n FROM t JOIN people p ON t.person = p.person
          WHERE p.kind = 'a' OR t.rooms > 2 GROUP BY t.sex
        """, {"epsilon": 1.0})), JOINED),
    "reuse, epsilon": Batch((("""
        SELECT region, sex, COUNT(*) AS n FROM t GROUP BY region, sex;
        SELECT sex, SUM(income) AS s FROM t GROUP BY sex
        """, {"epsilon": 2.0}), ("""
        SELECT COUNT(*) AS n FROM t WHERE region = 'N' AND sex = 'F';
        SELECT COUNT(*) AS n FROM t;
        SELECT rooms, COUNT(*) AS n FROM t WHERE sex = 'M' GROUP BY rooms
        """, {"epsilon": 1.0})), PLAIN),
    "local DP, epsilon": Batch((("""
        SELECT sex, COUNT(*) AS n FROM t GROUP BY sex;
        SELECT region, COUNT(*) AS n FROM t WHERE age < 10 GROUP BY region;
        SELECT COUNT(*) AS n FROM t WHERE sex = 'F' AND age >= 10
        """, {"epsilon": 1.0}),), {"t": {"columns": MIXED_COLUMNS}}, local=True),
}


def _rows() -> list[tuple[object, ...]]:
    """A fixed, uneven pattern: every column cycles with a different stride; wealth is heavy-tailed."""
    rows = []
    for i in range(ROWS):
        wealth = (i * 7919) % 50_000 + (900_000 if i % 97 == 0 else 0)
        rows.append((i % 1000, (i * 7) % 20, "FM"[(i * 5 // 3) % 2], "NESW"[(i * 3) % 4 if i % 5 else 0],
                     1 + (i * 11) % 4, float((i * 37) % 101), (i * 13 % 7) / 2 if i % 7 else 0.25, wealth))
    return rows


def _database(tables: dict[str, dict[str, object]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (person INTEGER, age INTEGER, sex VARCHAR, region VARCHAR, rooms INTEGER, "
                "income DOUBLE, score DOUBLE, wealth BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _rows())
    if "people" in tables:  # the unit table: persons 0..999 but every 11th, of three kinds
        con.execute("CREATE TABLE people AS SELECT CAST(i AS INTEGER) AS person, 'abc'[i % 3 + 1] AS kind "
                    "FROM range(1000) AS r(i) WHERE i % 11 <> 0")
    return con


@contextmanager
def _recorded_noise() -> Iterator[list[dict[str, Any]]]:
    """Every noise draw in the block, in order: sampler, parameter, size, the plan measured (None off
    the statement-group route) and the integer draws — None, and zeros drawn, once a plan of the batch
    is OPTIMIZED (the planned vectors are calibrated, so named, before any is measured). Local mode's
    reports are recorded as ``randomize_cells`` draws: the strategy's hash and name, the outputs."""
    draws: list[dict[str, Any]] = []
    plans: dict[int, str] = {}  # id of the strategy a PlannedVector hands to mechanism.measure → its plan
    current: list[str | None] = [None]
    patches: list[tuple[object, str, object]] = []

    def patch(owner: object, attribute: str, replacement: object) -> None:
        patches.append((owner, attribute, getattr(owner, attribute)))
        setattr(owner, attribute, replacement)

    measured, measure = PlannedVector.measured, mechanism.measure

    def measured_with_plan(self: PlannedVector) -> Any:
        strategy = measured(self)
        plans[id(strategy.strategy)] = self.plan.name
        return strategy

    def measure_with_plan(A: Any, *args: Any, **kwargs: Any) -> Any:
        current[0] = plans.get(id(A), "?")
        try:
            return measure(A, *args, **kwargs)
        finally:
            current[0] = None

    def recording(sampler: str, draw: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(parameter: Fraction, size: int | None = None, **kwargs: Any) -> Any:
            zeros = not OPTIMIZED.isdisjoint(plans.values())
            if zeros:
                out: Any = np.zeros(size, dtype=np.int64) if size is not None else 0
            else:
                out = draw(parameter, **kwargs) if size is None else draw(parameter, size, **kwargs)
            draws.append({"sampler": sampler, "parameter": str(parameter), "size": size, "plan": current[0],
                          "draws": None if zeros else np.asarray(out, dtype=object).ravel().tolist()})
            return out
        return wrapped

    randomize_cells = dpsql.local.sql.randomize_cells

    def randomized(published: protocol.StrategyFile, cells: Any, **kwargs: Any) -> Any:
        out = randomize_cells(published, cells, **kwargs)
        draws.append({"sampler": "randomize_cells", "parameter": published.sha256, "size": int(np.size(cells)),
                      "plan": published.name, "draws": np.asarray(out, dtype=object).tolist()})
        return out

    patch(PlannedVector, "measured", measured_with_plan)
    patch(dpsql.local.sql, "randomize_cells", randomized)
    patch(mechanism, "measure", measure_with_plan)
    for sampler in SAMPLERS:
        patch(dpsql.noise, sampler, recording(sampler, getattr(dpsql.noise, sampler)))
    try:
        yield draws
    finally:
        for owner, attribute, original in reversed(patches):
            setattr(owner, attribute, original)


def _answer(name: str, seed: int) -> dict[str, Any]:
    """One batch: its noise draws, every statement's Arrow table as column lists (floats kept exactly)
    and the metadata that states its plan and cost, over all its executes in order."""
    batch = BATCHES[name]
    schema = Schema.load({"tables": batch.tables})
    if batch.local:
        return _answer_locally(batch, schema, seed)
    first_cost = batch.executes[0][1]
    connection = dpsql.connect(_database(batch.tables), schema=schema,
                               budget=Budget(epsilon=100.0) if "epsilon" in first_cost else Budget(rho=100.0),
                               rng=SeededRandomSource(seed))
    cursor = connection.cursor()
    tables = []
    with _recorded_noise() as draws:
        for sql, cost in batch.executes:
            cursor.execute(sql, **cost)
            tables += cursor.fetch_arrow_tables()
    metadata = [json.loads(t.schema.metadata[b"dpsql"]) for t in tables]
    return {"noise": draws, "statements": [t.to_pydict() for t in tables],  # "reuse" where it reused
            "metadata": [{key: m.get(key) for key in ("strategy", "expected_rmse", "budget_spent", "reuse")
                          if key != "reuse" or m.get(key) is not None} for m in metadata]}


def _answer_locally(batch: Batch, schema: Schema, seed: int) -> dict[str, Any]:
    """Local mode: Hadamard response over the batch's cells (closed form: module docstring), one seeded
    report per row of ``t``, the batch answered from the reports."""
    (sql, cost), = batch.executes
    layout = dpsql.local.sql.compile_local(sql, schema).layout
    published = protocol.publish(hadamard(layout.cells, epsilon=cost["epsilon"]), layout=layout)
    records = pa.table(dict(zip(("age", "sex", "region"), list(zip(*_rows()))[1:4], strict=True)))
    with _recorded_noise() as draws:
        reports = dpsql.local.sql.randomize_records(published, records, rng=SeededRandomSource(seed))
    tables = dpsql.local.sql.answer_batch(sql, published, reports, schema=schema)
    metadata = [json.loads(t.schema.metadata[b"dpsql"]) for t in tables]
    return {"noise": draws, "statements": [t.to_pydict() for t in tables],
            "metadata": [{key: m.get(key) for key in ("mechanism", "epsilon", "strategy_sha256", "reports")}
                         for m in metadata]}


def _close(pinned: object, found: object, tolerance: float) -> bool:
    if isinstance(pinned, float) and isinstance(found, float):
        return math.isclose(pinned, found, rel_tol=tolerance, abs_tol=tolerance) or \
            (math.isnan(pinned) and math.isnan(found))
    return pinned == found


def _same_noise(pinned: dict[str, Any], found: dict[str, Any]) -> bool:
    if any(pinned[key] != found[key] for key in ("sampler", "size", "plan", "draws")):
        return False
    if pinned["draws"] is not None:  # exact quantities (module docstring)
        return bool(pinned["parameter"] == found["parameter"])
    tolerance = OPTIMIZED_PARAMETER if pinned["plan"] in OPTIMIZED else SHARE_TOLERANCE
    return abs(Fraction(found["parameter"]) / Fraction(pinned["parameter"]) - 1) <= tolerance


@pytest.fixture()
def cold_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty strategy and plan caches: a strategy another test optimized and cached for the same Gram may
    differ in its last bits from a fresh optimization, and so move a seeded draw."""
    from dpsql.planning import plan_cache

    monkeypatch.setenv("DPSQL_CACHE_DIR", str(tmp_path / "cache"))
    plan_cache.clear_memory()


@pytest.mark.parametrize("name", list(BATCHES))
@pytest.mark.usefixtures("cold_caches")
def test_seeded_answers_match_the_pins(name: str) -> None:
    pinned = json.loads(PINS.read_text())[name]
    found = _answer(name, seed=list(BATCHES).index(name) + 11)
    assert [(d["sampler"], d["size"], d["plan"]) for d in found["noise"]] == \
        [(d["sampler"], d["size"], d["plan"]) for d in pinned["noise"]], "the noise drawn: samplers, sizes, plans"
    for number, (want, got) in enumerate(zip(pinned["noise"], found["noise"]), start=1):
        assert _same_noise(want, got), f"noise draw {number}: {want} != {got}"
    assert len(found["statements"]) == len(pinned["statements"])
    for statement, (want, got) in enumerate(zip(pinned["statements"], found["statements"]), start=1):
        assert list(got) == list(want), f"statement {statement}: columns"
        for column in want:
            tolerance = STDDEV_TOLERANCE if column.endswith("_stddev") else VALUE_TOLERANCE
            pairs = list(zip(want[column], got[column], strict=True))
            assert all(_close(a, b, tolerance) for a, b in pairs), \
                f"statement {statement}, column {column}: {want[column]} != {got[column]}"
    assert len(found["metadata"]) == len(pinned["metadata"])
    for statement, (want, got) in enumerate(zip(pinned["metadata"], found["metadata"]), start=1):
        assert got.keys() == want.keys(), f"statement {statement}: metadata"
        rmse = want.pop("expected_rmse", None), got.pop("expected_rmse", None)
        assert got == want, f"statement {statement}: plan, cost, reuse or local strategy"
        if rmse[0] is not None:
            assert rmse[1] is not None and rmse[1].keys() == rmse[0].keys()
            assert all(_close(rmse[0][k], rmse[1][k], STDDEV_TOLERANCE) for k in rmse[0]), \
                f"statement {statement}: expected RMSE"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import os
    import tempfile

    os.environ["DPSQL_CACHE_DIR"] = tempfile.mkdtemp(prefix="dpsql-pins-")  # cold caches, as the test
    pins = {name: _answer(name, seed=index + 11) for index, name in enumerate(BATCHES)}
    PINS.write_text(json.dumps(pins, indent=1, default=str) + "\n")
    print(f"wrote {PINS}")
