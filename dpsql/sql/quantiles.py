"""Order statistics: MEDIAN, PERCENTILE_CONT/DISC, QUANTILE_CONT/DISC, MIN and MAX of an ordered column.

Parsing turns each into an :class:`~dpsql.sql.ir.Aggregate` of function ``quantile`` with its
:class:`~dpsql.sql.ir.QuantileSpec`. Compiling makes x an axis of the statement's group with every
base cell kept apart (runs of consecutive base cells beyond MAX_QUANTILE_CELLS), and the
aggregate's block the *prefix-count* workload over x's inside cells,
per group and under the WHERE clause: row (g, k) counts the rows of group g with x in base cells
0..k, so the last row of each group is N, its rows with x inside the domain (NULLs and values
outside the domain sit in x's outside cell and are not counted, as in SQL's MEDIAN that ignores
NULLs; declare ``out_of_domain = "clamp"`` to count values beyond the bounds at the edges). These
are linear queries over the batch's cell counts, the vector every COUNT(*) reads: it is measured
once with the batch's strategy A (ε-DP with Laplace noise scaled to k·‖A‖₁, or ρ-zCDP with Gaussian
noise scaled to k·‖A‖₂, k = one privacy unit's rows, since one row moves one cell count by one), and
the prefix counts are read from that release, so the planner's strategies for range queries
(hierarchical, wavelet, HDMM) choose how to measure. The quantile and its confidence interval are
then post-processing of the released prefix counts (:mod:`dpsql.answers.quantiles`): no extra cost.

The block's ``total`` workload repeats each group's last row K times, so the engine can compute
Cov(P̂_k, N̂) row by row for the confidence interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from dpsql import schema as sch
from dpsql.answers.quantiles import MIN_TOTAL_STDDEVS, PrefixCounts, cell_boundaries, estimate_quantile
from dpsql.errors import InvalidQueryError, SchemaError, UnsupportedQueryError
from dpsql.matrix.workloads import DisjointSum, Explicit, Kron, Workload
from dpsql.planning.mechanism import Answers
from dpsql.sql import ir
from dpsql.sql.predicates import parse_column, parse_value
from dpsql.sql.source import Scope, is_empty, located, node_span, unsupported

__all__ = ["QuantilePlan", "answer_arrays", "describe", "output_names", "parse_quantile", "prefix_block",
           "quantile_columns"]

QUANTILE_SUPPORTED = ("Order statistics are MEDIAN(col), PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY col), "
                      "PERCENTILE_DISC(p) WITHIN GROUP (ORDER BY col), QUANTILE_CONT(col, p), QUANTILE_DISC(col, p), "
                      "MIN(col) and MAX(col), over one ordered column, with one constant fraction p in [0, 1].")

#: An order statistic reads at most this many cells of its column: a domain of more base cells is
#: read in runs of consecutive base cells (the bias bound, the widest run, says so). Planning a
#: dense prefix workload grows fast with its size (HDMM over 512 cells takes seconds, over 2,000 tens of seconds).
MAX_QUANTILE_CELLS = 512

#: Output columns an order statistic adds beside ``<alias>``.
SUFFIXES = ("_stddev", "_low", "_high")


# ==================================================================================== parsing
def parse_quantile(node: exp.Expr, alias: str | None, span: ir.Span, scope: Scope) -> ir.Aggregate | None:
    """The order statistic ``node`` is (None when it is none)."""
    if isinstance(node, exp.WithinGroup) and isinstance(node.this, (exp.PercentileCont, exp.PercentileDisc)):
        return _within_group(node, alias, span, scope)
    if isinstance(node, exp.Median):
        return _aggregate("median", node.this, ir.QuantileSpec(fraction=0.5, kind="cont"), node, alias, span, scope)
    if isinstance(node, (exp.Min, exp.Max)):
        extreme: ir.QuantileKind = "min" if isinstance(node, exp.Min) else "max"
        if any(key != "this" and not is_empty(value) for key, value in node.args.items()):
            raise unsupported(f"{extreme.upper()} with more than one argument", node, scope, QUANTILE_SUPPORTED)
        spec = ir.QuantileSpec(fraction=0.0 if extreme == "min" else 1.0, kind=extreme)
        return _aggregate(extreme, node.this, spec, node, alias, span, scope)
    if isinstance(node, (exp.PercentileCont, exp.PercentileDisc)):  # QUANTILE_CONT(col, p) / QUANTILE_DISC(col, p)
        kind: ir.QuantileKind = "cont" if isinstance(node, exp.PercentileCont) else "disc"
        fraction = _fraction(node.expression, f"QUANTILE_{kind.upper()}", node, scope)
        return _aggregate(f"quantile_{kind}", node.this, ir.QuantileSpec(fraction=fraction, kind=kind), node, alias,
                          span, scope)
    if isinstance(node, exp.Quantile):  # DuckDB's QUANTILE(col, p) is QUANTILE_DISC
        fraction = _fraction(node.args.get("quantile"), "QUANTILE", node, scope)
        return _aggregate("quantile", node.this, ir.QuantileSpec(fraction=fraction, kind="disc"), node, alias, span,
                          scope)
    return None


def _within_group(node: exp.WithinGroup, alias: str | None, span: ir.Span, scope: Scope) -> ir.Aggregate:
    """PERCENTILE_CONT|DISC(p) WITHIN GROUP (ORDER BY col [ASC|DESC]): DESC asks for the 1 − p quantile."""
    function = node.this
    kind: ir.QuantileKind = "cont" if isinstance(function, exp.PercentileCont) else "disc"
    fraction = _fraction(function.this, f"PERCENTILE_{kind.upper()}", function, scope)
    order = node.expression
    keys = order.expressions if isinstance(order, exp.Order) else []
    if len(keys) != 1 or not isinstance(keys[0], exp.Ordered):
        raise unsupported(f"PERCENTILE_{kind.upper()} ordered by {len(keys)} keys", node, scope, QUANTILE_SUPPORTED)
    key = keys[0]
    if key.args.get("desc"):
        fraction = 1.0 - fraction
    return _aggregate(f"percentile_{kind}", key.this, ir.QuantileSpec(fraction=fraction, kind=kind), node, alias, span,
                      scope)


def _aggregate(name: str, argument: exp.Expr | None, spec: ir.QuantileSpec, node: exp.Expr, alias: str | None,
               span: ir.Span, scope: Scope) -> ir.Aggregate:
    if argument is None:
        raise unsupported(f"{name.upper()}() without a column", node, scope, QUANTILE_SUPPORTED)
    column = parse_column(argument, scope, f"in {name.upper()}()", QUANTILE_SUPPORTED)
    return ir.Aggregate(function="quantile", column=column, alias=alias or f"{name}_{column.name}", span=span,
                        quantile=spec)


def _fraction(node: exp.Expr | None, name: str, where: exp.Expr, scope: Scope) -> float:
    """The fraction p of function ``name``: a constant (or bound ``?``) in [0, 1]."""
    if node is None:
        raise unsupported(f"{name} without a fraction", where, scope, QUANTILE_SUPPORTED)
    if isinstance(node, exp.Array):
        raise unsupported("a list of fractions", node, scope,
                          "Write one QUANTILE_CONT(col, p) per fraction; they share one measurement.")
    value = parse_value(node, scope, "a percentile fraction").value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise InvalidQueryError(located(f"the fraction {value!r} of {name} is outside [0, 1]",
                                        node_span(node, scope), scope.source,
                                        "Use a fraction p with 0 <= p <= 1 (the median is 0.5)."))
    return float(value)


# ==================================================================================== compiling
def quantile_columns(statement: ir.Statement) -> list[ir.Column]:
    """The columns the statement's order statistics read (each becomes an axis of base cells)."""
    return [a.column for a in statement.aggregates if a.function == "quantile" and a.column is not None]


