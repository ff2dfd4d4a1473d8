"""The information a release store keeps across batches and stages (``dpsql.releases.information``),
end to end: a connection answers a sequence of batches exactly as one that rebuilds every pool at every
stage (its store's information forgotten before each stage), and a repeated batch answered free
reduces and factors nothing.
"""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import dpsql
from dpsql.budget.accounting import Budget
from dpsql.engine.reuse import reuse
from dpsql.noise import SeededRandomSource
from dpsql.releases import information
from dpsql.releases.information import KeptInformation
from dpsql.schema import Schema

SCHEMA = Schema.load({"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 79, "bin_width": 10},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "income": {"type": "numeric", "lower": 0, "upper": 1000},
}}}})
ROWS = 2000

#: A sequence of batches on one connection: measured, free, measured and combined, sums and counts.
BATCHES = (
    ("SELECT age, COUNT(*) AS n FROM people GROUP BY age; SELECT sex, SUM(income) AS s FROM people GROUP BY sex", 1.0),
    ("SELECT age, COUNT(*) AS n FROM people GROUP BY age", 1.0),
    ("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex; SELECT COUNT(*) AS n FROM people WHERE age < 30", 0.5),
    ("SELECT age, sex, COUNT(*) AS n FROM people GROUP BY age, sex", 1.0),
    ("SELECT COUNT(*) AS n FROM people WHERE age BETWEEN 20 AND 59; SELECT sex, COUNT(*) AS n FROM people "
     "GROUP BY sex", 0.2),
    ("SELECT age, COUNT(*) AS n FROM people GROUP BY age; SELECT sex, SUM(income) AS s FROM people GROUP BY sex", 1.0),
    ("SELECT age, COUNT(*) AS n FROM people GROUP BY age; SELECT sex, SUM(income) AS s FROM people GROUP BY sex", 1.0),
)


def _connect(seed: int) -> dpsql.Connection:
    rng = np.random.default_rng(3)
    con = duckdb.connect()
    con.register("source", pa.table({"age": rng.integers(0, 80, ROWS), "sex": rng.choice(["F", "M"], ROWS),
                                     "income": np.round(rng.uniform(0, 1000, ROWS), 2)}))
    con.execute("CREATE TABLE people AS SELECT * FROM source")
    return dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=100.0), rng=SeededRandomSource(seed))


class _Forgetting(KeptInformation):
    """Kept information that forgets everything before each use: every pool rebuilt at every stage."""

    def reduction(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.reductions.clear()
        self.on_classes.clear()
        return super().reduction(*args, **kwargs)

    def pool(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._layouts.clear()
        return super().pool(*args, **kwargs)


def _floats(tables: list[pa.Table]) -> list[np.ndarray]:
    return [t[name].to_numpy() for t in tables for name in t.column_names
            if pa.types.is_floating(t.schema.field(name).type)]


def test_kept_information_answers_exactly_as_rebuilding_every_pool() -> None:
    kept, rebuilt = _connect(7), _connect(7)
    rebuilt.releases.information = _Forgetting()
    for sql, epsilon in BATCHES:
        mine = kept.cursor().execute(sql, epsilon=epsilon).fetch_arrow_tables()
        theirs = rebuilt.cursor().execute(sql, epsilon=epsilon).fetch_arrow_tables()
        assert [t.schema.metadata for t in mine] == [t.schema.metadata for t in theirs]
        for a, b in zip(_floats(mine), _floats(theirs), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=0)
    assert kept.budget.remaining == pytest.approx(rebuilt.budget.remaining)


def test_a_repeated_free_batch_reduces_and_factors_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    connection = _connect(11)
    cursor = connection.cursor()
    sql = BATCHES[0][0]
    cursor.execute(sql, epsilon=1.0).fetch_arrow_tables()
    first = cursor.execute(sql, epsilon=1.0).fetch_arrow_tables()  # free: pools built once, for every stage
    spent = connection.budget.spent
    calls = {"reduce": 0, "factor": 0}

    def counting(name: str, original):  # type: ignore[no-untyped-def]
        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls[name] += 1
            return original(*args, **kwargs)
        return counted

    monkeypatch.setattr(reuse, "on_classes", counting("reduce", reuse.on_classes))
    monkeypatch.setattr(reuse, "on_classes_of_root", counting("reduce", reuse.on_classes_of_root))
    monkeypatch.setattr(information, "combined", counting("factor", information.combined))
    again = cursor.execute(sql, epsilon=1.0).fetch_arrow_tables()
    assert connection.budget.spent == spent
    assert calls == {"reduce": 0, "factor": 0}
    for a, b in zip(_floats(first), _floats(again), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_batch_kept_releases_answer_but_none_free_is_planned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split plans the batch at its cost to compare kept answers with; when every statement is
    then measured (and combined), that is the plan measured: the batch is not planned twice."""
    from dpsql.engine import pipeline
    from dpsql.engine.reuse import free

    connection = _connect(5)
    cursor = connection.cursor()
    cursor.execute(BATCHES[0][0], epsilon=0.2).fetch_arrow_tables()
    plans = []
    for module in (free, pipeline):
        def counted(*args, _original=module.prepare, **kwargs):  # type: ignore[no-untyped-def]
            plans.append(kwargs.get("statements"))
            return _original(*args, **kwargs)
        monkeypatch.setattr(module, "prepare", counted)
    tables = cursor.execute(BATCHES[0][0], epsilon=1.0).fetch_arrow_tables()  # more than was paid: measured again
    assert plans == [None]
    assert connection.budget.spent == pytest.approx(1.2)
    assert all(json.loads(t.schema.metadata[b"dpsql"])["reuse"]["answered_by_releases"] == [1, 2] for t in tables)


def test_the_first_release_of_a_connection_builds_no_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing kept before and no other statement group measuring the same data vector (counts by
    age, sums by sex), a release's statements keep its own answers: no pool is built for them."""
    factored = []
    original = information.combined
    monkeypatch.setattr(information, "combined", lambda *args: factored.append(1) or original(*args))
    cursor = _connect(3).cursor()
    tables = cursor.execute(BATCHES[0][0], epsilon=1.0).fetch_arrow_tables()
    assert factored == []
    assert all("reuse" not in json.loads(t.schema.metadata[b"dpsql"]) for t in tables)
    cursor.execute(BATCHES[1][0], epsilon=1.0).fetch_arrow_tables()  # then one is: combined
    assert factored
