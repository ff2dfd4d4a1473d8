"""Tests for dpsql.sql.parse: fixture pairs, errors that point into the SQL, spans and parameters.

The fixture files ``tests/fixtures/sql/*.sql`` hold titled cases (sqlglot's model): a line
``-- title: <title>`` and then the batch. The expected results live here, keyed by title: a compact
summary of each statement for ``supported.sql``, and the error class, construct and position for
``unsupported.sql``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql import errors
from dpsql.errors import ProgrammingError, SqlSyntaxError, UnsupportedQueryError
from dpsql.sql import ir
from dpsql.sql.parse import parse_batch

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sql"


def load_cases(name: str) -> dict[str, str]:
    """The titled cases of a fixture file: ``-- title: <title>`` lines, each followed by its batch."""
    cases: dict[str, str] = {}
    title = None
    for line in (FIXTURES / name).read_text().splitlines(keepends=True):
        match = re.fullmatch(r"-- title: (.+)\n?", line)
        if match:
            title = match.group(1).strip()
            assert title not in cases, f"duplicate title {title!r} in {name}"
            cases[title] = ""
        elif title is not None:
            cases[title] += line
    return {title: text.strip() for title, text in cases.items()}


SUPPORTED = load_cases("supported.sql")
UNSUPPORTED = load_cases("unsupported.sql")


# --------------------------------------------------------------------------------------------------
# Compact summaries of the IR


def column(node: ir.Column) -> str:
    return node.name if node.qualifier is None else f"{node.qualifier}.{node.name}"


def predicate(node: ir.Predicate | None) -> object:
    """A nested tuple: ('=', 'age', 5), ('between', ...), ('not in', ...), ('and', p, ...)."""
    if node is None:
        return None
    if isinstance(node, ir.Comparison):
        return (node.operator, column(node.column), node.value.value)
    if isinstance(node, ir.Between):
        return ("not between" if node.negated else "between", column(node.column), node.low.value, node.high.value)
    if isinstance(node, ir.InList):
        return ("not in" if node.negated else "in", column(node.column), tuple(v.value for v in node.values))
    if isinstance(node, ir.Not):
        return ("not", predicate(node.operand))
    return ("and" if isinstance(node, ir.And) else "or", *(predicate(p) for p in node.operands))


def item(node: ir.SelectItem) -> tuple[str, str | None, str]:
    if isinstance(node, ir.GroupColumn):
        return ("group", column(node.column), node.alias)
    return (node.function, None if node.column is None else column(node.column), node.alias)


def summary(statement: ir.Statement) -> dict[str, object]:
    return {
        "table": statement.table,
        "alias": statement.table_alias,
        "select": tuple(item(node) for node in statement.select),
        "where": predicate(statement.where),
        "group": tuple(column(node) for node in statement.group_by),
        "order": tuple((node.key, node.descending) for node in statement.order_by),
        "limit": statement.limit,
    }


def stmt(table: str, select: tuple[tuple[str, str | None, str], ...], *, where: object = None,
         group: tuple[str, ...] = (), order: tuple[tuple[str | int, bool], ...] = (), limit: int | None = None,
         alias: str | None = None) -> dict[str, object]:
    """The expected summary of one statement."""
    return {"table": table, "alias": alias, "select": select, "where": where, "group": group, "order": order,
            "limit": limit}


COUNT = ("count", None, "count")
D = dt.date

EXPECTED: dict[str, tuple[dict[str, object], ...]] = {
    "count star": (stmt("people", (COUNT,)),),
    "count of a column": (stmt("people", (("count", "age", "count_age"),)),),
    "sum and avg": (stmt("people", (("sum", "income", "sum_income"), ("avg", "income", "avg_income"))),),
    "group by one column": (stmt("people", (("group", "sex", "sex"), COUNT), group=("sex",)),),
    "grouped column not selected": (stmt("people", (("group", "sex", "sex"), COUNT), group=("sex", "region")),),
    "output aliases with and without AS": (
        stmt("people", (("group", "sex", "gender"), ("count", None, "n"), ("sum", "income", "total")),
             group=("sex",)),),
    "default aliases deduplicated": (
        stmt("people", (COUNT, ("count", None, "count_2"), ("sum", "age", "sum_age"), ("sum", "age", "sum_age_2"),
                        ("sum", "age", "sum_age_3"), ("count", "age", "count_age"))),),
    "explicit alias taking a default name": (
        stmt("people", (COUNT, ("count", None, "count_2"), ("avg", "age", "Count_3"))),),
    "table alias and qualified columns": (
        stmt("people", (("group", "p.sex", "sex"), ("count", "p.age", "count_age")), where=(">", "p.age", 18),
             group=("p.sex",), alias="p"),),
    "columns qualified by the table name under an alias": (
        stmt("people", (("group", "people.sex", "sex"), COUNT), where=("=", "p.age", 3), group=("people.sex",),
             alias="p"),),
    "quoted identifiers and case-insensitive grouping": (
        stmt("People", (("group", "Sex", "Sex"), ("group", "SEX", "s2"), ("sum", "Income", "sum_Income")),
             group=("sex",)),),
    "lower-case keywords": (stmt("people", (COUNT,), where=("between", "age", 1, 2)),),
    "every comparison operator": (
        stmt("people", (COUNT,), where=("and", ("=", "a", 1), ("<>", "b", 2), ("<>", "c", 3), ("<", "d", 4),
                                        ("<=", "e", 5), (">", "f", 6), (">=", "g", 7))),),
    "reversed comparisons": (
        stmt("people", (COUNT,), where=("and", (">", "age", 5), ("<=", "height", 10), ("=", "sex", "f"),
                                        ("<>", "x", 1), (">=", "y", 2))),),
    "between and not between": (
        stmt("people", (COUNT,), where=("and", ("between", "age", 18, 65), ("not between", "income", 0, 100))),),
    "in and not in": (
        stmt("people", (COUNT,), where=("and", ("in", "sex", ("f", "m")), ("not in", "age", (1, 2, 3)),
                                        ("not in", "region", ("x",)))),),
    "not and parentheses": (
        stmt("people", (COUNT,), where=("and", ("not", (">", "age", 5)),
                                        ("not", ("or", ("=", "sex", "f"), ("=", "sex", "m"))))),),
    "and and or flattened through parentheses": (
        stmt("people", (COUNT,), where=("or", ("and", ("=", "a", 1), ("=", "b", 2), ("=", "c", 3), ("=", "d", 4)),
                                        ("=", "e", 5), ("=", "f", 6), ("=", "g", 7))),),
    "or inside and": (stmt("people", (COUNT,), where=("and", ("or", ("=", "a", 1), ("=", "b", 2)), ("=", "c", 3))),),
    "decimals and negative numbers": (
        stmt("people", (COUNT,), where=("and", (">", "x", -5), ("<", "y", 2.5), ("=", "z", -0.25),
                                        ("between", "w", -10, -1), ("in", "v", (-3, 1000.0)))),),
    "strings with quotes and a date-like string": (
        stmt("people", (COUNT,), where=("and", ("in", "name", ("O'Brien", "x y")), ("=", "day", "2020-01-01"))),),
    "dates": (
        stmt("visits", (COUNT,), where=("and", (">=", "day", D(2020, 1, 1)), ("<", "day", D(2021, 6, 30)),
                                        ("<>", "day", D(2020, 2, 2)))),),
    "order by names, positions and expressions": (
        stmt("people", (("group", "sex", "gender"), ("group", "region", "region"), ("count", None, "n"),
                        ("sum", "age", "sum_age")),
             group=("sex", "region"),
             order=(("n", True), (1, False), ("gender", False), ("sum_age", True), ("region", False))),),
    "order by the standard deviation of an aggregate": (
        stmt("people", (("group", "sex", "sex"), ("count", None, "n")), group=("sex",),
             order=(("n_stddev", True), ("sex", False))),),
    "limit": (stmt("people", (("group", "sex", "sex"), COUNT), group=("sex",), order=((2, True),), limit=10),),
    "comments everywhere": (
        stmt("people", (("group", "sex", "sex"), COUNT), where=(">", "age", 1), group=("sex",)),),
    "several statements with blank statements": (
        stmt("people", (COUNT,)),
        stmt("people", (("sum", "age", "sum_age"),), where=("=", "sex", "f")),
        stmt("visits", (("avg", "age", "avg_age"),)),
    ),
    "parameters across statements": (
        stmt("people", (COUNT,), where=("and", (">=", "age", 18), ("=", "sex", "f"))),
        stmt("people", (("sum", "income", "sum_income"),),
             where=("and", ("<", "day", D(2020, 1, 1)), ("between", "income", 0, 1e6)), limit=5),
    ),
    "duplicate group by columns kept once": (stmt("people", (("group", "sex", "sex"), COUNT), group=("sex",)),),
    "multi-line statement": (
        stmt("people", (("group", "region", "region"), ("avg", "income", "mean_income")), where=(">", "age", 17),
             group=("region",), order=(("mean_income", True),), limit=3),),
}

PARAMETERS: dict[str, list[object]] = {
    "parameters across statements": [18, "f", D(2020, 1, 1), 0, 1e6, 5],
}


def test_every_fixture_case_has_an_expectation() -> None:
    assert len(SUPPORTED) >= 25
    assert set(SUPPORTED) == set(EXPECTED)
    assert set(UNSUPPORTED) == set(UNSUPPORTED_EXPECTED)


@pytest.mark.parametrize("title", sorted(SUPPORTED))
def test_supported_fixture(title: str) -> None:
    batch = parse_batch(SUPPORTED[title], PARAMETERS.get(title))
    assert tuple(summary(statement) for statement in batch.statements) == EXPECTED[title]
    assert batch.text == SUPPORTED[title]


# --------------------------------------------------------------------------------------------------
# Spans of every node in every supported case


def nodes(statement: ir.Statement) -> Iterator[object]:
    """Every IR node of a statement (depth first), the statement included."""
    stack: list[object] = [statement]
    while stack:
        node = stack.pop()
        yield node
        for name in getattr(node, "__slots__", ()):
            value = getattr(node, name)
            children = value if isinstance(value, tuple) else (value,)
            stack.extend(child for child in children if hasattr(child, "span") and not isinstance(child, ir.Span))


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset``, computed independently of the parser."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


@pytest.mark.parametrize("title", sorted(SUPPORTED))
def test_spans_lie_in_their_statement_and_agree_with_line_and_column(title: str) -> None:
    batch = parse_batch(SUPPORTED[title], PARAMETERS.get(title))
    for statement in batch.statements:
        assert statement.text == batch.text[statement.span.start:statement.span.end]
        assert statement.text == statement.text.strip() and not statement.text.endswith(";")
        for node in nodes(statement):
            span: ir.Span = node.span  # type: ignore[attr-defined]
            assert statement.span.start <= span.start < span.end <= statement.span.end, (node, span)
            assert (span.line, span.column) == position(batch.text, span.start)
            if isinstance(node, ir.Column):
                assert batch.text[span.start:span.end].replace('"', "").lower() == column(node).lower()


def test_spans_of_each_kind_of_node() -> None:
    text = ("SELECT p.sex AS s, COUNT(*) AS n FROM people p\n"
            "WHERE NOT (age BETWEEN 1 AND 5) AND (sex IN ('f') OR day < DATE '2020-01-01') AND x > -2\n"
            "GROUP BY p.sex ORDER BY n DESC LIMIT 3")
    statement = parse_batch(text).statements[0]

    def source(node: object) -> str:
        span: ir.Span = node.span  # type: ignore[attr-defined]
        return text[span.start:span.end]

    assert [source(node) for node in statement.select] == ["p.sex AS s", "COUNT(*) AS n"]
    where = statement.where
    assert isinstance(where, ir.And)
    assert source(where) == ("NOT (age BETWEEN 1 AND 5) AND (sex IN ('f') OR day < DATE '2020-01-01') "
                             "AND x > -2")
    not_between, either, comparison = where.operands
    assert isinstance(not_between, ir.Not) and isinstance(either, ir.Or) and isinstance(comparison, ir.Comparison)
    assert source(not_between) == "NOT (age BETWEEN 1 AND 5)"
    assert source(not_between.operand) == "age BETWEEN 1 AND 5"
    assert source(either) == "sex IN ('f') OR day < DATE '2020-01-01'"
    assert [source(node) for node in either.operands] == ["sex IN ('f')", "day < DATE '2020-01-01'"]
    date = either.operands[1]
    assert isinstance(date, ir.Comparison) and source(date.value) == "DATE '2020-01-01'"
    assert source(comparison.value) == "-2" and comparison.value.value == -2
    assert [source(node) for node in statement.order_by] == ["n DESC"]
    assert source(statement.group_by[0]) == "p.sex" and statement.group_by[0].span.line == 3


# --------------------------------------------------------------------------------------------------
# Unsupported constructs: class, construct named in the message, line and column

NOT_SUPPORTED = UnsupportedQueryError
UNSUPPORTED_EXPECTED: dict[str, tuple[type[Exception], str, int, int]] = {
    "join": (NOT_SUPPORTED, "CROSS JOIN", 3, 15),
    "full outer join": (NOT_SUPPORTED, "FULL JOIN", 3, 15),
    "two tables in from": (NOT_SUPPORTED, "multiple tables in FROM", 3, 14),
    "subquery in from": (NOT_SUPPORTED, "subquery", 3, 6),
    "subquery in where": (NOT_SUPPORTED, "subquery", 3, 14),
    "subquery in select": (NOT_SUPPORTED, "subquery", 3, 8),
    "exists": (NOT_SUPPORTED, "EXISTS", 3, 7),
    "cte": (NOT_SUPPORTED, "WITH", 2, 1),
    "union": (NOT_SUPPORTED, "UNION", 3, 1),
    "intersect": (NOT_SUPPORTED, "INTERSECT", 1, 29),
    "except": (NOT_SUPPORTED, "EXCEPT", 1, 29),
    "window function": (NOT_SUPPORTED, "window function", 3, 3),
    "select distinct": (NOT_SUPPORTED, "DISTINCT", 3, 1),
    "sum distinct": (NOT_SUPPORTED, "DISTINCT", 3, 12),
    "like in having": (NOT_SUPPORTED, "LIKE in HAVING", 3, 8),
    "arithmetic in an aggregate": (NOT_SUPPORTED, "arithmetic", 3, 12),
    "function in where": (NOT_SUPPORTED, "LOWER", 3, 7),
    "arithmetic in group by": (NOT_SUPPORTED, "arithmetic", 3, 10),
    "function in select": (NOT_SUPPORTED, "UPPER", 3, 3),
    "column compared with a column": (NOT_SUPPORTED, "column-to-column comparison", 3, 7),
    "arithmetic in a predicate": (NOT_SUPPORTED, "arithmetic", 3, 7),
    "like on a function": (NOT_SUPPORTED, "UPPER", 3, 7),
    "is true": (NOT_SUPPORTED, "IS boolean literal", 3, 19),
    "case": (NOT_SUPPORTED, "CASE", 3, 7),
    "select star": (NOT_SUPPORTED, "SELECT *", 3, 3),
    "ungrouped column": (NOT_SUPPORTED, "'name'", 3, 3),
    "modulo in select": (NOT_SUPPORTED, "arithmetic", 3, 3),
    "min": (NOT_SUPPORTED, "arithmetic in MIN()", 3, 7),
    "max": (NOT_SUPPORTED, "MAX with more than one argument", 3, 3),
    "kurtosis": (NOT_SUPPORTED, "KURTOSIS", 3, 3),
    "no aggregate": (NOT_SUPPORTED, "without COUNT, SUM or AVG", 2, 1),
    "no aggregate on line 3": (NOT_SUPPORTED, "without COUNT, SUM or AVG", 3, 1),
    "create": (NOT_SUPPORTED, "CREATE", 3, 1),
    "insert": (NOT_SUPPORTED, "INSERT", 3, 1),
    "update": (NOT_SUPPORTED, "UPDATE", 3, 1),
    "delete": (NOT_SUPPORTED, "DELETE", 3, 1),
    "drop": (NOT_SUPPORTED, "DROP", 3, 1),
    "attach": (NOT_SUPPORTED, "ATTACH", 3, 1),
    "copy": (NOT_SUPPORTED, "COPY", 3, 1),
    "pragma": (NOT_SUPPORTED, "PRAGMA", 3, 1),
    "set": (NOT_SUPPORTED, "SET", 3, 1),
    "select without from": (NOT_SUPPORTED, "without FROM", 3, 1),
    "boolean literal": (NOT_SUPPORTED, "boolean", 3, 16),
    "table function": (NOT_SUPPORTED, "table function", 3, 6),
    "file in from": (NOT_SUPPORTED, "file", 3, 6),
    "offset": (NOT_SUPPORTED, "OFFSET -2", 3, 16),
    "negative limit": (NOT_SUPPORTED, "LIMIT -1", 3, 7),
    "order by unselected group column": (NOT_SUPPORTED, "ORDER BY", 3, 10),
    "numbered parameter": (NOT_SUPPORTED, "parameter", 3, 13),
    "timestamp literal": (NOT_SUPPORTED, "TIMESTAMP", 3, 13),
    "column in an in list": (NOT_SUPPORTED, "column in an IN list", 3, 18),
}


@pytest.mark.parametrize("title", sorted(UNSUPPORTED))
def test_unsupported_fixture(title: str) -> None:
    kind, construct, line, col = UNSUPPORTED_EXPECTED[title]
    with pytest.raises(kind) as caught:
        parse_batch(UNSUPPORTED[title])
    message = str(caught.value)
    assert construct in message
    assert f"(line {line}, col {col}: \"" in message
    if kind is UnsupportedQueryError:
        assert f"{construct}" in message.split(" is not supported")[0]
        assert re.search(r'\): "[^"]{1,60}"\)\. \S', message.replace(f"line {line}, col {col}", ")"))


def test_message_format_matches_the_brief() -> None:
    with pytest.raises(UnsupportedQueryError) as caught:
        parse_batch("SELECT COUNT(*) FROM people p JOIN visits v ON v.person = p.id AND v.day > 3")
    assert str(caught.value) == (
        'a JOIN condition other than key = key is not supported (line 1, col 48: "v.person = p.id AND v.day > 3"). '
        "With any other condition one person's rows could be matched to any number of rows, so no contribution bound "
        "(and no sensitivity) holds. dpsql joins a table to its privacy unit's table on the declared key: FROM "
        'visits v [LEFT] JOIN people p USING (person_id) (or ON v.person_id = p.person_id), declared by '
        'tables.visits.privacy_unit.table = "people".')



def test_long_fragments_are_cut_to_sixty_characters() -> None:
    where = " AND ".join(f"column_{i} = {i}" for i in range(20))
    with pytest.raises(UnsupportedQueryError) as caught:
        parse_batch(f"SELECT COUNT(*) FROM people JOIN visits ON {where}")
    fragment = re.search(r'col \d+: "([^"]*)"', str(caught.value))
    assert fragment is not None and len(fragment.group(1)) <= 60 and fragment.group(1).endswith("...")


def test_error_classes_are_pep_249_and_dpsql_errors() -> None:
    assert issubclass(UnsupportedQueryError, errors.NotSupportedError)
    assert issubclass(SqlSyntaxError, errors.ProgrammingError)
    for error in (UnsupportedQueryError, SqlSyntaxError):
        assert issubclass(error, errors.DpsqlError) and issubclass(error, errors.DatabaseError)


# --------------------------------------------------------------------------------------------------
# Syntax errors and statements that are not valid for their own table and outputs

SYNTAX_ERRORS = [
    # (batch, a phrase of the message, line, col)
    ("SELECT COUNT(*) FROM people;\nSELECT COUNT(*)\nFROM people WHERE name = 'abc", "Missing '", 3, 26),
    ("SELECT COUNT(*) FROM people /* never closed", "comment", 1, 29),
    ("SELECT COUNT(*) FROM people;\n\nSELECT COUNT(*\nFROM people", "Expecting )", 4, 1),
    ("SELECT COUNT(*) FROM people WHERE", "WHERE", 1, 29),
    ("SELECT COUNT(*) FROM people;\nSELECT COUNT(*) FROM people\nWHERE x.age > 5", "qualifier 'x'", 3, 7),
    ("SELECT COUNT(*) FROM people p WHERE people2.age > 5", "nor its alias 'p'", 1, 37),
    ("SELECT COUNT(*) FROM people\nORDER BY 2", "position 2 is out of range", 2, 10),
    ("SELECT COUNT(*) FROM people\nORDER BY 0", "position 0 is out of range", 2, 10),
    ("SELECT COUNT(*) FROM people\nORDER BY total", "'total' names no output column", 2, 10),
    ("SELECT COUNT(*) FROM visits\nWHERE day = DATE '2020-02-30'", "is not a date", 2, 13),
]


@pytest.mark.parametrize(("text", "phrase", "line", "col"), SYNTAX_ERRORS)
def test_syntax_errors_point_into_the_batch(text: str, phrase: str, line: int, col: int) -> None:
    with pytest.raises(SqlSyntaxError) as caught:
        parse_batch(text)
    assert phrase in str(caught.value)
    assert f"(line {line}, col {col}: " in str(caught.value)


@pytest.mark.parametrize("text", ["", "   ", ";;", "-- only a comment\n; /* and another */"])
def test_a_batch_without_statements_is_an_error(text: str) -> None:
    with pytest.raises(SqlSyntaxError, match="no SQL statement"):
        parse_batch(text)


def test_text_must_be_a_string() -> None:
    with pytest.raises(ProgrammingError, match="must be a str"):
        parse_batch(b"SELECT COUNT(*) FROM people")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Parameters


def test_parameters_are_bound_in_text_order_as_literals() -> None:
    text = "SELECT COUNT(*) FROM people WHERE age BETWEEN ? AND ? AND sex IN (?, ?);\n" \
           "SELECT SUM(x) FROM people WHERE day >= ? AND y < ? LIMIT ?"
    values: list[object] = [18, 65.5, "f", "o'brien", D(2021, 3, 4), -2, 7]
    batch = parse_batch(text, values)
    first, second = batch.statements
    assert predicate(first.where) == ("and", ("between", "age", 18, 65.5), ("in", "sex", ("f", "o'brien")))
    assert predicate(second.where) == ("and", (">=", "day", D(2021, 3, 4)), ("<", "y", -2))
    assert second.limit == 7
    literals = [first.where.operands[0].low, first.where.operands[0].high]  # type: ignore[union-attr]
    assert all(text[node.span.start:node.span.end] == "?" for node in literals)
    assert "?" in first.text and "18" not in first.text  # parameters never enter the text


def test_a_string_parameter_can_be_cast_to_a_date() -> None:
    batch = parse_batch("SELECT COUNT(*) FROM visits WHERE day < CAST(? AS DATE)", ["2020-05-06"])
    assert predicate(batch.statements[0].where) == ("<", "day", D(2020, 5, 6))


def test_wrong_number_of_parameters() -> None:
    text = "SELECT COUNT(*) FROM people WHERE a = ? AND b = ? AND c = ?"
    with pytest.raises(ProgrammingError, match=re.escape("the batch has 3 ? placeholders but 2 parameters were given")):
        parse_batch(text, [1, 2])
    with pytest.raises(ProgrammingError, match=r"has 3 . placeholders but 0 parameters"):
        parse_batch(text)
    with pytest.raises(ProgrammingError, match=r"has 0 . placeholders but 1 parameter was given"):
        parse_batch("SELECT COUNT(*) FROM people", [1])


@pytest.mark.parametrize(("value", "type_name"), [
    ([1], "list"), (None, "NoneType"), (True, "bool"), (Decimal("1.5"), "Decimal"),
    (dt.datetime(2020, 1, 1, 12), "datetime"), (b"f", "bytes"), (object(), "object"),
])
def test_parameter_of_an_unsupported_type(value: object, type_name: str) -> None:
    with pytest.raises(ProgrammingError, match=rf"parameters\[1\] has type {type_name}\b"):
        parse_batch("SELECT COUNT(*) FROM people WHERE a = ? AND b = ?", [1, value])


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_parameter_that_is_not_finite(value: float) -> None:
    with pytest.raises(ProgrammingError, match=r"parameters\[0\] .* finite"):
        parse_batch("SELECT COUNT(*) FROM people WHERE a = ?", [value])


@pytest.mark.parametrize("parameters", ["ab", {"a": 1}, 5])
def test_parameters_must_be_a_sequence(parameters: object) -> None:
    with pytest.raises(ProgrammingError, match="must be a sequence"):
        parse_batch("SELECT COUNT(*) FROM people WHERE a = ?", parameters)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Property: in random batches, every Column span slices the text to exactly the column's source

NAMES = st.sampled_from(["age", "sex", "region", "income", "Day", "x1"])
BLANKS = st.sampled_from([" ", "  ", "\n", "\n\t", " /* c */ ", " -- c\n", "\r\n", "/*a\nb*/"])


@st.composite
def column_texts(draw: st.DrawFn, qualifiers: tuple[str, ...]) -> str:
    """A column reference as written: name, "quoted" name, or qualifier.name."""
    name = draw(NAMES)
    form = draw(st.sampled_from(["bare", "quoted", "qualified"]))
    if form == "quoted":
        return f'"{name}"'
    return f"{draw(st.sampled_from(qualifiers))}.{name}" if form == "qualified" else name


@st.composite
def statements(draw: st.DrawFn) -> tuple[str, list[str]]:
    """One simple statement (tokens joined by random blanks and comments) and its column texts in order."""
    alias = draw(st.sampled_from([None, "p", "T"]))
    qualifiers = ("people",) if alias is None else ("people", alias)
    group = draw(st.lists(column_texts(qualifiers), max_size=2,
                          unique_by=lambda text: text.split(".")[-1].strip('"').lower()))
    measured = draw(st.lists(column_texts(qualifiers), min_size=1, max_size=3))
    compared = draw(st.lists(column_texts(qualifiers), max_size=3))
    functions = draw(st.lists(st.sampled_from(["SUM", "AVG", "COUNT"]), min_size=len(measured),
                              max_size=len(measured)))
    parts = ["SELECT", *[p for text in group for p in (text, ",")]]
    parts += [p for index, (f, text) in enumerate(zip(functions, measured))
              for p in ((",",) if index else ()) + (f"{f}(", text, ")")]
    parts += ["FROM", "people", *(() if alias is None else ("AS", alias))]
    for index, text in enumerate(compared):
        parts += ["WHERE" if index == 0 else draw(st.sampled_from(["AND", "OR"])), text,
                  draw(st.sampled_from(["=", "<>", "<", ">="])), str(draw(st.integers(-9, 99)))]
    if group:
        parts += ["GROUP BY", *[p for index, text in enumerate(group) for p in ((",",) if index else ()) + (text,)]]
    blanks = draw(st.lists(BLANKS, min_size=len(parts), max_size=len(parts)))
    sql = "".join(part + blank for part, blank in zip(parts, blanks))
    return sql, group + measured + compared + group


@given(st.lists(statements(), min_size=1, max_size=4), st.lists(BLANKS | st.just(";"), min_size=5, max_size=5))
@pytest.mark.slow
def test_column_spans_slice_the_text_to_the_column(batch: list[tuple[str, list[str]]], seps: list[str]) -> None:
    text = seps[0] + "".join(f"{sql};{sep}" for (sql, _), sep in zip(batch, seps[1:] + seps))
    parsed = parse_batch(text)
    assert len(parsed.statements) == len(batch)
    for statement, (_, expected) in zip(parsed.statements, batch):
        columns = [node.column for node in statement.select if isinstance(node, ir.GroupColumn)]
        columns += [node.column for node in statement.select if isinstance(node, ir.Aggregate) and node.column]
        columns += [node.column for node in nodes(statement) if isinstance(node, ir.Comparison)]
        columns += list(statement.group_by)
        texts = [text[node.span.start:node.span.end] for node in columns]
        assert sorted(texts) == sorted(expected)
        for node in columns:
            assert (node.span.line, node.span.column) == position(text, node.span.start)


def test_a_batch_parsed_before_is_returned_from_memory() -> None:
    text = "SELECT COUNT(*) FROM t WHERE x < ?; SELECT g, COUNT(*) FROM t GROUP BY g"
    first = parse_batch(text, [3])
    assert parse_batch(text, [3]) is first
    assert parse_batch(text, [4]) is not first and parse_batch(text, [4]) == parse_batch(text, [4])
    assert parse_batch(text, [3.0]) is not first  # another type is another parameter
    with pytest.raises(ProgrammingError):
        parse_batch(text, [[3]])  # unhashable: parsed (and refused) without the memory
