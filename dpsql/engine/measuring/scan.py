"""Reading the data: the cell data of every statement group with something to measure.

This module and :mod:`dpsql.engine.measuring.measure` are where the statement-group route touches data; it
runs only after the batch's cost is charged, and reads exactly the vectors the plan measures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from dpsql.backends import Backend, CellData, Squared
from dpsql.engine.measuring.measurements import PlannedVector
from dpsql.engine.vocabulary import Report
from dpsql.schema import Column, Table
from dpsql.sql.compile import CompiledBatch, CompiledGroup, batch_cell_totals
from dpsql.sql.vectors import DataVector


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """What one statement group reads: its table variant, cell columns, sums and non-NULL counts."""

    index: int
    table: Table
    cells: list[Column]
    sums: dict[Column | Squared, float]
    nonnull: list[Column]
    value_axes: bool
    units: bool = False  # the distinct units per cell (dpsql.sql.units): scanned alone, never summed across sets


def scan(compiled: CompiledBatch, measurements: Sequence[PlannedVector], truncated: Mapping[str, Column], *,
         backend: Backend, report: Report) -> dict[int, CellData]:
    """The cell data of every group with something to measure, by group index.

    Groups reading the table's columns as measured share one scan (GROUPING SETS); a group with
    value-cell axes (its own variant of a column, binning the clamped value) is scanned alone.
    """
    requests = []
    for index, group in enumerate(compiled.groups):
        mine = [m for m in measurements if m.group == index and m.share != 0]
        if not mine:
            continue
        value_axes = {a.column.name: a.column for a in group.axes if a.column != compiled.table.columns[a.column.name]}
        columns = {**truncated, **value_axes}
        requests.append(ScanRequest(index=index, table=replace(compiled.table, columns=columns),
                                    cells=[columns[axis.column.name] for axis in group.axes],
                                    sums={_measure(columns[m.vector.summed], m.vector): m.quantum
                                          for m in mine if m.vector.is_sum},
                                    nonnull=[columns[str(m.vector.column)] for m in mine if m.vector.kind == "nonnull"],
                                    value_axes=bool(value_axes),
                                    units=any(m.vector.kind == "units" for m in mine)))
    shared: list[ScanRequest] = []
    alone: list[ScanRequest] = []
    sums: dict[Column | Squared, float] = {}
    for request in requests:
        fits = (not request.value_axes and not request.units
                and all(sums.get(c, q) == q for c, q in request.sums.items()))
        (shared if fits else alone).append(request)
        if fits:
            sums.update(request.sums)
    found: dict[int, CellData] = {}
    if shared:
        name, cells = compiled.table.name, sum(compiled.groups[r.index].cells for r in shared)
        report(f"scanning '{name}' once for {len(shared)} statement group(s) ({cells:,} cells)")
        nonnull = list(dict.fromkeys(c for r in shared for c in r.nonnull))
        data = backend.cell_data_sets(shared[0].table, [r.cells for r in shared], sum_columns=sums,
                                      count_columns=nonnull)
        found.update({r.index: d for r, d in zip(shared, data)})
    for r in alone:
        report(f"scanning '{compiled.table.name}' for group {r.index + 1} of {len(compiled.groups)} "
               f"({compiled.groups[r.index].cells:,} cells)")
        units = {"distinct_units": True} if r.units else {}  # asked only where needed: the protocol's newest option
        found[r.index] = backend.cell_data(r.table, r.cells, sum_columns=r.sums, count_columns=r.nonnull, **units)
    return found


def batch_vector(group: CompiledGroup, data: CellData,
                 vector: DataVector) -> npt.NDArray[np.int64] | npt.NDArray[np.object_]:
    """Base-cell data of one vector summed into the group's cells (the axes' coarser partitions)."""
    if vector.kind == "count":
        values = data.counts
    elif vector.kind == "units":
        assert data.units is not None, "scanned with distinct_units"
        values = data.units
    else:
        values = {"sum": data.sums, "sumsq": data.squares, "nonnull": data.nonnull}[vector.kind][str(vector.column)]
    return batch_cell_totals([axis.cell_of_base for axis in group.axes], data.index, data.shape, values)


def _measure(column: Column, vector: DataVector) -> Column | Squared:
    """What the backend sums for a ``sum`` vector (the column) or a ``sumsq`` vector (its square)."""
    return Squared(column) if vector.squared else column
