"""The declared schema: domains, base cells, bins, boundaries and validation messages."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from dpsql.errors import SchemaError
from dpsql.schema import Categorical, Ordered, Schema

TOML = """
[tables.people]
privacy_unit = { column = "person_id", max_rows = 3 }

[tables.people.columns.age]
type = "integer"
lower = 0
upper = 99
bin_width = 10
resolution = 1

[tables.people.columns.sex]
type = "categorical"
values = ["F", "M"]
other = true

[tables.people.columns.income]
type = "numeric"
lower = 0
upper = 500000
bin_width = 10000

[tables.people.columns.joined]
type = "date"
lower = 2020-01-15
upper = 2021-12-31
unit = "month"
bin_width = 3

[tables.people.columns.score]
type = "numeric"
edges = [0, 1, 5, 10]
"""


def test_loads_toml_text_path_and_dict(tmp_path: Path) -> None:
    path = tmp_path / "schema.toml"
    path.write_text(TOML)
    for source in (TOML, path, str(path)):
        schema = Schema.load(source)
        assert set(schema.table("PEOPLE").columns) == {"age", "sex", "income", "joined", "score"}
    assert Schema.load({"tables": {"t": {"columns": {"c": {"type": "categorical", "values": [1, 2]}}}}}).table("t")


def test_domains_cells_bins_and_labels() -> None:
    table = Schema.load(TOML).table("people")
    assert table.privacy_unit.column == "person_id" and table.privacy_unit.max_rows == 3
    age = table.column("age").domain
    assert isinstance(age, Ordered) and age.size == 100 and len(age.bin_starts) == 10
    assert age.bin_labels()[1] == (10, 20) and age.boundary_index(18) == 18
    income = table.column("income").domain
    assert isinstance(income, Ordered) and income.size == 50 and income.boundary_index(55000) is None
    assert income.neighbours(55000) == (50000.0, 60000.0)
    assert table.column("income").measure_bounds == (0.0, 500000.0)
    assert table.column("age").measure_bounds == (0.0, 99.0)
    joined = table.column("joined").domain
    assert isinstance(joined, Ordered) and joined.size == 24  # Jan 2020 .. Dec 2021, month starts
    assert joined.bin_labels()[0] == (dt.date(2020, 1, 1), dt.date(2020, 4, 1))
    assert joined.boundary_index(joined.to_number("2020-03-01")) == 2
    assert joined.boundary_index(joined.to_number(dt.date(2020, 3, 15))) is None
    score = table.column("score").domain
    assert isinstance(score, Ordered) and score.boundaries == (0.0, 1.0, 5.0, 10.0) and score.uniform_step is None
    sex = table.column("sex")
    assert isinstance(sex.domain, Categorical) and sex.other and sex.domain.bin_labels() == ["F", "M"]


def test_day_dates_are_a_grid_of_whole_days() -> None:
    """Declared day by day, a date column's domain is the grid of its days (keyed by its declaration),
    the same cells and bins as the day starts listed one by one."""
    domain = Schema.load({"tables": {"t": {"columns": {"d": {
        "type": "date", "lower": "2020-02-27", "upper": "2020-03-02", "bin_width": 2}}}}}).table("t").column("d").domain
    first = float((dt.date(2020, 2, 27) - dt.date(1970, 1, 1)).days)
    assert isinstance(domain, Ordered) and domain.grid is not None
    assert domain == Ordered(kind="date", boundaries=tuple(first + k for k in range(6)), bin_starts=(0, 2, 4),
                             uniform_step=1.0, unit="day")


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ({"type": "integer", "lower": 5, "upper": 1}, "tables.t.columns.c: upper (1) must be greater than lower (5)"),
        ({"type": "integer", "lower": 0, "upper": 9, "bin_width": 2.5}, "must be positive integers"),
        ({"type": "integer", "lower": 0, "upper": 9, "bin_width": 4, "resolution": 3}, "whole multiple of resolution"),
        ({"type": "categorical", "values": []}, "tables.t.columns.c.values must be a non-empty list"),
        ({"type": "categorical", "values": ["a", "a"]}, "lists a value twice"),
        ({"type": "text"}, 'tables.t.columns.c.type must be one of "categorical"'),
        ({"type": "numeric", "lower": 0, "upper": 1, "colour": 3}, "unknown setting(s) colour"),
        ({"type": "numeric", "edges": [0, 2, 1]}, "strictly increasing"),
        ({"type": "date", "lower": "2020-01-01", "upper": "soon"}, "tables.t.columns.c.upper must be a date"),
        ({"type": "categorical", "values": ["a"], "out_of_domain": "clamp"},
         'out_of_domain must be "drop" or "exclude"'),
        ({"type": "integer", "lower": 0, "upper": 3, "out_of_domain": "skip"}, 'must be "drop", "clamp" or "exclude"'),
        ({"type": "categorical", "values": ["a"], "other": True, "out_of_domain": "exclude"}, "choose one of the two"),
        ({"type": "integer", "lower": 0, "upper": 10**9, "bin_width": 1}, "the limit is"),
    ],
)
def test_validation_names_the_key_and_the_problem(column: dict[str, object], message: str) -> None:
    with pytest.raises(SchemaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Schema.load({"tables": {"t": {"columns": {"c": column}}}})


def test_lookup_errors_name_what_is_declared() -> None:
    schema = Schema.load(TOML)
    with pytest.raises(SchemaError, match=r"Table 'visits' is not in the schema.*Declared tables: people"):
        schema.table("visits")
    with pytest.raises(SchemaError, match=r"Column 'zip' is not in the schema of table 'people' \(line 1, col 8\)"):
        schema.table("people").column("zip", "line 1, col 8")
    with pytest.raises(SchemaError, match="privacy_unit"):
        Schema.load({"tables": {"t": {"privacy_unit": "person",
                                      "columns": {"c": {"type": "categorical", "values": [1]}}}}})
    with pytest.raises(SchemaError, match="not valid TOML"):
        Schema.load("[tables.t\ncolumns = 1")
