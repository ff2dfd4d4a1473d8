"""The Backend protocol: everything the engine asks of the place where the data live.

The engine plans from the public schema alone, charges the batch, and only then asks a backend
for data, always as *exact* aggregates over the declared domains: row counts per cell
(:meth:`Backend.cell_data`, :meth:`Backend.cell_data_sets`, :meth:`Backend.marginal_counts`) and
the truncation statistics of one measure (:meth:`Backend.measure_profile`). The engine then adds
the noise itself (``dpsql.planning.mechanism`` and ``dpsql.noise``); a backend never sees a budget or a
random source, and nothing it returns leaves dpsql without being measured.

Privacy contract of every implementation:
    - Before the charge the engine calls only :meth:`Backend.check_table`, which reads the
      catalog (names and types), never rows; its errors may name columns and types, never values.
    - The data methods return exact counts and clamped sums computed from the declared schema
      only (domains, measure bounds, privacy unit, ``out_of_domain``): which cell a row goes to
      and how much it adds never depends on other rows, except through the privacy-unit cap of
      ``max_rows`` rows per unit, chosen from that unit's own rows. So adding or removing one
      unit moves at most ``max_rows`` rows: the stability the noise calibration assumes.
    - Errors raised while reading data must not quote data values (``OperationalError`` with the
      message withheld, never chained).
    - User SQL text never reaches a backend: the arguments are the parsed, declared objects.

This module imports neither duckdb nor any other database package, so the engine, the ledger and
a second backend can depend on it alone. ``dpsql.backends.duckdb.DuckDBBackend`` implements it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpsql.errors import OperationalError, ShapeError
from dpsql.schema import Column, Table

IntArray = npt.NDArray[np.int64]


# ======================================================================================= results
@dataclass(frozen=True, slots=True, kw_only=True)
class MeasureProfile:
    """Private statistics of one measure for choosing a truncation threshold (see Backend.measure_profile)."""

    rows: int
    below: tuple[int, ...]
    clipped_sums: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CellData:
    """The non-empty cells of a table's data vector, in row-major order over ``shape``.

    Every array is aligned with ``index`` and read-only.
    """

    #: Per cell column ``domain.size + 1``; the last index is the outside cell.
    shape: tuple[int, ...]
    #: Flat row-major indices (``np.ravel_multi_index`` over ``shape``) of the non-empty cells, sorted.
    index: IntArray
    #: Rows in each listed cell, after the privacy-unit cap.
    counts: IntArray
    #: Per SUM column name: sum of round(clamp(value, lo, hi) / quantum) in each listed cell, exactly
    #: (int64, or Python integers when a sum does not fit).
    sums: Mapping[str, IntArray]
    #: Per COUNT(col) column name: rows with a value (not NULL, not NaN) in each listed cell.
    nonnull: Mapping[str, IntArray]

    def __post_init__(self) -> None:
        arrays = [self.counts, *self.sums.values(), *self.nonnull.values()]
        if self.index.ndim != 1 or any(a.shape != self.index.shape for a in arrays):
            raise ShapeError(f"CellData arrays must all have the shape of index {self.index.shape}.")
        if self.index.size and (np.any(np.diff(self.index) <= 0) or self.index[0] < 0 or self.index[-1] >= self.size):
            raise ShapeError(f"CellData.index must be strictly increasing flat indices below {self.size}.")

    @property
    def size(self) -> int:
        """Number of cells in the product domain, outside cells included."""
        return math.prod(self.shape)

    def dense(self, values: npt.ArrayLike) -> IntArray:
        """Scatter one value per listed cell into the whole product domain (zeros elsewhere).

        >>> data = CellData(shape=(2, 2), index=np.array([1, 2]), counts=np.array([5, 7]), sums={}, nonnull={})
        >>> data.dense(data.counts).tolist()
        [0, 5, 7, 0]
        """
        array = np.asarray(values)
        if array.shape != self.index.shape:
            raise ShapeError(f"dense() needs one value per listed cell ({self.index.size}); got shape {array.shape}.")
        out = np.zeros(self.size, dtype=array.dtype)
        out[self.index] = array
        return out

    def dense_counts(self) -> IntArray:
        """Row counts over the whole product domain, length ``prod(shape)``."""
        return self.dense(self.counts)


# ====================================================================================== protocol
@runtime_checkable
class Backend(Protocol):
    """Where the data live: a catalog check, four exact aggregate reads, and three public facts.

    Where the module docstring's contract says "cell", read: per cell column, the index of the
    base cell holding the row's value (``domain.size`` for the outside cell: NULL, NaN, an
    undeclared category or a value outside the bounds; ``out_of_domain = "clamp"`` moves
    out-of-range values to the first or last cell instead; rows whose value in an
    ``out_of_domain = "exclude"`` column would go outside are dropped from every read). A
    measure adds round(clamp(value, lo, hi) / quantum) per row, half away from zero, 0 for NULL
    and NaN. Columns may be variants of the schema's (value cells, truncated bounds): bin and
    clamp with the Column objects passed in, read the database column of the same name.
    """

    @property
    def dialect(self) -> str | None:
        """The sqlglot dialect name of the SQL the backend generates and runs (e.g. ``"duckdb"``),
        or None if it runs no SQL. Public; for EXPLAIN and diagnostics."""
        ...

    @property
    def in_memory(self) -> bool:
        """True when the data are not stored durably (only test and demo data): the only data on which
        ``dpsql.connect`` accepts an in-memory ``Budget`` or a chosen random source. Reads no rows."""
        ...

    @property
    def identity(self) -> str:
        """What a ledger binds a dataset's budget to: a public, stable name of the stored data that
        changes when the data are replaced (for a file: :func:`file_identity`), or ``""`` when the
        data have no durable identity. Reads no rows."""
        ...

    def check_table(self, table: Table) -> None:
        """Check, from the catalog only (no rows), that ``table``, its declared columns and its privacy-unit
        column exist with types that can hold the declared domains.

        Raises:
            SchemaError: listing every problem (names and types, never values).
        """
        ...

    def cell_data(self, table: Table, cell_columns: Sequence[Column], *, sum_columns: Mapping[Column, float] = ...,
                  count_columns: Sequence[Column] = ()) -> CellData:
        """Exact row counts per cell of the product of ``cell_columns``' domains (``()``: one cell of all rows),
        with, per cell, the sum of each ``sum_columns`` measure in quanta (column -> public quantum) and the
        number of rows with a value in each ``count_columns`` column; after the privacy-unit cap.

        Raises:
            SchemaError: a column is not the table's, missing, of an unfit type, or summed without bounds.
            ProgrammingError: a quantum is not finite and positive, or too small for exact integers.
            OperationalError: the read failed (the message never quotes data).
        """
        ...

    def cell_data_sets(self, table: Table, cell_sets: Sequence[Sequence[Column]], *,
                       sum_columns: Mapping[Column, float] = ...,
                       count_columns: Sequence[Column] = ()) -> list[CellData]:
        """:meth:`cell_data` for each entry of ``cell_sets``, in order, over the same capped rows (one scan
        where the backend can): a unit's kept rows are chosen once for every set. Raises as cell_data."""
        ...

    def marginal_counts(self, table: Table, cell_columns: Sequence[Column],
                        marginals: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], IntArray]:
        """Exact row counts of each marginal (a sorted tuple of indices into ``cell_columns``; ``()`` is the
        total) as a dense read-only int64 array of shape ``(domain.size + 1 per listed column)``, after the
        privacy-unit cap; the product of all the columns' domains is never formed.

        Raises:
            ShapeError: a marginal is not a sorted tuple of distinct valid indices, is repeated, or none is given.
            SchemaError, OperationalError: as cell_data.
        """
        ...

    def measure_profile(self, table: Table, column: Column, quantum: float, below: Sequence[float],
                        clip: Sequence[int]) -> MeasureProfile:
        """What a truncation-threshold selector reads, exactly, over the capped rows with a value:
        a = |round(clamp(v, lo, hi) / quantum)| per row; ``rows`` = their number, ``below[k]`` =
        #{a ≤ below[k] / quantum}, ``clipped_sums[j]`` = Σ min(a, clip[j]). Raises as cell_data."""
        ...

    def close(self) -> None:
        """Release what the backend holds; later data calls raise InterfaceError."""
        ...


