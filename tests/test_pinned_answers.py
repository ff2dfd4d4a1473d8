"""Answers under a seeded generator are pinned: a restructuring of the engine must not change them.

Four batches cover the answering paths: the statement-group route under ε-DP (GROUP BY counts,
ranges, SUM and AVG read as value cells or measured apart), ResidualPlanner under ρ-zCDP (COUNT(*)
marginals), a truncated SUM (threshold released first, then the sums clamped at ±θ) with a privacy
unit of several rows, and a rounded value-cell SUM. The data are a fixed arithmetic pattern (no random
generator whose stream could change between library versions), each batch has its own seeded
``SeededRandomSource``, and every value and standard error of every statement is compared with the
pins in ``fixtures/pinned_answers.json``.

The pins are the output of the engine as it was before it was split into passes (commit 5cff301).
They are compared to 1e-9 relative, not bit for bit, so that a different BLAS rounding in the last
place does not fail the test; any change of plan, budget split or noise draw moves answers by whole
noise units, far beyond that. To pin again after an intended change of answers:
``python tests/test_pinned_answers.py --write`` (and say why in the commit).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import duckdb
import pytest

import dpsql
from _helpers import MIXED_COLUMNS
from dpsql.budget.accounting import Budget
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

PINS = Path(__file__).parent / "fixtures" / "pinned_answers.json"
ROWS = 3000

COLUMNS: dict[str, dict[str, object]] = {
    "person": {"type": "integer", "lower": 0, "upper": 999, "bin_width": 1000}, **MIXED_COLUMNS}
UNIT = {"column": "person", "max_rows": 3}

BATCHES: dict[str, tuple[str, dict[str, float], bool]] = {
    "statement groups, epsilon": ("""
        SELECT sex, COUNT(*) AS n FROM t GROUP BY sex;
        SELECT region, sex, COUNT(*) AS n FROM t GROUP BY region, sex;
        SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 3 AND 11;
        SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 0 AND 15;
        SELECT COUNT(*) AS n FROM t WHERE age >= 12;
        SELECT sex, SUM(income) AS s, AVG(income) AS a FROM t GROUP BY sex;
        SELECT rooms, COUNT(*) AS n, AVG(income) AS a FROM t WHERE age < 10 GROUP BY rooms;
        SELECT region, SUM(rooms) AS r, AVG(rooms) AS ar, COUNT(*) AS n FROM t GROUP BY region
        """, {"epsilon": 1.0}, False),
    "residual planner, rho": ("""
        SELECT sex, region, COUNT(*) AS n FROM t GROUP BY sex, region;
        SELECT region, rooms, COUNT(*) AS n FROM t GROUP BY region, rooms;
        SELECT sex, rooms, COUNT(*) AS n FROM t GROUP BY sex, rooms;
        SELECT COUNT(*) AS n FROM t
        """, {"rho": 0.5}, False),
    "truncated sum, privacy unit": ("""
        SELECT region, SUM(wealth) AS w, AVG(wealth) AS a, COUNT(*) AS n FROM t GROUP BY region;
        SELECT COUNT(*) AS n FROM t WHERE age < 5
        """, {"epsilon": 2.0}, True),
    "rounded value cells, rho": ("""
        SELECT sex, SUM(score) AS s, AVG(score) AS a, COUNT(*) AS n FROM t GROUP BY sex;
        SELECT region, SUM(score) AS s FROM t GROUP BY region
        """, {"rho": 0.25}, False),
}


def _rows() -> list[tuple[object, ...]]:
    """A fixed, uneven pattern: every column cycles with a different stride; wealth is heavy-tailed."""
    rows = []
    for i in range(ROWS):
        wealth = (i * 7919) % 50_000 + (900_000 if i % 97 == 0 else 0)
        rows.append((i % 1000, (i * 7) % 20, "FM"[(i * 5 // 3) % 2], "NESW"[(i * 3) % 4 if i % 5 else 0],
                     1 + (i * 11) % 4, float((i * 37) % 101), (i * 13 % 7) / 2 if i % 7 else 0.25, wealth))
    return rows


def _database() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (person INTEGER, age INTEGER, sex VARCHAR, region VARCHAR, rooms INTEGER, "
                "income DOUBLE, score DOUBLE, wealth BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _rows())
    return con


def _answer(name: str, seed: int) -> list[dict[str, list[object]]]:
    """Every statement's Arrow table of one batch, as column lists (floats kept exactly)."""
    sql, cost, with_unit = BATCHES[name]
    table: dict[str, object] = {"columns": COLUMNS}
    if with_unit:
        table["privacy_unit"] = UNIT
    schema = Schema.load({"tables": {"t": table}})
    connection = dpsql.connect(_database(), schema=schema, budget=Budget(epsilon=100.0) if "epsilon" in cost
                               else Budget(rho=100.0), rng=SeededRandomSource(seed))
    cursor = connection.cursor()
    cursor.execute(sql, **cost)
    return [table.to_pydict() for table in cursor.fetch_arrow_tables()]


def _close(pinned: object, found: object) -> bool:
    if isinstance(pinned, float) and isinstance(found, float):
        return math.isclose(pinned, found, rel_tol=1e-9, abs_tol=1e-9) or (math.isnan(pinned) and math.isnan(found))
    return pinned == found


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
    assert len(found) == len(pinned)
    for statement, (want, got) in enumerate(zip(pinned, found), start=1):
        assert list(got) == list(want), f"statement {statement}: columns"
        for column in want:
            pairs = list(zip(want[column], got[column], strict=True))
            assert all(_close(a, b)
                       for a, b in pairs), f"statement {statement}, column {column}: {want[column]} != {got[column]}"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    pins = {name: _answer(name, seed=index + 11) for index, name in enumerate(BATCHES)}
    PINS.write_text(json.dumps(pins, indent=1, default=str) + "\n")
    print(f"wrote {PINS}")
