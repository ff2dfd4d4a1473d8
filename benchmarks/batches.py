"""The named batches of issue 31, on synthetic schemas (planning reads no data): ``planner.py`` times them
and ``tests/planning/test_expected_error_corpus.py`` pins their expected errors.

- :data:`PEOPLE` / :data:`ISSUE_BATCH`: 20 statements whose counts form one statement group over
  age × sex × region (21 × 3 × 51 = 3,213 cells, the outside cells included); income [0, 500000) in
  10,000-wide cells; :data:`SECOND_BATCH`, a different batch on the same columns; :data:`FREE_BATCH`, a
  batch whose release is kept (its groups within ``REUSE_CELLS``), answered free when repeated.
- :func:`events_schema` / :func:`events_mix`: the planner benchmark's own mix on one table ``events``.
- :func:`census_mix`: statements of many kinds over the demo's census table (``dpsql.cli.demo.SCHEMA``).
- :func:`one_range_changed`, :func:`one_statement_added`: a batch that differs from another in one
  statement, so that it shares every statement group but one with it (issue 31's "a different batch
  sharing its groups").
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: age 0..99 (GROUP BY in 5-year bands), sex, 50 regions, income [0, 500000) in 10,000-wide cells.
PEOPLE: dict[str, Any] = {"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 5, "resolution": 1},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "region": {"type": "categorical", "values": [f"r{i:02d}" for i in range(50)]},
    "income": {"type": "numeric", "lower": 0, "upper": 500000, "bin_width": 10000, "resolution": 10000},
}}}}

#: sex, COUNT and AVG(income) by sex, a range, GROUP BY age, region, (sex, region), 15 overlapping age ranges.
ISSUE_BATCH: list[str] = [
    "SELECT sex, COUNT(*) AS n, AVG(income) AS a FROM people GROUP BY sex",
    "SELECT COUNT(*) AS n FROM people WHERE age BETWEEN 30 AND 49",
    "SELECT age, COUNT(*) AS n FROM people GROUP BY age",
    "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "SELECT sex, region, COUNT(*) AS n FROM people GROUP BY sex, region",
    *(f"SELECT COUNT(*) AS n FROM people WHERE age BETWEEN {5 * k} AND {5 * k + 29}" for k in range(15)),
]

#: Another batch on the same columns (its groups share columns with :data:`ISSUE_BATCH`'s).
SECOND_BATCH: list[str] = [
    "SELECT sex, COUNT(*) AS n, AVG(income) AS a FROM people GROUP BY sex",
    "SELECT COUNT(*) AS n FROM people WHERE age BETWEEN 20 AND 64",
    "SELECT age, COUNT(*) AS n FROM people GROUP BY age",
    "SELECT region, COUNT(*) AS n FROM people WHERE sex = 'F' GROUP BY region",
    "SELECT sex, SUM(income) AS s FROM people WHERE age >= 65 GROUP BY sex",
    *(f"SELECT COUNT(*) AS n FROM people WHERE age BETWEEN {10 * k} AND {10 * k + 19}" for k in range(8)),
]

#: A batch whose statement groups stay within ``REUSE_CELLS`` (so its release is kept): measured once,
#: then answered entirely free by reuse when asked again.
FREE_BATCH: list[str] = [
    "SELECT age, COUNT(*) AS n FROM people GROUP BY age",
    "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex",
    "SELECT sex, region, COUNT(*) AS n FROM people WHERE age >= 65 GROUP BY sex, region",
    *(f"SELECT COUNT(*) AS n FROM people WHERE age BETWEEN {10 * k} AND {10 * k + 19}" for k in range(8)),
]


def events_schema(cells: int) -> dict[str, Any]:
    """The events table with an x domain of ``cells`` integer cells (16 GROUP BY bins)."""
    return {"tables": {"events": {"columns": {
        "x": {"type": "integer", "lower": 0, "upper": cells - 1, "bin_width": max(1, cells // 16), "resolution": 1},
        "y": {"type": "integer", "lower": 0, "upper": 63, "bin_width": 8, "resolution": 1},
        "g": {"type": "categorical", "values": [f"g{i}" for i in range(8)]},
        "v": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
    }}}}


def events_mix(count: int, cells: int, seed: int = 3) -> list[str]:
    """``count`` statements over ``events``, per 10: four 1-D ranges on x, one 2-D range on x and y,
    GROUP BY g under a range, AVG(v) by g under a range, GROUP BY y under a range, an AVG of v under
    a range and GROUP BY g, y (fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        lo, hi = sorted(int(v) for v in rng.integers(0, cells, size=2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, 64, size=2))
        out.append([
            f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi}",
            f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi}",
            f"SELECT COUNT(*) AS n FROM events WHERE x >= {lo}",
            f"SELECT COUNT(*) AS n FROM events WHERE x < {hi + 1}",
            f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi} AND y BETWEEN {y0} AND {y1}",
            f"SELECT g, COUNT(*) AS n FROM events WHERE x >= {lo} GROUP BY g ORDER BY g",
            f"SELECT g, AVG(v) AS a FROM events WHERE x BETWEEN {lo} AND {hi} GROUP BY g ORDER BY g",
            f"SELECT y, COUNT(*) AS n FROM events WHERE x < {hi + 1} GROUP BY y ORDER BY y",
            f"SELECT AVG(v) AS a FROM events WHERE y BETWEEN {y0} AND {y1}",
            "SELECT g, y, COUNT(*) AS n FROM events GROUP BY g, y ORDER BY g, y",
        ][k % 10])
    return out


