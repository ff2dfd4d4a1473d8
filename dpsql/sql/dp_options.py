"""BigQuery's differential privacy clause as a per-statement cost.

Google BigQuery ("Use differential privacy", 2023) writes the privacy parameters into the query::

    SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6) sex, COUNT(*) FROM people GROUP BY sex

dpsql reads the clause as the statement's cost and blanks it out of the text (spaces keep every
offset, so later errors still point into the text the analyst wrote); the rest is parsed as usual.

- ``epsilon`` alone (or ``delta = 0``): a pure ε-DP cost;
- ``epsilon`` and ``delta > 0``: the ρ-zCDP cost with the largest ρ that implies (ε, δ)-DP
  (:func:`dpsql.budget.accounting.rho_for_epsilon_delta`; Canonne, Kamath & Steinke 2020, Cor. 13);
- ``privacy_unit_column``: accepted when it names the table's declared privacy unit (the
  contribution bound is the schema's ``max_rows``; :func:`check_privacy_unit`, once the batch's
  table is known); ``max_groups_contributed`` and other options are refused, since dpsql bounds
  contributions per unit in the schema, not per query.

The batch is one joint release: its cost is the sequential composition of its statements' costs
(Σ ε, or Σ ρ with each ε counted as ε²/2), which is what answering them one by one would spend.
Either every statement of a batch carries the clause or none does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType  # type: ignore[attr-defined]  # re-exported there

from dpsql.budget.accounting import PrivacyCost, rho_for_epsilon_delta, sequential
from dpsql.errors import PrivacyParameterError, ProgrammingError, SqlSyntaxError
from dpsql.schema import Table
from dpsql.sql import ir
from dpsql.sql.source import Source, located, statement_ranges, tokenize

__all__ = ["StatementOptions", "batch_cost", "check_privacy_unit", "read_options"]

_KNOWN = ("epsilon", "delta", "privacy_unit_column")
_REFUSED = {"max_groups_contributed": "dpsql bounds each privacy unit's rows in the schema "
                                      "(privacy_unit.max_rows), the same for every query",
            "max_rows_contributed": "dpsql bounds each privacy unit's rows in the schema "
                                    "(privacy_unit.max_rows), the same for every query",
            "group_selection_strategy": "dpsql's groups come from the declared domains, never from the data"}


@dataclass(frozen=True, slots=True)
class StatementOptions:
    """The clause of one statement: its cost and the privacy unit column it names (if any)."""

    cost: PrivacyCost
    privacy_unit_column: str | None
    where: str  # "line L, col C" of the clause


def read_options(text: str) -> tuple[str, list[StatementOptions]]:
    """``text`` with every ``WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` after SELECT blanked out, and
    the options of each statement that had one (empty when none did).

    Raises:
        PrivacyParameterError: a missing or invalid epsilon/delta.
        SqlSyntaxError: an option given twice.
        ProgrammingError: an unknown or refused option, or a batch where only some statements carry it.

    >>> text, options = read_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.5) COUNT(*) FROM t")
    >>> text.split(), options[0].cost
    (['SELECT', 'COUNT(*)', 'FROM', 't'], PrivacyCost(epsilon=0.5, rho=None))
    """
    if "DIFFERENTIAL_PRIVACY" not in text.upper():
        return text, []
    try:
        tokens = tokenize(text)
    except TokenError:
        return text, []  # the parser reports the text's own error
    source = Source.of(text, tokens)
    blanked = list(text)
    found: list[StatementOptions | None] = []
    for first, last in statement_ranges(tokens):
        clause = _clause(tokens, first, last)
        if clause is None:
            found.append(None)
            continue
        start, end = clause
        found.append(_options(source, start, end))
        for offset in range(tokens[start].start, tokens[end].end + 1):
            if blanked[offset] not in "\n\r":
                blanked[offset] = " "
    if all(options is None for options in found):
        return text, []
    if any(options is None for options in found):
        raise ProgrammingError("some statements of the batch carry WITH DIFFERENTIAL_PRIVACY OPTIONS (...) and some "
                               "do not: the batch is one release, so give the clause on every statement (their costs "
                               "add up) or on none (and pass the cost to execute()). Nothing was charged.")
    return "".join(blanked), [options for options in found if options is not None]


def batch_cost(options: list[StatementOptions]) -> PrivacyCost:
    """The batch's cost: the sequential composition of its statements' costs."""
    return sequential(option.cost for option in options)


def check_privacy_unit(options: Sequence[StatementOptions], table: Table) -> None:
    """A ``privacy_unit_column`` option must name the table's declared privacy unit (the bound is the schema's)."""
    unit = table.privacy_unit
    for option in options:
        named = option.privacy_unit_column
        if named is not None and (unit.column is None or named.lower() != unit.column.lower()):
            declared = f"'{unit.column}' (max_rows = {unit.max_rows})" if unit.column else "each row (no unit column)"
            raise ProgrammingError(f"privacy_unit_column = {named} ({option.where}) is not the table's declared "
                                   f"privacy unit, which is {declared}. dpsql protects the unit the schema declares; "
                                   "drop the option or name that column. Nothing was charged.")


def _clause(tokens: tuple[Token, ...], first: int, last: int) -> tuple[int, int] | None:
    """Token indices (WITH, closing parenthesis) of the clause right after the statement's SELECT."""
    if last - first < 4 or tokens[first].token_type != TokenType.SELECT:
        return None
    words = [tokens[first + k].text.upper() for k in (1, 2, 3)]
    if words != ["WITH", "DIFFERENTIAL_PRIVACY", "OPTIONS"] or tokens[first + 4].token_type != TokenType.L_PAREN:
        return None
    depth = 0
    for index in range(first + 4, last + 1):
        depth += (tokens[index].token_type == TokenType.L_PAREN) - (tokens[index].token_type == TokenType.R_PAREN)
        if depth == 0:
            return first + 1, index
    return None  # unbalanced: the parser reports it


def _options(source: Source, start: int, end: int) -> StatementOptions:
    """Read ``name = value`` pairs between the parentheses of tokens start+3 .. end."""
    tokens = source.tokens
    span = source.token_span(start, end)
    values: dict[str, tuple[str, int]] = {}
    index = start + 4
    while index < end:
        pair = tokens[index:index + 3]
        if len(pair) < 3 or pair[1].token_type != TokenType.EQ:
            raise ProgrammingError(located("WITH DIFFERENTIAL_PRIVACY OPTIONS holds something other than "
                                           "name = value pairs", source.token_span(index, min(index + 2, end)),
                                           source, "Write e.g. OPTIONS (epsilon = 1, delta = 1e-6)."))
        name = pair[0].text.lower()
        value = pair[2].text
        if name in values:
            raise SqlSyntaxError(located(f"the differential privacy option {name} is given twice",
                                         source.token_span(index, min(index + 2, end)), source,
                                         f"Give {name} once. Nothing was charged."))
        if pair[2].token_type == TokenType.DASH and index + 3 < end:
            value, index = "-" + tokens[index + 3].text, index + 1
        values[name] = (value, index)
        index += 3
        if index < end and tokens[index].token_type == TokenType.COMMA:
            index += 1
    for name, (_, at) in values.items():
        if name in _REFUSED or name not in _KNOWN:
            reason = _REFUSED.get(name, f"dpsql reads {', '.join(_KNOWN)}")
            raise ProgrammingError(located(f"the differential privacy option {name} is not supported",
                                           source.token_span(at, at + 2), source, f"{reason}. Drop it."))
    if "epsilon" not in values:
        raise PrivacyParameterError(located("WITH DIFFERENTIAL_PRIVACY OPTIONS has no epsilon", span, source,
                                            "Write e.g. OPTIONS (epsilon = 1) or OPTIONS (epsilon = 1, delta = 1e-6)."))
    text, at = values["epsilon"]
    epsilon = _number(text, "epsilon", source.token_span(at, at + 2), source)
    delta = 0.0
    if "delta" in values:
        text, at = values["delta"]
        delta = _number(text, "delta", source.token_span(at, at + 2), source)
    if epsilon <= 0 or not 0 <= delta < 1:
        raise PrivacyParameterError(located(f"OPTIONS (epsilon = {epsilon:g}, delta = {delta:g}) is not a cost", span,
                                            source, "epsilon must be > 0 and delta in [0, 1), e.g. delta = 1e-6."))
    cost = PrivacyCost(epsilon=epsilon) if delta == 0 else PrivacyCost(rho=rho_for_epsilon_delta(epsilon, delta=delta))
    unit = values.get("privacy_unit_column")
    return StatementOptions(cost=cost, privacy_unit_column=None if unit is None else unit[0].strip('"'),
                            where=span.describe())


def _number(text: str, name: str, span: ir.Span, source: Source) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PrivacyParameterError(located(f"the option {name} = {text} is not a number", span, source,
                                            f"Write {name} as a number, e.g. {name} = 1.")) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise PrivacyParameterError(located(f"the option {name} = {text} is not finite", span, source,
                                            f"Write {name} as a finite number."))
    return value
