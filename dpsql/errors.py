"""The dpsql exception tree.

Every dpsql error derives from :class:`DpsqlError` and also from its nearest PEP 249 class, so
code written against any DB-API driver catches it where it expects to.
"""

from __future__ import annotations


class Warning(Exception):  # noqa: N818 - the name PEP 249 requires
    """PEP 249 ``Warning``: important warnings such as data truncation."""


class Error(Exception):
    """PEP 249 ``Error``: the base of every error raised by dpsql."""


class InterfaceError(Error):
    """PEP 249: an error in the database interface rather than the database."""


class DatabaseError(Error):
    """PEP 249: an error related to the database."""


class DataError(DatabaseError):
    """PEP 249: a problem with the processed data (value out of range, division by zero...)."""


class OperationalError(DatabaseError):
    """PEP 249: an error in the database's operation, not necessarily under the caller's control."""


class IntegrityError(DatabaseError):
    """PEP 249: the relational integrity of the database is affected."""


class InternalError(DatabaseError):
    """PEP 249: the database met an internal error."""


class ProgrammingError(DatabaseError):
    """PEP 249: a programming error (bad SQL, wrong number of parameters, bad arguments)."""


class NotSupportedError(DatabaseError):
    """PEP 249: a method or database API was used that the database does not support."""


class DpsqlError(Error):
    """Root of dpsql's own errors; each subclass also derives from a PEP 249 class."""


class DpsqlWarning(UserWarning):
    """Legal but unusual input, such as epsilon above 5 (issued with ``warnings.warn``)."""


class PrivacyParameterError(DpsqlError, ProgrammingError, ValueError):
    """A privacy parameter (epsilon, rho, delta, a noise scale) is not acceptable."""


class ShapeError(DpsqlError, ProgrammingError, ValueError):
    """Matrices or vectors whose shapes do not fit together."""


class UnsupportedStrategyError(DpsqlError, NotSupportedError, ValueError):
    """A strategy cannot answer a workload (the support condition W A⁺ A = W fails)."""


class DomainTooLargeError(DpsqlError, NotSupportedError, ValueError):
    """An operation would need a dense matrix over a domain larger than the configured limit."""


class PlanningLimitError(DpsqlError, NotSupportedError):
    """Planning a batch ran out of memory or recursion depth; nothing was charged."""


class SqlSyntaxError(DpsqlError, ProgrammingError):
    """The batch text is not valid SQL; the message gives the line and column."""


class UnsupportedQueryError(DpsqlError, NotSupportedError):
    """A SQL construct dpsql does not answer privately; the message names it and its position."""


class SchemaError(DpsqlError, ProgrammingError):
    """The schema is invalid, or a query refers to something the schema does not declare."""


class BudgetExhaustedError(DpsqlError, OperationalError):
    """A batch costs more privacy budget than is left; nothing was run or charged."""


class ParameterError(DpsqlError, ProgrammingError):
    """The qmark parameters do not match the batch's ? placeholders, or a value cannot be bound."""


class BackendError(DpsqlError, OperationalError):
    """The database failed while dpsql ran its generated query; nothing was released."""


class InvalidQueryError(DpsqlError, ProgrammingError):
    """Well-formed SQL that dpsql cannot answer as written (for example an output name used twice)."""


class LedgerError(DpsqlError, OperationalError):
    """The privacy ledger is missing, unreadable, corrupted or not a dpsql ledger: nothing is answered."""


class BudgetNotSetError(LedgerError):
    """No total budget is recorded for the dataset (or analyst): the owner must run ``dpsql budget set``."""
