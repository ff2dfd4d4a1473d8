"""Server side, as Arrow: report files in and out, and workload answers with their variances.

A report file (Parquet or CSV) has the columns ``strategy`` (the strategy file's sha256) and
``output`` (an integer in [0, m)), one row per report; or, for aggregated reports (simulation),
also ``count``, the number of reports the row stands for.

Math:
    answers W x̂, x̂ = X⁺QᵀD⁻¹y (``dpsql.local.variance``); their variances depend on the unknown
    counts x, so each answer's variance is the plug-in estimate Var[(W x̂)_i] at x̃, the estimate
    x̂ clipped at 0 and rescaled to the public N = 1ᵀy (uniform when every estimate is ≤ 0). The
    table's metadata also gives N·max_u z_u, the worst-case total variance over all data sets.
Privacy:
    Post-processing of ε-LDP reports: nothing here sees a true value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dpsql.errors import DataError, InterfaceError
from dpsql.local.protocol import StrategyFile, report_counts
from dpsql.local.variance import WorkloadLike, answer_variances, as_workload, estimate_cells, worst_case_variance
from dpsql.matrix.workloads import FloatArray


def reports_table(published: StrategyFile, outputs: npt.ArrayLike, counts: npt.ArrayLike | None = None) -> pa.Table:
    """A report table for one strategy: one row per report, or aggregated rows with ``count``."""
    chosen = np.asarray(outputs, dtype=np.int64)
    columns: dict[str, Any] = {
        "strategy": pa.array([published.sha256] * chosen.size, type=pa.string()).dictionary_encode(),
        "output": pa.array(chosen, type=pa.int64()),
    }
    if counts is not None:
        columns["count"] = pa.array(np.asarray(counts, dtype=np.int64), type=pa.int64())
    return pa.table(columns)


def write_reports(table: pa.Table, path: str | Path) -> None:
    """Write a report table as Parquet (or CSV when the name ends in .csv)."""
    try:
        pa_csv.write_csv(table, path) if str(path).lower().endswith(".csv") else pq.write_table(table, path)
    except OSError as err:
        raise InterfaceError(f"cannot write the reports to '{path}': {err}.") from err


def read_reports(path: str | Path) -> pa.Table:
    """Read a report file (Parquet, or CSV when the name ends in .csv)."""
    if not Path(path).is_file():
        raise InterfaceError(f"cannot read the reports file '{path}': no such file.")
    try:
        return pa_csv.read_csv(path) if str(path).lower().endswith(".csv") else pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise InterfaceError(f"cannot read the reports file '{path}': {err}.") from err


def counts_of(published: StrategyFile, reports: pa.Table) -> npt.NDArray[np.int64]:
    """y from a report table, after checking every report's strategy hash and output.

    Raises:
        DataError: the table lacks ``strategy``/``output``, or a report belongs to another strategy.
    """
    missing = [name for name in ("strategy", "output") if name not in reports.column_names]
    if missing:
        raise DataError(f"a report table needs the columns strategy and output; it lacks {', '.join(missing)}.")
    strategies = reports.column("strategy").cast(pa.string()).to_numpy(zero_copy_only=False)
    outputs = reports.column("output").to_numpy(zero_copy_only=False)
    counts = reports.column("count").to_numpy(zero_copy_only=False) if "count" in reports.column_names else None
    return report_counts(published, strategies, outputs, counts)


def plug_in_counts(x_hat: FloatArray, reports: int) -> FloatArray:
    """x̃: x̂ clipped at 0 and rescaled to sum to N (uniform if nothing is positive).

    >>> plug_in_counts(np.array([3.0, -1.0, 1.0]), 8).tolist()
    [6.0, 0.0, 2.0]
    """
    clipped = np.maximum(x_hat, 0.0)
    total = clipped.sum()
    if total <= 0:
        return np.full(x_hat.shape, reports / x_hat.size)
    return np.asarray(clipped * (reports / total), dtype=np.float64)


def answer(published: StrategyFile, y: npt.ArrayLike,
           workload: WorkloadLike) -> tuple[FloatArray, FloatArray, dict[str, Any]]:
    """(answers W x̂, their plug-in variances, metadata) from the report counts y."""
    W = as_workload(workload)
    strategy = published.strategy
    counts = np.asarray(y, dtype=np.float64)
    x_hat = estimate_cells(strategy, counts)
    reports = round(float(counts.sum()))
    variances = answer_variances(W, strategy, plug_in_counts(x_hat, reports))
    metadata = {
        "mechanism": f"local DP workload factorization ({published.name})",
        "epsilon": published.epsilon,
        "strategy_sha256": published.sha256,
        "reports": reports,
        "variance": "plug-in: the exact variance at the estimated counts (clipped at 0, rescaled to the reports)",
        "worst_case_total_variance": reports * worst_case_variance(W, strategy),
    }
    return np.asarray(W @ x_hat, dtype=np.float64), variances, metadata


def estimate(reports: pa.Table, *, strategy: StrategyFile, workload: WorkloadLike) -> pa.Table:
    """The workload's answers from the reports: columns query, value, variance, value_stddev.

    Raises:
        DataError: a report belongs to another strategy or names no valid output.
        UnsupportedStrategyError: the workload is not in the row space of the strategy.
    """
    values, variances, metadata = answer(strategy, counts_of(strategy, reports), workload)
    table = pa.table({"query": pa.array(np.arange(values.size), type=pa.int64()), "value": values,
                      "variance": variances, "value_stddev": np.sqrt(variances)})
    return with_metadata(table, metadata)


def with_metadata(table: pa.Table, metadata: Mapping[str, Any]) -> pa.Table:
    """The table with ``metadata`` as JSON under the schema key ``dpsql`` (as the central path does)."""
    return table.replace_schema_metadata({b"dpsql": json.dumps(dict(metadata), default=str).encode()})