def output_names(aggregate: ir.Aggregate) -> list[str]:
    """The generated output names beside an order statistic's alias (``_stddev`` is added for every aggregate)."""
    return [f"{aggregate.alias}{suffix}" for suffix in SUFFIXES[1:]] if aggregate.function == "quantile" else []


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantilePlan:
    """What the answers need to turn one statement's prefix block into its order statistic (all public).

    ``cells``: K, x's inside cells; ``stride``: the product of the GROUP BY sizes of the grouped axes
    after x (block row of (group row b, prefix k) = (b // stride · K + k) · stride + b % stride);
    ``boundaries``: c_0..c_K in x's numeric units (dates: day numbers); ``clamp``: the domain's value
    range; ``representatives``: each cell's middle value (PERCENTILE_DISC); ``width``: the widest
    cell, the bound on the estimate's bias; ``kind``: the column's type, for the output.
    """

    spec: ir.QuantileSpec
    cells: int
    stride: int
    boundaries: npt.NDArray[np.float64]
    clamp: tuple[float, float]
    representatives: npt.NDArray[np.float64]
    width: float
    kind: str

    def block_rows(self, group_row: int) -> npt.NDArray[np.int64]:
        """The block rows P_0..P_{K−1} of the output group whose one-row block row is ``group_row``."""
        high, low = divmod(group_row, self.stride)
        return np.asarray((high * self.cells + np.arange(self.cells)) * self.stride + low, dtype=np.int64)


