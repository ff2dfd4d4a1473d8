"""What an analyst asks of a batch, whatever the entry point, and that request read once.

A :class:`Request` holds the SQL text and everything said with it: parameters, a cost
(``epsilon=``/``rho=``, BigQuery's ``WITH DIFFERENTIAL_PRIVACY OPTIONS`` clause in the text, or the
entry point's default) or an accuracy target (``max_stddev``, ``max_relative_stddev``, ``family``),
statement weights, post-processing, reuse and a progress callback. ``Cursor.execute``/``explain``,
``dpsql run``/``explain`` and ``dpsql serve``'s session each build one and hand it to
:mod:`dpsql.engine.pipeline`.

:func:`resolve` reads it once, in this order: the cost or the target (refusals about the cost come
first, before anything is read), then the kept releases (only with reuse), then the batch is parsed
(``sql.parse``, public joins rewritten) and split into statements kept releases answer for free and
statements to measure (:mod:`dpsql.engine.reuse.free`). Every later step reads the :class:`Resolved`
value: the text is tokenized for the clause once (:attr:`Request.clause`) and parsed once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.plan.prepare import read_batch
from dpsql.engine.reuse import accuracy_target
from dpsql.engine.reuse.free import Split, split_batch
from dpsql.errors import PrivacyParameterError, ProgrammingError
from dpsql.releases.information import KeptInformation
from dpsql.releases.kept import KeptMeasurement
from dpsql.schema import Schema
from dpsql.sql import ir
from dpsql.sql.dp_options import StatementOptions, batch_cost, read_options

#: Why a batch without any cost is refused (``Cursor.execute``; ``dpsql run`` and ``dpsql serve`` say it
#: in their own words first, see :meth:`Request.states_cost`).
NO_COST = ("give the batch's cost as epsilon= (pure ε-DP) or rho= (ρ-zCDP), or open the connection with "
           "dpsql.connect(..., epsilon_per_batch=...) (or rho_per_batch=) so that execute(sql) without a cost, and "
           "PEP 249 tools such as pandas.read_sql, charge that cost per call. Nothing was charged.")


@dataclass(frozen=True, kw_only=True, eq=False)
class Request:
    """A batch to answer or explain, as the analyst asked for it.

    ``epsilon``/``rho`` give the cost; without them, BigQuery's clause in the text does, else
    ``default_cost`` (``connect(epsilon_per_batch=...)``, a session's ``SET dpsql.epsilon``).
    ``max_stddev``/``max_relative_stddev`` (with ``family``) ask for the least cost meeting an
    accuracy target instead (:mod:`dpsql.engine.reuse.accuracy_target`). ``weights``, ``postprocess``,
    ``reuse`` and ``progress`` are as ``Cursor.execute`` documents them.
    """

    operation: str
    parameters: Sequence[object] | None = None
    epsilon: float | None = None
    rho: float | None = None
    default_cost: PrivacyCost | None = None
    max_stddev: float | Sequence[float | None] | None = None
    max_relative_stddev: float | Sequence[float | None] | None = None
    family: str | None = None
    weights: Sequence[float] | None = None
    postprocess: Sequence[str] = ()
    reuse: bool = True
    progress: Callable[[str], None] | None = None

    @property
    def target(self) -> accuracy_target.TargetRequest:
        """The accuracy target asked for (``asked`` is false when there is none)."""
        return accuracy_target.TargetRequest(max_stddev=self.max_stddev, max_relative_stddev=self.max_relative_stddev,
                                       family=self.family)

    @cached_property
    def clause(self) -> tuple[str, list[StatementOptions]]:
        """The text with every ``WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` blanked out, and its statements'
        options (:func:`dpsql.sql.dp_options.read_options`), read once; a clause's mistake raises here."""
        if not isinstance(self.operation, str):
            return self.operation, []  # the parser says what the text should be
        return read_options(self.operation)

    def states_cost(self) -> bool:
        """Whether the request gives the batch's cost or a target: epsilon= or rho=, BigQuery's clause, a
        default cost, or max_stddev/max_relative_stddev. ``dpsql run`` and ``dpsql serve`` ask this first,
        to say in their own words how to give a cost; a clause's mistake raises (see :attr:`clause`)."""
        return (self.epsilon is not None or self.rho is not None or bool(self.clause[1])
                or self.default_cost is not None or self.target.given)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """A request read once: the text parsed, the cost or target, and the batch split by reuse."""

    request: Request
    options: tuple[StatementOptions, ...]  # the clause of each statement (none without one)
    cost: PrivacyCost | None  # the batch's cost; None under a target (its least cost is found once split)
    target: accuracy_target.TargetRequest | None  # the accuracy target, or None for a cost
    kept: Sequence[KeptMeasurement]  # the kept measurements the split read (none without reuse)
    split: Split  # the parsed batch (``split.batch``), its free and its measured statements

    @property
    def batch(self) -> ir.Batch:
        """The parsed batch, its joins with public tables rewritten (every statement, free or measured)."""
        return self.split.batch


def resolve(request: Request, schema: Schema, kept: Callable[[], Sequence[KeptMeasurement]],
            cache: KeptInformation) -> Resolved:
    """Read ``request`` once: its cost or target, then (with reuse) the kept measurements ``kept()``,
    then the batch, parsed and split into free and measured statements (no data read, nothing charged).
    ``cache``: the release store's kept information."""
    text, options, cost, target = _priced(request)
    found = kept() if request.reuse else []
    batch = read_batch(text, request.parameters, schema)
    split = split_batch(batch, schema, found, target, cost=cost, weights=request.weights, cache=cache,
                        progress=request.progress)
    return Resolved(request=request, options=tuple(options), cost=cost, target=target, kept=found, split=split)


def _priced(request: Request) -> tuple[str, list[StatementOptions], PrivacyCost | None,
                                       accuracy_target.TargetRequest | None]:
    """The text to parse, its statements' options, and the batch's cost or its accuracy target.

    Under a target, the text must give no cost (epsilon=, rho= or the clause). Else BigQuery's
    clause is the cost, blanked out of the text; else the cost given, else the default."""
    target = request.target
    if target.asked:
        if not target.given:
            raise ProgrammingError("family= chooses the cost an accuracy target is met with; give max_stddev= (or "
                                   "max_relative_stddev=) with it. Nothing was charged.")
        text, options = request.clause
        given = ([f"WITH DIFFERENTIAL_PRIVACY OPTIONS ({options[0].where})"] if options else []) \
            + ["epsilon="] * (request.epsilon is not None) + ["rho="] * (request.rho is not None)
        if given:
            raise ProgrammingError(f"the batch gives both an accuracy target and a cost ({', '.join(given)}): the "
                                   "target's least cost is the cost. Keep one. Nothing was charged.")
        target.checked_family()
        return text, options, None, target
    text, options = request.clause  # (the operation itself, no options, when it is no string)
    if not options:
        return request.operation, [], _cost(request), None
    if request.epsilon is not None or request.rho is not None:
        raise ProgrammingError("the batch gives its cost twice: WITH DIFFERENTIAL_PRIVACY OPTIONS "
                               f"({options[0].where}) and execute(epsilon=/rho=). Keep one. Nothing was charged.")
    return text, options, batch_cost(options), None


def _cost(request: Request) -> PrivacyCost:
    """The cost given, else the default; PrivacyParameterError if neither."""
    if request.epsilon is None and request.rho is None:
        if request.default_cost is not None:
            return request.default_cost
        raise PrivacyParameterError(NO_COST)
    return PrivacyCost(epsilon=request.epsilon, rho=request.rho)