#: The members of :class:`Backend`, checked without calling them (``dpsql.connect`` uses it on foreign objects).
BACKEND_MEMBERS = ("dialect", "in_memory", "identity", "check_table", "cell_data", "cell_data_sets",
                   "marginal_counts", "measure_profile", "close")


def missing_members(candidate: object) -> list[str]:
    """The Backend members ``candidate`` lacks, looked up statically (no property is evaluated)."""
    sentinel = object()
    return [name for name in BACKEND_MEMBERS if inspect.getattr_static(candidate, name, sentinel) is sentinel]


#: Files read as one table (an in-memory copy, :meth:`dpsql.backends.duckdb.DuckDBBackend`) where a database is
#: expected, by name ending, and DuckDB's reader of each.
DATA_FILE_READERS: Mapping[str, str] = {".csv": "read_csv", ".csv.gz": "read_csv", ".tsv": "read_csv",
                                        ".parquet": "read_parquet"}
_HASH_CHUNK = 1 << 20


def data_file_suffix(path: object) -> str | None:
    """The name ending of a CSV or Parquet path (``".csv"``, ``".parquet"``, ...; any case), else None."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    name = os.fspath(path).lower()
    return next((suffix for suffix in sorted(DATA_FILE_READERS, key=len, reverse=True) if name.endswith(suffix)),
                None)


def data_file_table(path: str | os.PathLike[str]) -> str:
    """The table a CSV or Parquet file is read as when no schema names one: its name without the ending
    (``adult.csv`` → ``adult``)."""
    name = os.path.basename(os.fspath(path))
    suffix = data_file_suffix(path) or ""
    return name[:len(name) - len(suffix)] or name


def content_identity(path: str | os.PathLike[str]) -> str:
    """A data file's identity: its real path and the SHA-256 of its bytes (FIPS 180-4), as canonical JSON.

    For a CSV or Parquet file, which dpsql copies into memory whole: any change to its contents
    (an appended or edited row, a file written over the path) changes the hash, and moving it
    changes the path; the owner then rebinds on purpose, as for a database file.

    Raises:
        OperationalError: the file cannot be read.
    """
    real = os.path.realpath(os.fspath(path))
    digest = hashlib.sha256()
    try:
        with open(real, "rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
    except OSError as err:
        raise OperationalError(f"cannot read the data file '{path}' ({err.strerror or err}); the ledger binds a "
                               "budget to the file's contents.") from None
    return json.dumps({"path": real, "sha256": digest.hexdigest()}, sort_keys=True, separators=(",", ":"))


def file_identity(path: str | os.PathLike[str]) -> str:
    """A database file's identity: its real path and inode number, as canonical JSON (a CSV or Parquet
    file's: :func:`content_identity`).

    A database written in place (appending or deleting rows) keeps it. A copy, or another file
    moved or written over the path (``mv``, re-creation), is a new inode; moving the file itself
    changes its real path. Both then differ, and the owner rebinds on purpose. The device number
    is left out because it is not stable across reboots on some file systems (overlay, NFS).
    Limit: a new file that reuses a deleted file's inode number at the same path is not told apart.

    Raises:
        OperationalError: the file cannot be read.
    """
    if data_file_suffix(path) is not None:
        return content_identity(path)
    real = os.path.realpath(os.fspath(path))
    try:
        inode = os.stat(real).st_ino
    except OSError as err:
        raise OperationalError(f"cannot read the database file '{path}' ({err.strerror or err}); the ledger binds a "
                               "budget to a database file.") from None
    return json.dumps({"inode": inode, "path": real}, sort_keys=True, separators=(",", ":"))
