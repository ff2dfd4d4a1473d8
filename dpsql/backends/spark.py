"""The Apache Spark adapter: the cell queries of :mod:`dpsql.backends.sql_backend` on a Spark session.

The one generated aggregate query per batch runs where the data live, on a classic
``pyspark.sql.SparkSession`` (local or a cluster) or a Spark Connect session (``sc://host:port``,
e.g. Databricks Connect); only one number per cell comes back to the driver, which holds the
ledger and adds the noise. Where rows go, how measures are clamped and how the privacy-unit cap
picks rows is described in :mod:`dpsql.backends.sql_backend`, and is the same as on DuckDB, so
the same schema gives the same data vector on both (``tests/backends/test_backend_spark.py`` checks it).

What is Spark's own here:

- **Catalog only.** A declared table is a table or view of the session's catalog (a temporary
  view, ``db.people`` or ``catalog.db.people``), checked with ``Catalog.getTable`` and described
  from its schema; no row is read. Spark's "SQL on files" form (``parquet.`/path```) is not a
  catalog entry, so it is refused; and the generated SQL names every catalog table by its fully
  qualified three-part name (``catalog.db.name``), which Spark never reads as a file path (only a
  two-part name can be one).
- **ANSI mode.** With ``spark.sql.ansi.enabled=false`` an overflowing BIGINT sum wraps around and
  an overflowing DECIMAL sum drops the row, silently: the sensitivity bound would no longer hold.
  dpsql therefore sets ANSI mode on for the duration of each of its queries and puts the user's
  value back afterwards (:meth:`SparkBackend.run`); where the session refuses the setting, the
  query is not run. The setting is session-wide while the query runs: other queries that the
  same session runs concurrently see ANSI mode on during that time.
- **DataFrames** passed as tables are registered as temporary views with generated names
  (``dpsql_<name>_<hex>``) and dropped by :meth:`SparkBackend.close`. Only DataFrames built from
  data on the driver (``createDataFrame`` from Arrow, pandas, ...) count as in memory.

pyspark is imported only inside the methods that need it: importing this module, or
``dpsql.backends``, imports no Spark package.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dpsql.backends.cell_sql import DatabaseColumn, table_ref
from dpsql.backends.sql_backend import SqlBackend
from dpsql.backends.sql_dialects import SPARK
from dpsql.errors import DataError, InterfaceError, OperationalError, ProgrammingError, SchemaError

#: The session settings each query runs under, and why: ANSI mode makes an overflow an error
#: instead of a wrapped or dropped sum.
_QUERY_SETTINGS: Mapping[str, str] = {"spark.sql.ansi.enabled": "true"}
#: Spark error conditions (SQLSTATE class 22, data exceptions) that mean an arithmetic overflow.
_OVERFLOW_STATES = ("22003",)


# ==================================================================================== detection
def _has_class(obj: object, names: tuple[tuple[str, str], ...]) -> bool:
    return any((getattr(c, "__module__", ""), getattr(c, "__name__", "")) in names for c in type(obj).__mro__)


def is_spark_session(obj: object) -> bool:
    """Whether ``obj`` is a classic or Spark Connect ``SparkSession`` (checked by class, without importing pyspark)."""
    return _has_class(obj, (("pyspark.sql.session", "SparkSession"), ("pyspark.sql.connect.session", "SparkSession"),
                            ("pyspark.sql.classic.session", "SparkSession")))


def is_spark_dataframe(obj: object) -> bool:
    """Whether ``obj`` is a classic or Spark Connect ``DataFrame`` (checked by class, without importing pyspark)."""
    return _has_class(obj, (("pyspark.sql.dataframe", "DataFrame"),))


# ====================================================================================== backend
class SparkBackend(SqlBackend):
    """Runs the data-vector queries of the declared tables on a Spark session.

    Args:
        session: a classic ``pyspark.sql.SparkSession`` or a Spark Connect session. It stays the
            caller's: :meth:`close` does not stop it (a session opened by :meth:`remote` is stopped).
        tables: declared table name -> a catalog reference (``"people"``, ``"db.people"``,
            ``"catalog.db.people"``), a DataFrame of ``session``, or a ``pyarrow.Table`` (made a
            DataFrame with ``createDataFrame``, so NaN stays NaN). DataFrames are registered as
            temporary views until :meth:`close`. A declared table not listed is looked up by its
            name, except when every listed table is in memory: then only those are read.

    Raises:
        ProgrammingError: ``session`` is not a SparkSession, or a table is neither a name nor a
            DataFrame of that session.
    """

    sql_dialect = SPARK

    def __init__(self, session: Any, tables: Mapping[str, Any] | None = None) -> None:
        if not is_spark_session(session):
            raise ProgrammingError(f"SparkBackend needs a pyspark SparkSession (classic or Spark Connect); got "
                                   f"{type(session).__name__}. Use SparkBackend.remote('sc://host:port') for a "
                                   "Spark Connect server.")
        self._session: Any = session
        self._owns_session = False
        self._views: dict[str, str] = {}  # declared name -> generated temporary view
        self._frames: dict[str, Any] = {}  # declared name -> DataFrame
        references: dict[str, str] = {}
        local = []
        for name, where in (tables or {}).items():
            if isinstance(where, str):
                references[str(name)] = where
            else:
                self._frames[str(name).lower()], is_local = _frame(session, str(name), where)
                local.append(is_local)
        try:
            for name, frame in self._frames.items():
                view = f"dpsql_{re.sub(r'[^a-z0-9_]', '_', name)}_{uuid.uuid4().hex}"
                frame.createOrReplaceTempView(view)
                self._views[name] = view
        except BaseException:
            self.close()
            raise
        super().__init__({**references, **self._views})
        self._local = bool(local) and not references and all(local)

    @classmethod
    def remote(cls, url: str, tables: Mapping[str, Any] | None = None) -> SparkBackend:
        """A backend over a new Spark Connect session to ``url`` (``sc://host:port``), stopped by :meth:`close`.

        Needs the Spark Connect client (``pip install "dpsql[spark-connect]"``, or pyspark with
        its ``connect`` extra). Tables are catalog names or ``pyarrow.Table`` data (sent to the
        server as a local relation); a DataFrame would belong to another session.

        Raises:
            ProgrammingError: ``url`` is not an ``sc://`` URL, or the client is not installed.
            OperationalError: the session could not be created (e.g. no server at ``url``).
        """
        if not isinstance(url, str) or not url.startswith("sc://"):
            raise ProgrammingError(f"A Spark Connect URL starts with 'sc://' (sc://host:port); got {url!r}.")
        try:
            from pyspark.sql import SparkSession
            session = SparkSession.builder.remote(url).create()
        except ImportError as err:
            raise ProgrammingError(f"The Spark Connect client is not installed ({err}); install it with "
                                   "pip install \"dpsql[spark-connect]\".") from None
        except Exception as err:  # the client's own errors name the address, not data
            raise OperationalError(f"Cannot open a Spark Connect session at {url}: {err}") from None
        try:
            backend = cls(session, tables)
        except BaseException:
            session.stop()
            raise
        backend._owns_session = True
        return backend

    # ------------------------------------------------------------------------ the adapter's part
    @property
    def session(self) -> Any:
        """The SparkSession; InterfaceError after :meth:`close`."""
        if self._session is None:
            raise InterfaceError("This SparkBackend is closed; create a new one.")
        return self._session

    @property
    def in_memory(self) -> bool:
        """True only when every table is data held by this process: a ``pyarrow.Table`` passed in, or a
        DataFrame whose analysed plan is a ``LocalRelation`` (``DataFrame.isLocal()``) reading no
        file (``inputFiles()`` empty), as classic ``createDataFrame`` from Arrow or pandas builds.

        Catalog tables, views over files, and any DataFrame whose plan is more than a local
        relation (a projection, a join, an RDD; on Spark Connect every DataFrame, whose local
        relations arrive renamed) are not: their budget is the ledger's.
        """
        return self._local

    @property
    def identity(self) -> str:
        """What the ledger binds the dataset to: ``""`` when :attr:`in_memory`, else ``"spark:"`` and a
        sorted list of each table's catalog-qualified name (temporary views by name), each
        non-local DataFrame's input files (a SHA-256 of their sorted paths), and the session's
        current catalog and database (where unlisted names are looked up).

        It binds names, not contents: Spark tables have no file identity that can be checked
        cheaply, so a table rewritten in place, a view redefined under the same name, or another
        cluster's catalog with the same names is not detected.
        """
        if self._local:
            return ""
        catalog = self.session.catalog
        parts = [f"current={catalog.currentCatalog()}.{catalog.currentDatabase()}"]
        for name, where in sorted(self._tables.items()):
            frame = self._frames.get(name)
            if frame is None:
                parts.append(f"{name}={self._qualified(table_ref(where), name).sql(SPARK.name)}")
            else:
                files = sorted(frame.inputFiles())
                digest = hashlib.sha256("\n".join(files).encode()).hexdigest()
                parts.append(f"{name}=dataframe:{len(files)} files:sha256:{digest}")
        return "spark:" + ";".join(parts)

    def table_reference(self, table_name: str) -> exp.Table:
        """The catalog-qualified reference of the declared table (``catalog.db.name``; a temporary view by
        its name), so that no reference can be read as a file path.

        Raises:
            SchemaError: the table is not a table or view of the session's catalog, or (when every
                listed table is an in-memory DataFrame) it is not one of them.
        """
        name = table_name.lower()
        if self._local and name not in self._views:
            raise SchemaError(f"Table '{table_name}' is declared in the schema (tables.{table_name}) but not among the "
                              "DataFrames passed in tables=, which are all in memory: pass it as a DataFrame too "
                              "(or name catalog tables only, with a ledger).")
        return self._qualified(super().table_reference(table_name), table_name)

    def describe(self, reference: exp.Table) -> dict[str, DatabaseColumn]:
        """The columns of the catalog table or view at ``reference``, from its schema (no row is read);
        type names are Spark's ``simpleString`` (``bigint``, ``decimal(10,2)``, ``timestamp_ntz``, ...)."""
        qualified, session = self._qualified(reference, reference.name), self.session
        try:
            fields = session.table(qualified.sql(SPARK.name)).schema.fields
        except Exception as err:
            raise _failure(err, f"describe table {qualified.sql(SPARK.name)}") from None
        return {str(f.name).lower(): DatabaseColumn(str(f.name), f.dataType.simpleString(),
                                                    SPARK.type_family(f.dataType.simpleString())) for f in fields}

    def run(self, sql: str) -> pa.Table:
        """Run generated SQL with ANSI mode on (set for this query, the user's value restored after) and
        return the result as Arrow (``DataFrame.toArrow``).

        Raises:
            DataError: an arithmetic overflow (ANSI mode turns it into an error; the generated
                sums are DECIMAL(38, 0) over values below 2^53 and cannot reach it).
            OperationalError: the session refused ANSI mode (nothing was run), or Spark failed.
                Analysis and parse errors (about the SQL and the catalog) are shown; any other
                message may quote data and is withheld; nothing is chained. PySpark's own loggers
                of failed queries (which print the whole message) are silenced while it runs.
        """
        session = self.session
        with _settings(session, _QUERY_SETTINGS), _quiet_query_logs():
            try:
                return session.sql(sql).toArrow()
            except Exception as err:
                raise _failure(err, "run the cell query") from None

    def close(self) -> None:
        """Drop the temporary views registered for DataFrames and stop a session opened by :meth:`remote`;
        a session passed in stays open. Later calls raise InterfaceError."""
        session, self._session = self._session, None
        if session is None:
            return
        try:
            for view in self._views.values():
                session.catalog.dropTempView(view)
        finally:
            if self._owns_session:
                session.stop()

    # ------------------------------------------------------------------------------- internals
    def _qualified(self, reference: exp.Table, declared: str) -> exp.Table:
        """``reference`` as the catalog names it: ``catalog.db.name``, or a temporary view's name.

        Raises:
            SchemaError: it is not a table or view of the catalog (e.g. Spark's ``format.`path```).
        """
        text, catalog = reference.sql(SPARK.name), self.session.catalog
        try:
            table = catalog.getTable(text)
        except Exception as err:
            if _is_analysis(err):
                raise SchemaError(f"Table '{declared}' is declared in the schema (tables.{declared}) as {text}, "
                                  "which is not a table or view in the Spark session's catalog "
                                  f"({_condition(err)}; dpsql reads only catalog tables and views, never files such "
                                  "as parquet.`/path`). Create the table or a view, or map the declared name to one "
                                  "with tables={...}.") from None
            raise _failure(err, f"look up table {text} in the catalog") from None
        namespace = list(table.namespace or [])
        if table.isTemporary and not namespace:
            return exp.Table(this=exp.to_identifier(table.name, quoted=True))
        parts = [p for p in [table.catalog, *namespace] if p] + [table.name]
        if len(parts) > 3:
            raise SchemaError(f"Table '{declared}' ({text}) is in a nested namespace ({'.'.join(parts[:-1])}); dpsql "
                              "reads catalog.database.table names: create a view in a one-level database.")
        identifiers = [exp.to_identifier(p, quoted=True) for p in parts]
        return exp.Table(this=identifiers[-1], db=identifiers[-2] if len(parts) > 1 else None,
                         catalog=identifiers[-3] if len(parts) > 2 else None)


