"""Charts of private answers: one panel per aggregate, each row's value with ± one standard error bars,
and a clear error when matplotlib (the optional extra ``plots``) is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import dpsql
from dpsql.answers import charts
from dpsql.errors import InterfaceError
from dpsql.noise import SeededRandomSource

SCHEMA = {"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 29, "bin_width": 10},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "income": {"type": "numeric", "lower": 0, "upper": 1000, "bin_width": 500}}}}}
BATCH = """SELECT age, sex, COUNT(*) AS n, SUM(income) AS total FROM people GROUP BY age, sex;
SELECT COUNT(*) AS adults FROM people WHERE age >= 10"""


def _answers() -> list[pa.Table]:
    with duckdb.connect() as data:
        data.execute("CREATE TABLE people AS SELECT i % 30 AS age, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex, "
                     "CAST(i % 1000 AS DOUBLE) AS income FROM range(600) AS r(i)")
        with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=2.0), rng=SeededRandomSource(5)) as con:
            return list(con.cursor().execute(BATCH, epsilon=1.0).fetch_arrow_tables())


def test_each_aggregate_is_a_panel_of_values_with_one_standard_error_bars(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    tables = _answers()
    figure = charts.draw(tables, tmp_path / "answers.png")
    assert (tmp_path / "answers.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    axes = figure.get_axes()
    assert [ax.get_title(loc="left") for ax in axes] == ["statement 1: n", "statement 1: total", "statement 2: adults"]
    for ax, (table, column) in zip(axes, [(tables[0], "n"), (tables[0], "total"), (tables[1], "adults")]):
        (bars,) = ax.containers
        points = bars.lines[0]
        assert list(points.get_xdata()) == pytest.approx(table.column(column).to_pylist())
        (segments,) = bars.lines[2]
        widths = [(path[1][0] - path[0][0]) / 2 for path in segments.get_segments()]
        assert widths == pytest.approx(table.column(f"{column}_stddev").to_pylist())
    labels = [label.get_text() for label in axes[0].get_yticklabels()]
    assert labels == [f"{low}–{low + 10} {sex}" for low in (0, 10, 20) for sex in "FM"]
    assert list(axes[0].get_yticks()) == [5, 4, 3, 2, 1, 0]  # the first row on top
    assert [label.get_text() for label in axes[2].get_yticklabels()] == ["all rows"]


def test_without_matplotlib_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(InterfaceError, match=r'pip install "dpsql\[plots\]"'):
        charts.require()
    with pytest.raises(InterfaceError, match="needs matplotlib"):
        charts.draw([])
