"""Files the command line reads and writes: the queries file and the result tables."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dpsql.errors import InterfaceError


def read_queries(path: Path) -> str:
    """The text of a .sql file, or of standard input for ``-``; InterfaceError naming the file if it cannot be read."""
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text()
    except OSError as err:
        raise InterfaceError(f"cannot read the queries file '{path}': {err.strerror}.") from err


def result_folder(folder: Path, *, consequence: str = "") -> None:
    """Create the folder for ``--out`` (before anything is spent); InterfaceError if it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InterfaceError(f"cannot write results to '{folder}': {err.strerror or err}. Pass a folder for --out."
                             + (f" {consequence}" if consequence else "")) from err


def write_tables(tables: Sequence[pa.Table], folder: Path, file_format: str) -> list[Path]:
    """statement_1.parquet (or .csv), statement_2…, one per result table; returns the paths."""
    paths = []
    for number, table in enumerate(tables, start=1):
        path = folder / f"statement_{number}.{file_format}"
        pq.write_table(table, path) if file_format == "parquet" else pa_csv.write_csv(table, path)
        paths.append(path)
    return paths