def _frame(session: Any, name: str, where: object) -> tuple[Any, bool]:
    """(the DataFrame of ``session`` for ``tables[name]``, whether its rows are held by this process).

    A ``pyarrow.Table`` is loaded with ``createDataFrame`` (Arrow in, so NaN is kept): in memory
    by construction. A DataFrame must belong to ``session``; it is in memory when :func:`_is_local`.
    """
    if isinstance(where, pa.Table):
        try:
            return session.createDataFrame(where), True
        except Exception as err:
            raise _failure(err, f"load tables['{name}'] from Arrow") from None
    if not is_spark_dataframe(where):
        raise ProgrammingError(f"tables['{name}'] must be a table name ('db.people'), a Spark DataFrame or a "
                               f"pyarrow.Table; got {type(where).__name__}.")
    frame: Any = where
    if frame.sparkSession is not session:
        raise ProgrammingError(f"tables['{name}'] is a DataFrame of another SparkSession; build it with the session "
                               "passed to SparkBackend (or pass a pyarrow.Table).")
    return frame, _is_local(frame)


def _is_local(frame: Any) -> bool:
    """Whether the DataFrame's analysed plan is a relation of driver-held rows reading no file."""
    return bool(frame.isLocal()) and not frame.inputFiles()


@contextmanager
def _settings(session: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Run the block with the session's ``settings``, restoring each value that was changed.

    Raises:
        OperationalError: the session refuses a setting (then nothing runs).
    """
    changed: dict[str, str] = {}
    try:
        for key, value in settings.items():
            try:
                before = str(session.conf.get(key)).lower()
                if before != value:
                    session.conf.set(key, value)
                    changed[key] = before
            except Exception as err:
                raise OperationalError(f"dpsql runs Spark queries only with {key}={value} (so that an overflow is an "
                                       f"error, never a wrapped sum), and the session refused it: {err}") from None
        yield
    finally:
        for key, before in changed.items():
            session.conf.set(key, before)


def _condition(err: BaseException) -> str:
    """Spark's error condition (e.g. TABLE_OR_VIEW_NOT_FOUND), a name that quotes nothing."""
    get = getattr(err, "getCondition", None) or getattr(err, "getErrorClass", None)
    return str(get() if get is not None else type(err).__name__)


#: The loggers PySpark writes a failed query's whole message to (with its SQL context) when it raises.
_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


@contextmanager
def _quiet_query_logs() -> Iterator[None]:
    """Disable PySpark's query-context loggers for the block: their messages may quote data values."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # a PySpark without them logs nothing of the kind
        yield
        return
    loggers = [PySparkLogger.getLogger(name) for name in _QUERY_LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, before):
            logger.disabled = disabled


def _is_analysis(err: BaseException) -> bool:
    from pyspark.errors import AnalysisException
    return isinstance(err, AnalysisException)


def _failure(err: BaseException, doing: str) -> Exception:
    """The dpsql error for a Spark failure while ``doing``: DataError for an arithmetic overflow,
    OperationalError otherwise, with Spark's message only where it describes SQL and the catalog."""
    from pyspark.errors import ArithmeticException, PySparkException
    state = err.getSqlState() if isinstance(err, PySparkException) else None
    if isinstance(err, ArithmeticException) or state in _OVERFLOW_STATES:
        return DataError(f"Spark could not {doing}: an arithmetic overflow ({state or 'ARITHMETIC_OVERFLOW'}); its "
                         "message is withheld because it may quote data values.")
    if _is_analysis(err):
        return OperationalError(f"Spark could not {doing}: {err}")
    return OperationalError(f"Spark could not {doing} ({type(err).__name__}); its message is withheld because it may "
                            "quote data values.")
