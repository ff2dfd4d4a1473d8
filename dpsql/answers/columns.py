"""The columns an answer table is built from, shared by plain statements (:mod:`dpsql.answers.tables`)
and derived ones (:mod:`dpsql.answers.derived`): the group columns, an aggregate's values and standard
errors (AVG = SUM/COUNT by the delta method), and the order of the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql.planning.mechanism import Answers
from dpsql.schema import Categorical, Domain, Table
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, CompiledStatement, OutputAggregate
from dpsql.sql.group_keys import key_type, label_array
from dpsql.sql.vectors import SPREADS

FloatArray = npt.NDArray[np.float64]

#: AVG is NULL where the noisy COUNT is below this many of its standard errors (or below 1): there
#: the ratio S/C is dominated by noise in C and its delta-method standard error is meaningless.
AVG_MIN_COUNT_STDDEVS = 2.0
#: The Arrow type of an ordered domain's labels, by its kind.
_ARROW_TYPES = {"integer": pa.int64(), "numeric": pa.float64(), "date": pa.date32()}


def aggregate_values(statement: CompiledStatement, output: OutputAggregate,
                     answers: Mapping[int, Answers]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Values and standard errors in output row order; AVG = SUM/COUNT by the delta method.

    AVG is the plain ratio of the noisy SUM and COUNT, even where noise puts it outside the
    measure bounds (clipping it returned e.g. 0 ± 22,343 for a true 25,684, with the
    standard error of the unclipped ratio).
    """
    rows = statement.block_rows
    if output.aggregate.function in SPREADS:
        value, stddev, _ = spread_values(output.aggregate.function, [answers[b] for b in output.blocks],
                                         output.blocks, rows)
        return value, stddev
    first = answers[output.blocks[0]]
    if output.aggregate.function != "avg":
        return first.values[rows], np.sqrt(first.variances[rows])
    second = answers[output.blocks[1]]
    total, count = first.values[rows], second.values[rows]
    var_total, var_count = first.variances[rows], second.variances[rows]
    # Cov(S, C): zero when measured apart; from the shared measurement when read as value cells
    covariance = first.covariances[output.blocks[1]][rows] if output.blocks[1] in first.covariances else 0.0
    enough = count >= np.maximum(1.0, AVG_MIN_COUNT_STDDEVS * np.sqrt(var_count))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(enough, total / count, np.nan)
        # delta method: Var(S/C) ≈ Var(S)/C² + S²·Var(C)/C⁴ − 2·S·Cov(S, C)/C³
        variance = np.where(enough,
                            var_total / count**2 + total**2 * var_count / count**4 - 2 * total * covariance / count**3,
                            np.nan)
        variance = np.maximum(variance, 0.0)
    # not clipped to the measure bounds: a clipped ratio is biased and its spread is not the one
    # reported, while S/C is the ratio the delta-method standard error describes
    return mean, np.sqrt(variance)


def values_and_covariance(found: Sequence[Answers], blocks: Sequence[int], rows: npt.NDArray[np.int64]
                          ) -> tuple[FloatArray, FloatArray]:
    """The answers of ``blocks`` (``found``, in that order) in output row order: values (rows, m) and their
    covariance row by row (rows, m, m), the variances on the diagonal and, where two blocks share a
    measurement, its covariances (0 between data vectors measured with independent noise)."""
    values = np.stack([a.values[rows] for a in found], axis=1)
    m = len(found)
    sigma = np.zeros((len(rows), m, m))
    for j, a in enumerate(found):
        sigma[:, j, j] = a.variances[rows]
        for k, c in enumerate(blocks):
            if k != j and c in a.covariances:
                sigma[:, j, k] = sigma[:, k, j] = a.covariances[c][rows]
    return values, sigma


