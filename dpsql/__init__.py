"""dpsql: differentially private aggregate SQL, answered jointly with the matrix mechanism.

The math layers (workloads, strategies, error, noise, mechanism) import only numpy and scipy.
The module also carries the PEP 249 globals and exception classes.
"""

from dpsql import error, mechanism, noise, strategies, workloads
from dpsql.errors import (
    DatabaseError,
    DataError,
    DpsqlError,
    DpsqlWarning,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PrivacyParameterError,
    ProgrammingError,
    ShapeError,
    UnsupportedStrategyError,
    Warning,
)

__version__ = "0.1.0"

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

__all__ = [
    "DataError", "DatabaseError", "DpsqlError", "DpsqlWarning", "Error", "IntegrityError", "InterfaceError",
    "InternalError", "NotSupportedError", "OperationalError", "PrivacyParameterError", "ProgrammingError",
    "ShapeError", "UnsupportedStrategyError", "Warning", "apilevel", "error", "mechanism", "noise",
    "paramstyle", "strategies", "threadsafety", "workloads",
]
