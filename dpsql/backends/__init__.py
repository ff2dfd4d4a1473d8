"""Backends: where the data live. The engine sees them only through the :class:`Backend` protocol.

:mod:`dpsql.backends.base` declares the protocol and the results it returns (:class:`CellData`,
:class:`MeasureProfile`); importing it, or this package, imports no database package.
:mod:`dpsql.backends.duckdb` (``DuckDBBackend``) is the implementation dpsql ships; import it from
there.
"""

from __future__ import annotations

from dpsql.backends.base import Backend, CellData, MeasureProfile, Squared, file_identity

__all__ = ["Backend", "CellData", "MeasureProfile", "Squared", "file_identity"]