def spread_values(function: str, found: Sequence[Answers], blocks: Sequence[int], rows: npt.NDArray[np.int64]
                  ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """A variance or standard deviation from the noisy SUM S₁, COUNT n and SUM of squares S₂ (``found``,
    the answers of ``blocks`` in that order), in output row order: (values, standard errors √(∇ᵀΣ∇),
    where STDDEV was clamped at 0); Σ is the answers' covariance row by row (:func:`spread_gradient`)."""
    values, sigma = values_and_covariance(found, blocks, rows)
    value, gradient, clamped = spread_gradient(function, values, sigma)
    return value, np.sqrt(np.maximum(np.einsum("ni,nij,nj->n", gradient, sigma, gradient), 0.0)), clamped


def spread_gradient(function: str, values: FloatArray, sigma: FloatArray
                    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """(value, gradient with respect to (S₁, n, S₂), where STDDEV was clamped at 0), row by row, of a
    variance or standard deviation of the noisy ``values`` (rows, 3) = (S₁, n, S₂) with covariance
    ``sigma`` (rows, 3, 3): Cov 0 between different data vectors, whose noise is independent, and the
    mechanism's where two blocks share a measurement. NULL (NaN) rows where the count is too small.

    VAR_SAMP = (S₂ − S₁²/n)/(n − 1) and VAR_POP = S₂/n − (S₁/n)², i.e. M/d with M = S₂ − S₁²/n and
    d = n − 1 or n; ∇VAR = (−2S₁/(n·d), (S₁²/n²)/d − VAR/d, 1/d), SE(VAR) = √(∇ᵀΣ∇) (the delta method).
    NULL where d is below max(1, AVG_MIN_COUNT_STDDEVS standard errors of n): AVG's rule on the denominator.

    STDDEV = √max(VAR, 0) with standard error min(SE(VAR)/(2·STDDEV), √SE(VAR)): the delta method where
    the variance is clearly positive, and where it is within a quarter of a standard error of 0 (or
    clamped there) √SE(VAR), the spread of a standard deviation that cannot be told from 0 (at a true
    0, √max(VAR, 0) has a root mean squared error of about 0.63·√SE(VAR)). Its gradient is ∇VAR scaled
    to that standard error: ∇VAR/(2·STDDEV), the derivative, wherever the delta method applies.
    VAR itself is not clamped.
    """
    total, count, squares = values[:, 0], values[:, 1], values[:, 2]
    denominator = count - 1 if function.endswith("samp") else count
    enough = denominator >= np.maximum(1.0, AVG_MIN_COUNT_STDDEVS * np.sqrt(sigma[:, 1, 1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = np.where(enough, (squares - total**2 / count) / denominator, np.nan)
        gradient = np.stack([-2 * total / (count * denominator), (total**2 / count**2 - variance) / denominator,
                             1 / denominator], axis=1)
        gradient = np.where(enough[:, None], gradient, np.nan)
        if function.startswith("var"):
            return variance, gradient, np.zeros(len(variance), dtype=bool)
        error = np.sqrt(np.maximum(np.einsum("ni,nij,nj->n", gradient, sigma, gradient), 0.0))
        deviation = np.sqrt(np.maximum(variance, 0.0))
        spread = np.fmin(error / (2 * deviation), np.sqrt(error))
        scale = np.where(error > 0, spread / error, np.where(deviation > 0, 1 / (2 * deviation), 0.0))
        return deviation, gradient * scale[:, None], enough & (variance <= 0)


def group_columns(compiled: CompiledBatch, statement: CompiledStatement, index: int,
                  alias: str) -> dict[str, pa.Array]:
    """The output column(s) of GROUP BY column ``index`` named ``alias``, in output row order: the
    labels typed by the domain or the key (a bin as its lower bound, plus ``<alias>_upper``)."""
    axis = compiled.groups[statement.group].axes[statement.group_axes[index]]
    labels = statement.group_labels[index]
    picked = [labels[g] for g in statement.group_rows[:, index]]
    key = statement.statement.group_keys[index] if statement.statement.group_keys else None
    if key is not None:  # a CASE/date-part key: labels typed by the key, no _upper
        return {alias: label_array(key, picked)}
    return _domain_columns(axis.column.domain, alias, picked)


def _domain_columns(domain: Domain, alias: str, picked: Sequence[Any]) -> dict[str, pa.Array]:
    """A plain column's labels (None: NULL) typed by its domain: a categorical value, or a bin as its
    lower bound plus ``<alias>_upper`` where the domain reports it."""
    if isinstance(domain, Categorical):
        kind = pa.string() if all(isinstance(v, str) for v in domain.values) else pa.int64()
        return {alias: pa.array(picked, type=kind)}
    arrow_type = _ARROW_TYPES[domain.kind]
    result = {alias: pa.array([None if p is None else p[0] for p in picked], type=arrow_type)}
    if domain.reports_upper:
        result[f"{alias}_upper"] = pa.array([None if p is None else p[1] for p in picked], type=arrow_type)
    return result


def rolled_up_columns(table: Table, item: ir.GroupColumn, rows: int) -> dict[str, pa.Array]:
    """The output column(s) of a key that the statement's grouping set rolls up (ROLLUP, CUBE, GROUPING
    SETS): NULL in each of ``rows`` rows, typed as :func:`group_columns` types the key's labels."""
    if item.key is not None:
        return {item.alias: pa.nulls(rows, type=key_type(item.key))}
    return _domain_columns(table.column(item.column.name).domain, item.alias, [None] * rows)


def rows_kept(table: pa.Table, offset: int, limit: int | None) -> pa.Table:
    """The rows OFFSET and LIMIT keep, after ORDER BY: ``limit`` rows from row ``offset`` (all without LIMIT)."""
    return table.slice(offset, limit) if offset or limit is not None else table


def sort_order(keys: Sequence[tuple[str, bool]], table: pa.Table) -> list[int]:
    """Row order for (column, descending) keys: stable sorts from the last key to the first, NULLs
    (and NaN) last in either direction."""
    order = list(range(table.num_rows))
    for name, descending in reversed(keys):
        values = table.column(name).to_pylist()
        missing = [r for r in order if _is_null(values[r])]
        present = [r for r in order if not _is_null(values[r])]
        present.sort(key=lambda r: values[r], reverse=descending)
        order = present + missing
    return order


def _is_null(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))
