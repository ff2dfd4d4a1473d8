"""Window aggregates over a statement's released groups (``dpsql.sql.windows``): values and covariances.

A window ``SUM(a) OVER w`` is, row by row, a linear combination of one block's answers over the
statement's rows: (R a)_r = Σ_{r' ∈ w(r)} a_{r'}, where w(r) is the current row's frame inside its
partition, in ORDER BY order (ties kept in the groups' declared order, NULLs last, as DuckDB sorts);
a ROWS frame counts rows, a RANGE frame's CURRENT ROW takes the row's peers (equal ORDER BY keys;
without ORDER BY every row of the partition is a peer). ``AVG(a) OVER w`` = (R a)_r / |w(r)| and
``COUNT(a) OVER w`` = |w(r)|: every declared group is a row and COUNT and SUM answers are never
NULL, so the frame's size is public. An empty frame gives NULL (SUM, AVG) or 0 (COUNT).

Each window is one more column of the statement's answers for :mod:`dpsql.answers.derived`, with
its exact covariances with every other column row by row, Cov((L a)_r, (R a')_r), from the answers'
noise forms (:mod:`dpsql.planning.noise_forms`): exact for sums of answers, so a share's delta-method
error accounts for its numerator's part in its denominator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import scipy.sparse as sp

from dpsql.answers.columns import group_columns, sort_order
from dpsql.planning.mechanism import Answers
from dpsql.planning.noise_forms import Combination, NoiseForm
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, CompiledStatement
from dpsql.sql.windows import key_positions

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Frames:
    """Each output row's frame over the statement's rows (0/1 rows, stored once per distinct frame)
    and the frames' sizes."""

    combination: Combination
    sizes: FloatArray


def frames(compiled: CompiledBatch, statement: CompiledStatement, window: ir.Window) -> Frames:
    """The rows each row's frame holds (module docstring)."""
    n = len(statement.block_rows)
    position = key_positions(statement.statement)
    keys = [c.name.lower() for c in window.partition_by] + [c.name.lower() for c, _ in window.order_by]
    table = pa.table({name: next(iter(group_columns(compiled, statement, position[name], name).values()))
                      for name in dict.fromkeys(keys)}) if keys else pa.table({"_": np.zeros(n)})
    parts = [table.column(c.name.lower()).to_pylist() for c in window.partition_by]
    ordered = [table.column(c.name.lower()).to_pylist() for c, _ in window.order_by]
    order = sort_order([(c.name.lower(), descending) for c, descending in window.order_by], table)
    partitions: dict[tuple[object, ...], list[int]] = {}
    for row in order:
        partitions.setdefault(tuple(values[row] for values in parts), []).append(row)
    distinct: dict[tuple[int, int, int], int] = {}
    members_of: list[npt.NDArray[np.int64]] = []
    which = np.zeros(n, dtype=np.int64)
    sizes = np.zeros(n)
    for index, members in enumerate(partitions.values()):
        rows = np.asarray(members, dtype=np.int64)
        peers = [tuple(values[row] for values in ordered) for row in members]
        first: dict[tuple[object, ...], int] = {}
        last: dict[tuple[object, ...], int] = {}
        for i, key in enumerate(peers):
            first.setdefault(key, i)
            last[key] = i
        for i, row in enumerate(members):
            low, high = _bounds(window.frame, i, len(members), first[peers[i]], last[peers[i]])
            frame = (index, low, high) if low <= high else (-1, 0, -1)
            if frame not in distinct:
                distinct[frame] = len(members_of)
                members_of.append(rows[low:high + 1] if low <= high else rows[:0])
            which[row] = distinct[frame]
            sizes[row] = max(0, high - low + 1)
    lengths = np.array([m.size for m in members_of], dtype=np.int64)
    indices = np.concatenate(members_of) if members_of else np.zeros(0, dtype=np.int64)
    matrix = sp.csr_array((np.ones(indices.size), indices, np.concatenate([[0], np.cumsum(lengths)])),
                          shape=(len(members_of), n))
    return Frames(combination=Combination(distinct=matrix, which=which), sizes=sizes)


def _bounds(frame: ir.Frame, i: int, size: int, first_peer: int, last_peer: int) -> tuple[int, int]:
    """The first and last positions (in the partition's order) of row ``i``'s frame."""
    if frame.kind == "rows":
        low = 0 if frame.start is None else max(0, i + frame.start)
        high = size - 1 if frame.end is None else min(size - 1, i + frame.end)
        return low, high
    low = 0 if frame.start is None else first_peer
    high = size - 1 if frame.end is None else last_peer
    return low, high


def on_block(combination: Combination, block_rows: npt.NDArray[np.int64], width: int) -> Combination:
    """A combination over the statement's rows as one over its block's rows (row r is block row block_rows[r])."""
    coo = sp.coo_array(combination.distinct)
    return Combination(distinct=sp.csr_array((coo.data, (coo.row, block_rows[coo.col])),
                                             shape=(combination.distinct.shape[0], width)),
                       which=combination.which)


def identity(n: int) -> Combination:
    """Each output row's own answer."""
    return Combination(distinct=sp.csr_array(sp.identity(n, format="csr")), which=np.arange(n, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class Column:
    """A column of answers the outputs read: block ``block`` combined by ``combination`` (over block rows)."""

    block: int
    combination: Combination


def covariances(columns: Sequence[Column], answers: Mapping[int, Answers], new: int) -> FloatArray:
    """Row by row, Cov between each column from ``new`` on and every column: (rows, k, k) with the
    first ``new`` × ``new`` corner left zero (filled by the caller from the answers' own covariances)."""
    k = len(columns)
    found = np.zeros((columns[0].combination.outputs, k, k))
    for i in range(new, k):
        form = _form(answers[columns[i].block])
        for j in range(i + 1):
            other = _form(answers[columns[j].block])
            found[:, i, j] = found[:, j, i] = form.covariance(columns[i].combination, other, columns[j].combination)
    return found


def _form(answers: Answers) -> NoiseForm:
    form = answers.form
    assert form is not None, "windows are planned only where answers carry their noise form (dpsql.sql.windows)"
    return form
