"""dpsql: differentially private aggregate SQL, answered jointly with the matrix mechanism.

This is the PEP 249 module: ``dpsql.connect(...)``, ``apilevel``, ``threadsafety``, ``paramstyle``
and the exception classes. The math layers (workloads, strategies, accuracy, noise, mechanism)
import only numpy and scipy; the database shell (``connect``, ``Connection``, ``Cursor``) is
imported lazily so that importing the math never loads DuckDB or Arrow.
"""

from typing import Any

from dpsql import noise, strategies
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.errors import (
    BackendError,
    BudgetExhaustedError,
    BudgetNotSetError,
    DatabaseError,
    DataError,
    DomainTooLargeError,
    DpsqlError,
    DpsqlWarning,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    InvalidQueryError,
    LedgerError,
    NotSupportedError,
    OperationalError,
    ParameterError,
    PlanningLimitError,
    PrivacyParameterError,
    ProgrammingError,
    SchemaError,
    ShapeError,
    SqlSyntaxError,
    UnsupportedQueryError,
    UnsupportedStrategyError,
    Warning,
)
from dpsql.matrix import workloads
from dpsql.planning import accuracy, mechanism
from dpsql.types import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)

__version__ = "0.1.0"

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

_SHELL = {"connect", "Connection", "Cursor"}


def __getattr__(name: str) -> Any:
    if name in _SHELL:
        from dpsql import dbapi

        return getattr(dbapi, name)
    raise AttributeError(f"module 'dpsql' has no attribute {name!r}")


__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "Date", "DateFromTicks", "Time", "TimeFromTicks",
    "Timestamp", "TimestampFromTicks",
    "Budget", "BudgetExhaustedError", "Connection", "Cursor", "PrivacyCost", "SchemaError", "SqlSyntaxError",
    "UnsupportedQueryError", "connect",
    "BackendError", "BudgetNotSetError", "DataError", "DatabaseError", "DomainTooLargeError", "DpsqlError",
    "DpsqlWarning", "Error", "IntegrityError", "InterfaceError", "InternalError", "InvalidQueryError", "LedgerError",
    "NotSupportedError", "OperationalError", "ParameterError", "PlanningLimitError", "PrivacyParameterError",
    "ProgrammingError", "ShapeError", "UnsupportedStrategyError", "Warning", "accuracy", "apilevel", "mechanism",
    "noise", "paramstyle", "strategies", "threadsafety", "workloads",
]
