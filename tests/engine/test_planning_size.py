"""Bounded work before any charge (issue 29 §2): each statement group's planning size is estimated
before anything is planned and refused above the named limits of ``dpsql.engine.plan.planning_size``
(EXPLAIN too), and running out of memory or recursion depth while planning is a dpsql error —
never numpy's MemoryError or Python's RecursionError — with the budget untouched."""

from __future__ import annotations

import math
from collections.abc import Iterator

import duckdb
import pytest
from test_large_groups import GIB, run_capped

import dpsql
from dpsql.engine.plan import planning_size
from dpsql.errors import NotSupportedError, PlanningLimitError, UnsupportedQueryError
from dpsql.planning import planner
from dpsql.schema import Schema
from dpsql.server.session import public_error
from dpsql.sql import compile as sql_compile

COLUMNS = {c: {"type": "integer", "lower": 0, "upper": 99} for c in "abc"}
MIXED = "SELECT {c}, COUNT(*) FROM t GROUP BY {c}; SELECT COUNT(*) FROM t WHERE {c} BETWEEN 10 AND {high}"


@pytest.fixture()
def connection() -> Iterator[dpsql.Connection]:
    data = duckdb.connect()
    data.execute("CREATE TABLE t AS SELECT i % 100 AS a, i * 7 % 100 AS b, i * 3 % 100 AS c FROM range(1000) r(i)")
    with dpsql.connect(data, schema=Schema.load({"tables": {"t": {"columns": COLUMNS}}}),
                       budget=dpsql.Budget(epsilon=1.0)) as opened:
        yield opened
    data.close()


def test_a_group_by_and_a_range_over_8000_cells_are_planned_apart() -> None:
    """Before: more than 6 GiB, then numpy's MemoryError (an incident behind ``dpsql serve``): one
    statement group over 8,001 cells planned with dense algebra. Now the two statements, which
    together exceed MAX_DENSE_CELLS, are planned apart: the GROUP BY in closed form, the range over
    its own four cells."""
    report = run_capped(MIXED.format(c="d", high=4000), 8_000, memory=2 * GIB)
    assert "error" not in report, report["error"]
    assert "Group 1: statements 1; 8,001 cells" in str(report["explain"])
    assert "Group 2: statements 2; 4 cells" in str(report["explain"])
    assert isinstance(report["rows"], list) and len(report["rows"]) == 8_000  # the first statement's rows
    assert report["spent"] == pytest.approx(0.5)


def test_a_group_by_and_a_total_over_1e5_cells_stay_two_closed_form_groups() -> None:
    """Before: numpy's MemoryError. The merge search never considers a merge beyond the limits."""
    report = run_capped("SELECT d, COUNT(*) AS n FROM t GROUP BY d; SELECT COUNT(*) AS n FROM t", 100_000,
                        execute=False)
    assert "error" not in report, report["error"]
    assert "Statement groups: 2" in str(report["explain"])