def cell_signature(size: int) -> npt.NDArray[np.int64]:
    """Which run of base cells each of a column's ``size`` base cells is read in: every base cell
    apart up to MAX_QUANTILE_CELLS, else that many runs of ⌊size/M⌋ or ⌈size/M⌉ consecutive cells.

    >>> cell_signature(3).tolist(), int(cell_signature(10_000).max()) + 1
    ([0, 1, 2], 512)
    """
    base = np.arange(size, dtype=np.int64)
    return base if size <= MAX_QUANTILE_CELLS else base * MAX_QUANTILE_CELLS // size


def check_column(aggregate: ir.Aggregate, column: sch.Column, grouped: bool) -> sch.Ordered:
    """x must be an ordered column (declared bounds) that the statement does not group by."""
    if not isinstance(column.domain, sch.Ordered):
        raise SchemaError(f"{aggregate.alias}: an order statistic needs an ordered (integer, numeric or date) column; "
                          f"{column.key} is categorical ({aggregate.span.describe()}). Use COUNT(*) ... GROUP BY "
                          f"{column.name} for its distribution.")
    if grouped:
        raise UnsupportedQueryError(f"an order statistic of '{column.name}' in a statement grouped by "
                                    f"{column.name} ({aggregate.span.describe()}) is not supported: each group "
                                    "holds one bin of it. Group by another column, or drop the aggregate.")
    return column.domain


def plan_quantile(spec: ir.QuantileSpec, domain: sch.Ordered, cell_of_base: npt.NDArray[np.int64],
                  stride: int) -> QuantilePlan:
    """The public figures of one order statistic over ``domain``, read in the axis's cells
    (``cell_of_base``: each base cell's batch cell, outside last; see :class:`QuantilePlan`)."""
    base_low, base_high = domain.value_bounds()
    inside = np.asarray(cell_of_base[:-1])
    cells = int(inside.max()) + 1
    first = np.array([np.flatnonzero(inside == k)[0] for k in range(cells)])
    last = np.array([np.flatnonzero(inside == k)[-1] for k in range(cells)])
    low, high = base_low[first], base_high[last]
    boundaries = cell_boundaries(low, high, domain.discrete)
    return QuantilePlan(spec=spec, cells=cells, stride=stride, boundaries=boundaries,
                        clamp=(float(low[0]), float(high[-1])), representatives=(low + high) / 2,
                        width=float(np.max(np.diff(boundaries))), kind=domain.kind)


def prefix_block(aggregate: ir.Aggregate, column: sch.Column, cell_of_base: npt.NDArray[np.int64], position: int,
                 grouped: bool, later: Sequence[int], counts: Workload) -> tuple[QuantilePlan, Workload, Workload]:
    """An order statistic's plan, prefix block and totals, from the statement's COUNT(*) block
    ``counts`` (x, at axis ``position``, is not grouped: its factors there are one mask row each):
    that factor becomes the prefix rows (or the total rows) · diag(mask). ``later``: the group
    counts of the grouped axes after x (the row stride)."""
    domain = check_column(aggregate, column, grouped)
    assert aggregate.quantile is not None
    plan = plan_quantile(aggregate.quantile, domain, cell_of_base, int(np.prod(later, dtype=np.int64)))
    prefix, total = prefix_matrices(int(cell_of_base.max()) + 1, plan.cells)
    return plan, _on_axis(counts, position, prefix), _on_axis(counts, position, total)


def _on_axis(block: Workload, position: int, rows: npt.NDArray[np.float64]) -> Workload:
    """``block`` (a Kronecker product, or a disjoint sum of them) with the one-row factor at
    ``position`` replaced by ``rows`` · diag(that row)."""
    if isinstance(block, DisjointSum):
        return DisjointSum([_on_axis(term, position, rows) for term in block.terms])
    assert isinstance(block, Kron)
    factors = list(block.factors)
    factors[position] = Explicit(rows * factors[position].dense())
    return Kron(factors)