def census_mix(count: int, seed: int = 31) -> list[str]:
    """``count`` statements over the demo's ``census`` table, per 10: GROUP BY one column and two,
    age ranges, a count under two predicates, AVG and SUM of income by a column, an IN list, an
    income threshold (fixed by ``seed``)."""
    from dpsql.cli.demo import EDUCATION, STATES

    rng = np.random.default_rng(seed)
    one = ("age", "sex", "race", "education", "hours")
    two = (("age", "sex"), ("education", "sex"), ("race", "sex"), ("hours", "sex"))
    out = []
    for k in range(count):
        a0, a1 = sorted(int(v) for v in rng.integers(0, 100, size=2))
        h = int(rng.integers(1, 99))
        column, pair = one[int(rng.integers(len(one)))], two[int(rng.integers(len(two)))]
        states = ", ".join(f"'{s}'" for s in rng.choice(STATES, size=3, replace=False))
        out.append([
            f"SELECT {column}, COUNT(*) AS n FROM census GROUP BY {column}",
            f"SELECT {pair[0]}, {pair[1]}, COUNT(*) AS n FROM census GROUP BY {pair[0]}, {pair[1]}",
            f"SELECT COUNT(*) AS n FROM census WHERE age BETWEEN {a0} AND {a1}",
            f"SELECT COUNT(*) AS n FROM census WHERE age >= {a0}",
            f"SELECT COUNT(*) AS n FROM census WHERE hours >= {h} AND sex = '{'FM'[k % 2]}'",
            f"SELECT education, AVG(income) AS a FROM census WHERE age BETWEEN {a0} AND {a1} GROUP BY education",
            f"SELECT sex, SUM(income) AS s FROM census WHERE hours < {h} GROUP BY sex",
            f"SELECT COUNT(*) AS n FROM census WHERE state IN ({states})",
            f"SELECT COUNT(*) AS n FROM census WHERE income >= {5000 * int(rng.integers(1, 100))}",
            f"SELECT race, COUNT(*) AS n FROM census WHERE education = '{EDUCATION[k % len(EDUCATION)]}' GROUP BY race",
        ][k % 10])
    return out


def census_scan_mix(count: int, seed: int = 32) -> list[str]:
    """``count`` statements over the demo's ``census`` table whose one scan reads six cell sets (age ×
    hours, age × income, hours × state, hours, age × hours × income, age × sex), two sums (income,
    hours) and two non-NULL counts: ranges over two and three columns, AVG and SUM by a column, GROUP BYs
    (fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        a0, a1 = sorted(int(v) for v in rng.integers(0, 100, size=2))
        h = int(rng.integers(1, 99))
        i = 5000 * int(rng.integers(1, 100))
        out.append([
            f"SELECT COUNT(*) AS n FROM census WHERE age BETWEEN {a0} AND {a1} AND hours >= {h}",
            f"SELECT COUNT(*) AS n FROM census WHERE age >= {a0} AND income >= {i}",
            f"SELECT state, COUNT(*) AS n FROM census WHERE hours >= {h} GROUP BY state",
            "SELECT hours, COUNT(*) AS n FROM census GROUP BY hours",
            f"SELECT COUNT(*) AS n FROM census WHERE age < {a1} AND hours < {h} AND income < {i}",
            "SELECT age, sex, COUNT(*) AS n FROM census GROUP BY age, sex",
            f"SELECT AVG(income) AS a FROM census WHERE age BETWEEN {a0} AND {a1}",
            f"SELECT SUM(hours) AS s FROM census WHERE age BETWEEN {a0} AND {a1}",
            "SELECT age, AVG(hours) AS a FROM census GROUP BY age",
            "SELECT sex, SUM(income) AS s FROM census GROUP BY sex",
        ][k % 10])
    return out


def one_range_changed(batch: list[str]) -> list[str]:
    """``batch`` with its first statement's upper bound lowered by 8 (its first statement must end
    ``AND <number>``): only the statement group holding it changes."""
    head, _, upper = batch[0].rpartition(" AND ")
    return [f"{head} AND {int(upper) - 8}", *batch[1:]]


def one_statement_added(batch: list[str]) -> list[str]:
    """``batch`` and one more range count over its first statement's table and column: it joins
    that column's group, the others are unchanged."""
    return [*batch, "SELECT COUNT(*) AS n FROM events WHERE x BETWEEN 30 AND 99"]