def test_each_batch_limit_names_itself_its_value_and_the_statements(connection: dpsql.Connection,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cursor = connection.cursor()
    batch = "; ".join(MIXED.format(c=c, high=50) for c in "abc")  # three groups over 101 cells, each planned densely
    monkeypatch.setattr(planner, "plan", lambda *args, **kwargs: pytest.fail("planned before the limits were checked"))
    monkeypatch.setattr(planning_size, "MAX_DENSE_VECTORS", 2)
    with pytest.raises(UnsupportedQueryError, match=r"the batch needs 3 data vectors planned densely, for statements "
                                                    r"1, 2, 3, 4, 5, 6 \(at line 1, col 1; .*\); the limit is "
                                                    r"MAX_DENSE_VECTORS = 2\. Split the batch"):
        cursor.explain(batch, epsilon=0.5)
    monkeypatch.setattr(planning_size, "MAX_DENSE_VECTORS", 8)
    monkeypatch.setattr(planning_size, "MAX_DENSE_WORK", 2 * 101**3)
    with pytest.raises(UnsupportedQueryError, match=r"the batch needs 3,090,903 units of dense planning work .* the "
                                                    r"limit is MAX_DENSE_WORK = 2,060,602"):
        cursor.execute(batch, epsilon=0.5)
    monkeypatch.setattr(planning_size, "MAX_DENSE_CELLS", 100)
    with pytest.raises(UnsupportedQueryError, match=r"the statement at line 1, col 25 must be planned with dense "
                                                    r"algebra over the 101 cells of b, .* MAX_DENSE_CELLS = 100\..* "
                                                    r"for tables\.t\.columns\.b"):
        cursor.execute("SELECT COUNT(*) FROM t; SELECT MEDIAN(b) FROM t", epsilon=0.5)
    assert connection.budget.spent == 0.0


@pytest.mark.parametrize("error", [MemoryError, RecursionError])
def test_running_out_while_planning_is_a_dpsql_error_before_the_charge(error: type[BaseException],
                                                                       connection: dpsql.Connection,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the MemoryError or RecursionError itself reached the caller (an incident behind the server)."""
    def exhausted(*args: object, **kwargs: object) -> None:
        raise error("forced")

    monkeypatch.setattr(planner, "plan", exhausted)
    cursor = connection.cursor()
    for run in (cursor.explain, cursor.execute):
        with pytest.raises(PlanningLimitError, match="nothing was charged") as raised:
            run(MIXED.format(c="a", high=50), epsilon=0.5)
        assert isinstance(raised.value, NotSupportedError) and raised.value.__cause__ is None
    assert connection.budget.spent == 0.0
    refusal = public_error(raised.value, "analyst")  # the server shows the refusal (0A000), not an incident
    assert refusal.sqlstate == "0A000" and "nothing was charged" in refusal.message


def test_explain_of_a_memory_error_in_its_own_steps_is_a_dpsql_error(connection: dpsql.Connection,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """EXPLAIN's own steps (the SVD lower bound) run after planning: they are guarded too."""
    def exhausted(self: planner.Plan) -> tuple[float | None, bool]:
        raise MemoryError("forced")

    monkeypatch.setattr(planner.Plan, "svd_bound", exhausted)
    with pytest.raises(PlanningLimitError, match="more memory than this process has"):
        connection.cursor().explain(MIXED.format(c="a", high=50), epsilon=0.5)


def _worst_batches() -> list[tuple[int, int]]:
    """(columns, cells per column) of the worst batches the limits admit: one, two and
    MAX_DENSE_VECTORS groups, each over the widest axis the cell and work limits then allow."""
    counts = (1, 2, planning_size.MAX_DENSE_VECTORS)
    return [(k, min(planning_size.MAX_DENSE_CELLS, int((planning_size.MAX_DENSE_WORK / k) ** (1 / 3) + 1e-9)))
            for k in counts]


@pytest.mark.slow
@pytest.mark.parametrize("noise", ["epsilon", "rho"])
def test_explain_of_the_worst_admitted_batches_fits_2_gib(noise: str) -> None:
    """Each column's GROUP BY and a range over it (one densely planned group per column, every
    range different so that no plan is reused), under RLIMIT_AS = 2 GiB and a generous RLIMIT_CPU."""
    for count, cells in _worst_batches():
        names = [f"c{i}" for i in range(count)]
        columns = {name: {"type": "integer", "lower": 0, "upper": cells - 2} for name in names}
        table = "CREATE TABLE t AS SELECT " + ", ".join(f"i * {k + 1} % {cells - 1} AS {name}"
                                                         for k, name in enumerate(names)) + " FROM range(2000) r(i)"
        sql = "; ".join(MIXED.format(c=name, high=cells // 2 + 7 * k) for k, name in enumerate(names))
        report = run_capped(sql, execute=False, memory=2 * GIB, cpu=120, columns=columns,
                            table=table, cost=noise)
        assert "error" not in report, report["error"]
        assert f"Statement groups: {count}" in str(report["explain"])


def test_a_day_resolution_date_column_is_an_ordinary_column() -> None:
    """3,650 days: GROUP BY day, GROUP BY month(day) (each month a set of ten runs of days) and an IN
    list of days share the column but not a dense plan — together they would need one over 3,651
    cells — so each is its own group, planned in closed form."""
    columns = {"day": {"type": "date", "lower": "2015-01-01", "upper": "2024-12-28"}}
    table = "CREATE TABLE t AS SELECT DATE '2015-01-01' + CAST(i * 7 % 3650 AS INTEGER) AS day FROM range(20000) r(i)"
    days = ", ".join(f"DATE '2016-03-{d:02d}'" for d in range(1, 29, 2))
    sql = ("SELECT day, COUNT(*) AS n FROM t GROUP BY day; SELECT month(day) AS m, COUNT(*) AS n FROM t GROUP BY 1; "
           f"SELECT COUNT(*) AS n FROM t WHERE day IN ({days}) AND day > DATE '2016-01-01'")
    report = run_capped(sql, columns=columns, table=table)
    assert "error" not in report, report["error"]
    explain = str(report["explain"])
    assert "Statement groups: 3" in explain and explain.count("(closed form)") == 3
    assert "Group 2: statements 2; 121 cells" in explain  # 120 months (runs of days) and the outside cell
    assert isinstance(report["rows"], list) and len(report["rows"]) == 3650  # the first statement's rows


@pytest.mark.slow
def test_explain_of_a_group_by_over_max_cells_fits_2_gib() -> None:
    """The widest GROUP BY the cell limit admits (2²⁴ cells over two columns) is a partition: its
    plan is a product of per-column closed forms, never a vector over the product domain."""
    side = math.isqrt(sql_compile.MAX_CELLS)
    columns = {c: {"type": "integer", "lower": 0, "upper": side - 2} for c in "ab"}
    table = f"CREATE TABLE t AS SELECT i % {side - 1} AS a, i * 7 % {side - 1} AS b FROM range(20000) r(i)"
    report = run_capped("SELECT a, b, COUNT(*) FROM t GROUP BY a, b", execute=False, columns=columns, table=table)
    assert "error" not in report, report["error"]
    assert f"{sql_compile.MAX_CELLS:,} cells over a({side}), b({side})" in str(report["explain"])