def prefix_matrices(size: int, cells: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """On x's axis (``size`` batch cells, the first ``cells`` inside): the prefix rows (row k: cells
    0..k) and the total rows (each row: all inside cells), K × size each."""
    prefix = np.zeros((cells, size))
    prefix[:, :cells] = np.tril(np.ones((cells, cells)))
    total = np.zeros((cells, size))
    total[:, :cells] = 1.0
    return prefix, total


# ==================================================================================== answers
def answer_arrays(plan: QuantilePlan, group_rows: npt.NDArray[np.int64], found: Answers,
                  own: int) -> dict[str, npt.NDArray[np.float64]]:
    """value, stddev, low and high per output group, from the released prefix block ``found``
    (``own``: its block index, under which Cov(P̂_k, N̂) is stored; absent for exact zeros)."""
    covariances = found.covariances.get(own, np.zeros_like(found.variances))
    results = []
    for group_row in group_rows:
        rows = plan.block_rows(int(group_row))
        prefix = PrefixCounts(values=found.values[rows], variances=found.variances[rows],
                              total_covariances=covariances[rows])
        results.append(estimate_quantile(prefix, plan.boundaries, plan.spec.fraction, plan.spec.kind,
                                         clamp=plan.clamp, representatives=plan.representatives, law=found.law))
    return {name: np.array([getattr(r, name) for r in results], dtype=np.float64)
            for name in ("value", "stddev", "low", "high")}


#: How MIN's and MAX's 95 % CI is found (result metadata and EXPLAIN; ``dpsql.answers.quantiles``).
EXTREME_CI = ("a 95% CI that holds for any data: each cell boundary's noisy count is compared with κ standard errors, "
              "κ bounding the tail of the noise actually added at 5%/K at each of the K boundaries scanned (a union "
              "bound: the CI misses with probability at most 5%)")


def extreme(plan: QuantilePlan) -> str | None:
    """"min" or "max" for MIN, MAX and the 0 and 1 quantiles (answered as MIN and MAX), else None."""
    if plan.spec.kind in ("min", "max"):
        return plan.spec.kind
    return {0.0: "min", 1.0: "max"}.get(plan.spec.fraction)


def definition(plan: QuantilePlan) -> str:
    """What the released number is (result metadata and EXPLAIN)."""
    p = plan.spec.fraction
    kind = extreme(plan)
    if kind is not None:
        middle = "the middle value of the base cell holding the middle" if plan.spec.kind == "disc" else "the middle"
        what = (f"approximate {kind.upper()}: {middle} of {EXTREME_CI}. "
                + ("Its high end is the first boundary whose count of rows at or below it is surely positive "
                   "(above κ standard errors), its low end the last boundary before it whose count is surely 0 "
                   "(plus κ standard errors below 1), else the domain's lower bound: at moderate ε differential "
                   "privacy hides whether a few rows lie lower"
                   if kind == "min" else
                   "Its low end is the last boundary whose count of rows above it is surely positive (above κ "
                   "standard errors), its high end the first boundary after it whose count above is surely 0 "
                   "(plus κ standard errors below 1), else the domain's upper bound: at moderate ε differential "
                   "privacy hides whether a few rows lie higher")
                + "; so the value is within 1.96·<alias>_stddev of the truth whenever the CI covers it")
    else:
        rule = ("linearly interpolated inside the base cell where the noisy prefix count reaches p·N"
                if plan.spec.kind == "cont" else "the middle value of the base cell where the noisy prefix count "
                                                  "reaches p·N")
        what = (f"the {p:g} quantile of the non-NULL values in the domain, {rule}; 95% CI between the cell "
                "boundaries where the prefix count differs from p·N by more than 1.96 standard errors")
    return (f"{what}; <alias>_stddev is the CI's half-width / 1.96, <alias>_low and <alias>_high its ends; "
            f"read from {plan.cells} base cells (widest {plan.width:g}), post-processing of the released prefix "
            "counts (no extra cost)")


def explain_line(alias: str, plan: QuantilePlan) -> str:
    """EXPLAIN's line for one order statistic (public figures only)."""
    kind = extreme(plan)
    if kind is not None:
        return (f"order statistic {alias}: approximate {kind.upper()}, the middle of {EXTREME_CI} "
                f"(K = {plan.cells}), from {plan.cells} noisy prefix counts per group over the column's base cells "
                "(post-processing, no extra cost); within 1.96 stddev of the truth when the CI covers it")
    what = {"cont": f"the {plan.spec.fraction:g} quantile, interpolated",
            "disc": f"the {plan.spec.fraction:g} quantile, a cell's middle value"}[plan.spec.kind]
    return (f"order statistic {alias}: {what}, from {plan.cells} noisy prefix counts per group over the column's base "
            f"cells (post-processing, no extra cost); bias ≤ the cell width {plan.width:g}; 95% CI from the "
            "prefix counts' variances and covariances, to cell boundaries")


def describe(plan: QuantilePlan, nulls: int) -> dict[str, object]:
    """The result metadata of one order statistic."""
    entry: dict[str, object] = {"definition": definition(plan)}
    entry["bias_bound"] = plan.width
    if extreme(plan) is not None:
        entry["bias_note"] = ("the value is the middle of the CI: off by at most its half-width, 1.96·stddev, whenever "
                              "the CI covers the truth (probability ≥ 95% for any data); with exact counts the CI is "
                              f"the base cell holding the true value, so the value is off by at most {plan.width:g}")
    else:
        entry["bias_note"] = (f"with exact counts the estimate lies in the base cell holding the true value: it is off "
                              f"by at most the cell width {plan.width:g} (the CI, widened to cell boundaries, covers "
                              "it)")
    if nulls:
        entry["null"] = (f"{nulls} group(s) NULL: the noisy count of rows with a value is below max(1, "
                         f"{MIN_TOTAL_STDDEVS:g} standard errors), too few rows for an order statistic")
    return entry
