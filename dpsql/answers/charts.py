"""Pictures of private answers: each aggregate of each result table as points with ± one-standard-error bars.

Post-processing only: it draws the released values and their ``<alias>_stddev`` columns, nothing
else. matplotlib is the optional extra ``plots`` (``pip install "dpsql[plots]"``) and is imported
only here, when a chart is drawn; :func:`require` says clearly when it is missing, so that
``dpsql run --chart`` can refuse before anything is charged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from dpsql.errors import InterfaceError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Rows drawn per aggregate; a longer result shows its first rows and says how many there are.
MAX_ROWS = 40


def require() -> None:
    """InterfaceError unless matplotlib can be imported (the optional extra ``plots``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise InterfaceError("drawing a chart needs matplotlib, the optional extra 'plots': "
                             "pip install \"dpsql[plots]\" (or pip install matplotlib).") from err


def draw(tables: Sequence[pa.Table], path: str | os.PathLike[str] | None = None, *,
         titles: Sequence[str] | None = None) -> Figure:
    """One panel per aggregate of each result table: its value per row (the group keys as labels)
    with a bar of ± one standard error (its ``_stddev``); saved to ``path`` (PNG, SVG, PDF by its
    ending) when given. Rows whose value is NULL are left out; at most MAX_ROWS rows per panel.

    Raises:
        InterfaceError: matplotlib is not installed.
    """
    require()
    from matplotlib.figure import Figure

    panels = [(number, table, column) for number, table in enumerate(tables, start=1)
              for column in _aggregates(table)]
    heights = [1.2 + 0.28 * min(table.num_rows, MAX_ROWS) for _, table, _ in panels] or [1.0]
    figure = Figure(figsize=(8, sum(heights) + 0.5), layout="constrained")
    axes = figure.subplots(len(panels) or 1, 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (number, table, column) in zip(axes, panels):
        title = titles[number - 1] if titles is not None else f"statement {number}"
        _panel(ax, table, column, f"{title}: {column}")
    if path is not None:
        figure.savefig(os.fspath(path), dpi=120)
    return figure


def _aggregates(table: pa.Table) -> list[str]:
    """The table's numeric aggregate columns (those with a ``_stddev`` beside them)."""
    return [name for name in table.column_names if f"{name}_stddev" in table.column_names
            and pa.types.is_floating(table.schema.field(name).type)]


def _keys(table: pa.Table) -> list[str]:
    """The group columns: neither an aggregate nor one of its companions, nor a bin's ``_upper``."""
    companions = {f"{name}{suffix}" for name in table.column_names if f"{name}_stddev" in table.column_names
                  for suffix in ("", "_stddev", "_low", "_high")}
    return [name for name in table.column_names if name not in companions
            and not (name.endswith("_upper") and name.removesuffix("_upper") in table.column_names)]


def _labels(table: pa.Table) -> list[str]:
    """Each row's group keys in words: a bin as ``lower–upper`` (upper exclusive), keys joined by spaces."""
    keys = _keys(table)
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    labels = []
    for row in range(table.num_rows):
        parts = []
        for key in keys:
            value, upper = columns[key][row], columns.get(f"{key}_upper", [None] * table.num_rows)[row]
            parts.append("NULL" if value is None else f"{value}–{upper}" if upper is not None else str(value))
        labels.append(" ".join(parts) or "all rows")
    return labels


def _panel(ax: Axes, table: pa.Table, column: str, title: str) -> None:
    """Points at the values and bars of ± one standard error, one row per group, the first row on top."""
    shown = table.slice(0, MAX_ROWS)
    values, errors = shown.column(column).to_pylist(), shown.column(f"{column}_stddev").to_pylist()
    rows = [(label, value, error) for label, value, error in zip(_labels(shown), values, errors) if value is not None]
    positions = list(range(len(rows)))[::-1]
    ax.errorbar([value for _, value, _ in rows], positions, xerr=[error or 0.0 for _, _, error in rows],
                fmt="o", capsize=3)
    ax.set_yticks(positions, [label for label, _, _ in rows])
    more = f" (first {MAX_ROWS} of {table.num_rows} rows)" if table.num_rows > MAX_ROWS else ""
    ax.set_title(title + more, loc="left", fontsize=10)
    ax.set_xlabel("value ± one standard error")
