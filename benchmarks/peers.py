"""dpsql against SmartNoise SQL on the same batches: accuracy, CPU time, refusals and error bars.

Both systems answer the same SQL at the same total privacy cost, pure ε-DP, ε = 1 per batch, with
the same public bounds and domains, and are scored against DuckDB's exact answers:

- dpsql answers each batch jointly (one ``cursor.execute`` of the whole batch at ``epsilon=1``)
  with a seeded noise source per batch (in-memory data and budget; ``--seed``), with ``reuse=False``:
  every trial is a new release at ε = 1, as each of SmartNoise's is. (With reuse, a later trial
  answers statements from the earlier trials' kept releases, so its errors repeat theirs: a
  statement's RMSE over trials is then a few draws, not twenty, and its coverage is not a test.)
- SmartNoise SQL (``pip install 'dpsql[bench]'``) answers statement by statement, as a
  per-query system must: each of the N statements costs ε/N in total, split evenly over the
  statement's noise mechanisms (an AVG is a SUM and a COUNT, so two mechanisms at ε/(2N) each;
  checked by basic composition of SmartNoise's own per-mechanism costs). Metadata:
  ``row_privacy``, ``censor_dims: False`` (no thresholding, so no δ), ``clamp_counts: False``
  (unbiased counts), the default mechanisms (Laplace for counts and integer sums, δ = 0; its
  odometer's 1e-15 "δ" is a composition tolerance, not a mechanism's). OpenDP draws from the
  operating system, so SmartNoise's trials are not seeded.

Scoring: every answer cell is matched by its group key. A group that a system does not return
(SmartNoise returns only the groups present in the data; dpsql every declared group), a NULL
answer (dpsql's AVG where the noisy count is small) and every cell of a refused statement counts
as answered 0 for COUNT and SUM and as the midpoint of the measure's public bounds for AVG (the
best data-independent guess; 0 would make one NULL dominate an AVG's RMSE); the counts of such
cells are printed. A group absent from the data has exact COUNT and SUM 0 and no exact AVG (such
AVG cells are not scored).

Prints, per batch: RMSE of each system and their ratio (dpsql / SmartNoise) by kind (count, sum,
avg; and per measure where a kind spans several), over all cells and trials, with the RMSE each
system predicts (dpsql from its reported stddevs, SmartNoise from its Laplace scales: √2·b per
COUNT/SUM answer), whose ratio is free of trial noise; CPU seconds per batch (``time.process_time``: all threads of
this process, BLAS and DuckDB included; loading the data into DuckDB and into SmartNoise's SQLite
is not counted for either) for SmartNoise (median over trials) and for dpsql cold (a fresh
``DPSQL_CACHE_DIR`` and a new connection: the first trial) and warm (the same batch again on that
connection: median of the other trials), with the ratios; refusals per system (exception class
and the first line of its message); the coverage of dpsql's ±1.96·stddev intervals (the fraction
of its answers whose exact value lies inside). Ends with one markdown table for a closing note.

Data: PUMS.csv (1,000 rows) and adult.csv (48,842 rows) from ``--data`` (default: ../shared/data
beside the repository, else /work/shared/data); where a file is absent a table of the same shape
and domains is generated (seeded) and the output says so. No data is shipped with dpsql.

Run: python benchmarks/peers.py [--trials 20] [--batches 1,2,7] [--max-seconds 40] [--data DIR]
Each system stops adding trials to a batch once it has spent --max-seconds there (dpsql runs at
least a cold and a warm trial), so the default run stays near ten minutes on two cores.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from _machine import header

import dpsql
from dpsql.noise import SeededRandomSource

EPSILON = 1.0
Z95 = 1.96
KINDS = ("count", "sum", "avg")
Key = tuple[str, ...]


# ----------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Dataset:
    """A table with its dpsql schema, its SmartNoise metadata and the AVG fallback per measure."""

    name: str
    frame: Any  # pandas.DataFrame
    schema: dict[str, Any]
    metadata: dict[str, Any]
    midpoints: dict[str, float]
    source: str

    @property
    def table(self) -> str:
        return self.name.lower()

    @property
    def sn_table(self) -> str:
        return f"{self.name}.{self.name}"


def _integer(lower: int, upper: int, bin_width: int, resolution: int | None = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "integer", "lower": lower, "upper": upper, "bin_width": bin_width,
                            "out_of_domain": "exclude"}
    if resolution is not None:
        spec["resolution"] = resolution
    return spec


def _categorical(values: Sequence[int]) -> dict[str, Any]:
    return {"type": "categorical", "values": list(values), "out_of_domain": "exclude"}


def _dataset(name: str, frame: Any, columns: dict[str, dict[str, Any]], source: str) -> Dataset:
    """dpsql schema from ``columns``; SmartNoise metadata with the same bounds (grouping columns as
    strings, as in SmartNoise's own PUMS.yaml)."""
    sn_columns: dict[str, Any] = {}
    midpoints = {}
    for column, spec in columns.items():
        if spec["type"] == "integer":
            sn_columns[column] = {"type": "int", "lower": spec["lower"], "upper": spec["upper"]}
            midpoints[column] = (spec["lower"] + spec["upper"]) / 2
        else:
            sn_columns[column] = {"type": "string"}
    table = {"row_privacy": True, "censor_dims": False, "clamp_counts": False, "rows": len(frame), **sn_columns}
    return Dataset(name=name, frame=frame, schema={"tables": {name.lower(): {"columns": columns}}},
                   metadata={name: {name: {name: table}}}, midpoints=midpoints, source=source)


def pums(folder: Path | None, seed: int) -> Dataset:
    """SmartNoise's 1,000-row PUMS sample, or a generated table with its columns and domains."""
    import pandas as pd

    columns = {
        "age": _integer(0, 100, 10), "sex": _categorical([0, 1]), "educ": _categorical(range(1, 17)),
        "race": _categorical(range(1, 7)), "income": _integer(0, 500_000, 10_000, None),
        "married": _categorical([0, 1]),
    }
    path = folder / "PUMS.csv" if folder else None
    if path is not None and path.exists():
        return _dataset("PUMS", pd.read_csv(path), columns, str(path))
    rng = np.random.default_rng(seed)
    n = 1000
    income = np.where(rng.random(n) < 0.15, 0, np.round(rng.lognormal(10.3, 0.9, n), -1))
    frame = pd.DataFrame({
        "age": rng.integers(18, 94, n), "sex": rng.integers(0, 2, n),
        "educ": np.minimum(16, 1 + rng.poisson(8, n)),
        "race": rng.choice(np.arange(1, 7), n, p=[.7, .08, .12, .05, .03, .02]),
        "income": np.minimum(income, 420_500).astype(np.int64), "married": rng.integers(0, 2, n)})
    return _dataset("PUMS", frame, columns, "generated (PUMS.csv not found)")


ADULT_DOMAIN = {"age": 85, "workclass": 9, "education_num": 16, "marital_status": 7, "occupation": 15,
                "relationship": 6, "race": 5, "sex": 2, "capital_gain": 100, "capital_loss": 100,
                "hours_per_week": 99, "income_50k": 2}
ADULT_MEASURES = {"age": 5, "capital_gain": 10, "capital_loss": 10, "hours_per_week": 10}  # column: bin_width


def adult(folder: Path | None, seed: int) -> Dataset:
    """The 48,842 Adult rows as integer codes (private-pgm's preprocessing), or a generated table
    with the same columns and domains. Measures are integers with their code range as public bounds."""
    import pandas as pd

    columns = {c: _integer(0, d - 1, ADULT_MEASURES[c]) if c in ADULT_MEASURES else _categorical(range(d))
               for c, d in ADULT_DOMAIN.items()}
    path = folder / "adult.csv" if folder else None
    if path is not None and path.exists():
        frame = pd.read_csv(path).rename(columns=lambda c: c.replace("-", "_").replace("income>50K", "income_50k"))
        return _dataset("ADULT", frame[list(ADULT_DOMAIN)], columns, str(path))
    rng = np.random.default_rng(seed + 1)
    n = 48_842
    data = {c: np.minimum(d - 1, rng.geometric(min(0.9, 3 / d), n) - 1) for c, d in ADULT_DOMAIN.items()}
    data["age"] = rng.integers(1, 75, n)
    data["hours_per_week"] = np.clip(np.round(rng.normal(39, 12, n)), 0, 98).astype(np.int64)
    for measure in ("capital_gain", "capital_loss"):
        data[measure] = np.where(rng.random(n) < 0.9, 0, rng.integers(1, 100, n))
    return _dataset("ADULT", pd.DataFrame(data), columns, "generated (adult.csv not found)")


# -------------------------------------------------------------------------------------- batches
_AGGREGATE = re.compile(r"\b(COUNT|SUM|AVG)\s*\(\s*([\w*]+)\s*\)\s+AS\s+(\w+)", re.IGNORECASE)
_GROUP_BY = re.compile(r"GROUP BY\s+([\w\s,]+?)\s*(?:ORDER|LIMIT|$)", re.IGNORECASE)


@dataclass(frozen=True)
class Statement:
    """One SQL statement (``{t}`` stands for the table) with its group columns and value columns."""

    sql: str
    groups: tuple[str, ...]
    values: tuple[tuple[str, str, str], ...]  # (alias, kind, measured column)

    @classmethod
    def of(cls, sql: str) -> Statement:
        grouped = _GROUP_BY.search(sql)
        groups = tuple(g.strip() for g in grouped.group(1).split(",")) if grouped else ()
        values = tuple((alias, function.lower(), column) for function, column, alias in _AGGREGATE.findall(sql))
        return cls(sql=sql, groups=groups, values=values)


@dataclass(frozen=True)
class Batch:
    number: int
    title: str
    data: str  # "pums" or "adult"
    statements: tuple[Statement, ...]


def _age_ranges(count: int, rng: np.random.Generator, low: int = 18, high: int = 93) -> list[tuple[int, int]]:
    return [tuple(sorted(int(v) for v in rng.integers(low, high + 1, size=2))) for _ in range(count)]  # type: ignore[misc]


def batches(seed: int) -> list[Batch]:
    """The seven batches; statements are fixed by ``seed`` (the same for every trial and system)."""
    rng = np.random.default_rng(seed)
    group_counts = [f"SELECT {g}, COUNT(*) AS n FROM {{t}} GROUP BY {g}"
                    for g in ("sex", "educ", "race", "married", "sex, race", "educ, married")]
    ranges = [f"SELECT COUNT(*) AS n FROM {{t}} WHERE age BETWEEN {a} AND {b}" for a, b in _age_ranges(50, rng)]
    prefix = [f"SELECT SUM(income) AS s FROM {{t}} WHERE income < {30_000 * i}" for i in range(1, 16)]
    mixed = (group_counts[:5]
             + [f"SELECT COUNT(*) AS n FROM {{t}} WHERE age BETWEEN {a} AND {b}" for a, b in _age_ranges(7, rng)]
             + ["SELECT SUM(income) AS s FROM {t}", "SELECT sex, SUM(income) AS s FROM {t} GROUP BY sex",
                "SELECT SUM(income) AS s FROM {t} WHERE age BETWEEN 30 AND 49",
                "SELECT SUM(income) AS s FROM {t} WHERE income < 100000"])
    averages = [f"SELECT {g}, AVG({m}) AS a FROM {{t}} GROUP BY {g}"
                for m, g in (("age", "sex"), ("age", "race"), ("age", "educ"),
                             ("income", "sex"), ("income", "race"), ("income", "married"))]
    many = [f"SELECT COUNT(*) AS n FROM {{t}} WHERE age BETWEEN {a} AND {b}" for a, b in _age_ranges(150, rng)]
    many += [f"SELECT COUNT(*) AS n FROM {{t}} WHERE age BETWEEN {a} AND {b} AND income < {10_000 * int(k)}"
             for (a, b), k in zip(_age_ranges(50, rng), rng.integers(1, 51, size=50))]
    adult_counts = [f"SELECT {g}, COUNT(*) AS n FROM {{t}} GROUP BY {g}"
                    for g in ("sex", "race", "relationship", "marital_status", "workclass", "income_50k",
                              "education_num", "occupation", "sex, income_50k", "race, sex")]
    adult_counts += ["SELECT COUNT(*) AS n FROM {t} WHERE age BETWEEN 20 AND 29",
                     "SELECT COUNT(*) AS n FROM {t} WHERE age BETWEEN 30 AND 49",
                     "SELECT COUNT(*) AS n FROM {t} WHERE hours_per_week >= 40",
                     "SELECT COUNT(*) AS n FROM {t} WHERE capital_gain > 0"]
    adult_avgs = [f"SELECT {g}, AVG({m}) AS a FROM {{t}} GROUP BY {g}"
                  for m, g in (("age", "sex"), ("hours_per_week", "income_50k"), ("age", "race"),
                               ("capital_gain", "sex"), ("hours_per_week", "sex"), ("capital_loss", "income_50k"))]
    adult_sums = ["SELECT SUM(capital_gain) AS s FROM {t}",
                  "SELECT sex, SUM(capital_gain) AS s FROM {t} GROUP BY sex",
                  "SELECT income_50k, SUM(capital_gain) AS s FROM {t} GROUP BY income_50k",
                  "SELECT race, SUM(capital_gain) AS s FROM {t} GROUP BY race",
                  "SELECT SUM(capital_gain) AS s FROM {t} WHERE age BETWEEN 30 AND 49",
                  "SELECT SUM(capital_loss) AS s FROM {t}",
                  "SELECT sex, SUM(capital_loss) AS s FROM {t} GROUP BY sex",
                  "SELECT SUM(hours_per_week) AS s FROM {t}",
                  "SELECT income_50k, SUM(hours_per_week) AS s FROM {t} GROUP BY income_50k",
                  "SELECT race, SUM(age) AS s FROM {t} GROUP BY race"]
    specs = [
        ("6 GROUP BY counts, PUMS", "pums", group_counts),
        ("50 range counts, PUMS", "pums", ranges),
        ("15 prefix SUMs of income [0, 500000], PUMS", "pums", prefix),
        ("12 counts + 4 SUMs of income, PUMS", "pums", mixed),
        ("6 AVGs by group, PUMS", "pums", averages),
        ("200 ranges (150 age, 50 age × income), PUMS", "pums", many),
        ("30 queries on Adult: 14 counts, 6 AVG, 10 SUM", "adult", adult_counts + adult_avgs + adult_sums),
    ]
    return [Batch(number=i, title=title, data=data, statements=tuple(Statement.of(s) for s in sql))
            for i, (title, data, sql) in enumerate(specs, start=1)]


# ---------------------------------------------------------------------------------- answering
Answers = list[dict[Key, dict[str, float | None]]]  # per statement: group key -> {column: value}


def _key(values: Sequence[object]) -> Key:
    """Group keys compared as text of their integer value ('1', 1 and 1.0 match)."""
    out = []
    for v in values:
        try:
            out.append(str(int(float(str(v)))))
        except ValueError:
            out.append(str(v))
    return tuple(out)


def _number(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def exact_answers(connection: duckdb.DuckDBPyConnection, dataset: Dataset, batch: Batch) -> Answers:
    """DuckDB's exact answer of every statement (the same SQL text); an AVG's cell also holds its
    exact COUNT of non-NULL values as ``<alias>__count`` (for SmartNoise's predicted AVG error)."""
    answers: Answers = []
    for statement in batch.statements:
        sql = statement.sql.format(t=dataset.table)
        for alias, kind, column in statement.values:
            if kind == "avg":
                sql = sql.replace(f" AS {alias} FROM", f" AS {alias}, COUNT({column}) AS {alias}__count FROM", 1)
        cursor = connection.execute(sql)
        names = [d[0].lower() for d in cursor.description]
        rows = cursor.fetchall()
        answers.append({_key([row[names.index(g)] for g in statement.groups]):
                        {name: _number(row[index]) for index, name in enumerate(names) if name not in statement.groups}
                        for row in rows})
    return answers


def _table_answers(table: pa.Table, statement: Statement) -> dict[Key, dict[str, float | None]]:
    columns = table.to_pydict()
    out: dict[Key, dict[str, float | None]] = {}
    for i in range(table.num_rows):
        key = _key([columns[g][i] for g in statement.groups])
        cell: dict[str, float | None] = {}
        for alias, _, _ in statement.values:
            cell[alias] = _number(columns[alias][i])
            cell[f"{alias}_stddev"] = _number(columns.get(f"{alias}_stddev", [None] * table.num_rows)[i])
        out[key] = cell
    return out


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:160] if text else ''}"


@dataclass
class Trial:
    answers: Answers | None  # None: the whole batch was refused
    seconds: float
    refusals: list[str | None]  # per statement: None, or the exception's class and first line
    plan: SmartNoisePlan | None = None  # SmartNoise's trials: its shares, for its predicted AVG errors


def run_dpsql(connection: Any, batch: Batch, dataset: Dataset) -> Trial:
    """One joint execute of the whole batch at ε = 1, timed with the fetch of every result set."""
    text = ";\n".join(s.sql.format(t=dataset.table) for s in batch.statements)
    started = time.process_time()
    try:
        tables = connection.cursor().execute(text, epsilon=EPSILON, reuse=False).fetch_arrow_tables()
    except Exception as error:  # a refusal is a result here
        seconds = time.process_time() - started
        return Trial(answers=None, seconds=seconds, refusals=[_first_line(error)] * len(batch.statements))
    seconds = time.process_time() - started
    return Trial(answers=[_table_answers(t, s) for t, s in zip(tables, batch.statements)], seconds=seconds,
                 refusals=[None] * len(batch.statements))


@dataclass(frozen=True)
class SmartNoisePlan:
    """Per statement: each mechanism's ε, and each COUNT/SUM column's noise standard deviation."""

    shares: list[float]
    stddevs: list[dict[str, float]]

    def avg_stddev(self, statement: int, bound: float, average: float, count: float) -> float:
        """SmartNoise's AVG = noisy SUM / noisy COUNT, each Laplace at the statement's per-mechanism
        ε (scales bound/ε and 1/ε): delta-method stddev √(2·(b_S² + a²·b_C²))/C at the exact a and C."""
        epsilon = self.shares[statement]
        return float(np.sqrt(2 * ((bound / epsilon) ** 2 + (average / epsilon) ** 2)) / max(count, 1.0))


def smartnoise_plan(reader: Any, batch: Batch, dataset: Dataset) -> SmartNoisePlan:
    """Per statement, the ε of each of its mechanisms so that the statement costs ε/N in all:
    ε/(N·k) for its k mechanisms (SmartNoise's per-mechanism costs at ε = 1, composed basically),
    then checked by reading the costs back at those shares (they must add up to the batch's ε).
    A COUNT or SUM column's Laplace scale b is read from ``get_simple_accuracy`` (the α-accuracy
    of Laplace is b·ln(1/α)); its standard deviation is √2·b. AVG has none (a ratio)."""
    from snsql import Privacy

    def cost(sql: str, epsilon: float) -> float | None:
        reader.privacy = Privacy(epsilon=epsilon, delta=0.0)
        try:
            return float(sum(e for e, _ in filter(None, reader._get_mechanism_costs(sql))))
        except Exception:  # the statement is refused when run, and recorded then
            return None

    texts = [s.sql.format(t=dataset.sn_table) for s in batch.statements]
    shares = [EPSILON / len(texts) / max(cost(sql, 1.0) or 1.0, 1.0) for sql in texts]
    spent = sum(cost(sql, share) or 0.0 for sql, share in zip(texts, shares))
    if spent > EPSILON * (1 + 1e-9):
        raise RuntimeError(f"SmartNoise would spend ε = {spent}, more than {EPSILON}, on batch {batch.number}")
    stddevs = []
    for statement, sql, share in zip(batch.statements, texts, shares):
        reader.privacy = Privacy(epsilon=share, delta=0.0)
        try:
            accuracy = reader.get_simple_accuracy(sql, 0.05)
        except Exception:
            accuracy = []
        kinds = {alias: kind for alias, kind, _ in statement.values}
        names = [*statement.groups, *kinds]  # SELECT lists the group columns first
        stddevs.append({name: float(np.sqrt(2) * a / np.log(20)) for name, a in zip(names, accuracy)
                        if a is not None and kinds.get(name, "avg") != "avg"})
    return SmartNoisePlan(shares=shares, stddevs=stddevs)


def run_smartnoise(reader: Any, batch: Batch, dataset: Dataset, plan: SmartNoisePlan) -> Trial:
    """Each statement alone at its share; refused statements are recorded and answered by nothing."""
    from snsql import Privacy

    answers: Answers = []
    refusals: list[str | None] = []
    started = time.process_time()
    for statement, share in zip(batch.statements, plan.shares):
        reader.privacy = Privacy(epsilon=share, delta=0.0)
        try:
            rows = reader.execute(statement.sql.format(t=dataset.sn_table))
        except Exception as error:  # a refusal is a result here
            answers.append({})
            refusals.append(_first_line(error))
            continue
        names = [str(n).lower() for n in rows[0]]
        answers.append({_key([row[names.index(g)] for g in statement.groups]):
                        {alias: _number(row[names.index(alias)]) for alias, _, _ in statement.values}
                        for row in rows[1:]})
        refusals.append(None)
    seconds = time.process_time() - started
    for released, stddev in zip(answers, plan.stddevs):  # the mechanisms' own noise, beside each answer
        for cell in released.values():
            cell.update({f"{alias}_stddev": sd for alias, sd in stddev.items()})
    return Trial(answers=answers, seconds=seconds, refusals=refusals, plan=plan)


# ------------------------------------------------------------------------------------ scoring
@dataclass
class Score:
    """Squared errors, missing cells and interval hits of one system on one batch, by kind."""

    squares: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    by_measure: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # "sum(income)"
    missing: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    covered: dict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))
    variances: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # reported stddev²
    refusals: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    refused_statements: int = 0
    statements: int = 0
    seconds: list[float] = field(default_factory=list)
    by_statement: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # squared errors
    statement_variances: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # predicted

    def statement_rmse(self, statement: int) -> tuple[float | None, float | None]:
        """(measured RMSE, predicted RMSE) of one statement's answers over every trial."""
        measured, predicted = self.by_statement.get(statement), self.statement_variances.get(statement)
        return (float(np.sqrt(np.mean(measured))) if measured else None,
                float(np.sqrt(np.mean(predicted))) if predicted else None)

    def reported(self, kind: str) -> float | None:
        """The RMSE predicted by the released standard errors (dpsql) or the mechanisms' scales
        (SmartNoise, COUNT and SUM), over the answers that have one."""
        values = self.variances.get(kind)
        return float(np.sqrt(np.mean(values))) if values else None

    def rmse(self, kind: str) -> float | None:
        values = self.squares.get(kind, self.by_measure.get(kind))
        return float(np.sqrt(np.mean(values))) if values else None


def score(trial: Trial, exact: Answers, batch: Batch, dataset: Dataset, into: Score) -> None:
    """Adds one trial's errors: cells matched by key over the union of exact and returned keys."""
    into.seconds.append(trial.seconds)
    for i, statement in enumerate(batch.statements):
        into.statements += 1
        if trial.refusals[i] is not None:
            into.refused_statements += 1
            into.refusals[trial.refusals[i]] += 1  # type: ignore[index]
        released = trial.answers[i] if trial.answers is not None else {}
        keys = set(exact[i]) | set(released)
        for alias, kind, column in statement.values:
            fallback = dataset.midpoints.get(column, 0.0) if kind == "avg" else 0.0
            for key in keys:
                truth = exact[i].get(key, {}).get(alias)
                if truth is None and kind == "avg":
                    continue  # no rows in the group: no exact AVG to score against
                truth = 0.0 if truth is None else truth
                cell = released.get(key, {})
                value = cell.get(alias)
                if value is None:
                    into.missing[kind] += 1
                    value = fallback
                into.squares[kind].append((value - truth) ** 2)
                into.by_statement[i].append((value - truth) ** 2)
                if kind != "count":
                    into.by_measure[f"{kind}({column})"].append((value - truth) ** 2)
                stddev = cell.get(f"{alias}_stddev")
                if kind == "avg" and trial.plan is not None and key in exact[i]:
                    bound = max(abs(v) for v in (dataset.schema["tables"][dataset.table]["columns"][column]["lower"],
                                                 dataset.schema["tables"][dataset.table]["columns"][column]["upper"]))
                    stddev = trial.plan.avg_stddev(i, bound, truth, exact[i][key].get(f"{alias}__count") or 0.0)
                if stddev is not None:
                    into.statement_variances[i].append(stddev**2)
                if cell.get(alias) is not None and stddev is not None:
                    hit = abs(cell[alias] - truth) <= Z95 * stddev  # type: ignore[operator]
                    for label in (kind, f"{kind}({column})") if kind != "count" else (kind,):
                        into.variances[label].append(stddev**2)
                        into.covered[label].append(hit)


# -------------------------------------------------------------------------------------- output
def _f(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.{digits - 1}e}"
    return f"{value:,.{max(0, digits - 1 - int(np.floor(np.log10(magnitude))))}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def _coverage(values: Sequence[bool]) -> str:
    return f"{np.mean(values):.3f} (n={len(values)})" if values else "—"


def _refusals(s: Score) -> str:
    if not s.refused_statements:
        return "0"
    detail = "; ".join(f"{count}× {text}" for text, count in s.refusals.items())
    return f"{s.refused_statements}/{s.statements} statements: {detail}"


@dataclass
class Result:
    batch: Batch
    cells: int
    dp: Score
    sn: Score

    def measures(self) -> list[str]:
        """"sum(income)"-style labels of every SUM/AVG kind that spans more than one measure."""
        labels = []
        for kind in KINDS[1:]:
            found = sorted(m for m in set(self.dp.by_measure) | set(self.sn.by_measure) if m.startswith(f"{kind}("))
            labels += found if len(found) > 1 else []
        return labels

    @property
    def cold(self) -> float:
        return self.dp.seconds[0]

    @property
    def warm(self) -> float | None:
        return statistics.median(self.dp.seconds[1:]) if len(self.dp.seconds) > 1 else None

    @property
    def sn_seconds(self) -> float | None:
        return statistics.median(self.sn.seconds) if self.sn.seconds else None


def _predicted(r: Result, kind: str) -> str:
    a, b = r.dp.reported(kind), r.sn.reported(kind)
    return f"{_f(a)} / {_f(b)} / {_f(_ratio(a, b))}"


def print_batch(r: Result) -> None:
    print(f"\n## ({r.batch.number}) {r.batch.title}: {len(r.batch.statements)} statements, "
          f"{r.cells} exact answer cells")
    print(f"trials: dpsql {len(r.dp.seconds)} (1 cold + {len(r.dp.seconds) - 1} warm), SmartNoise {len(r.sn.seconds)}")
    print(f"{'kind':6} {'RMSE dpsql':>12} {'RMSE SmartNoise':>16} {'ratio':>7}  {'missing dpsql / SN':>19}  "
          f"{'dpsql coverage ±1.96σ':21} predicted RMSE: dpsql (its stddevs) / SN (its Laplace scales) / ratio")
    for kind in KINDS:
        if kind not in r.dp.squares and kind not in r.sn.squares:
            continue
        a, b = r.dp.rmse(kind), r.sn.rmse(kind)
        print(f"{kind:6} {_f(a):>12} {_f(b):>16} {_f(_ratio(a, b)):>7}  "
              f"{r.dp.missing.get(kind, 0):>9} / {r.sn.missing.get(kind, 0):<7}  "
              f"{_coverage(r.dp.covered.get(kind, [])):21} "
              f"{_predicted(r, kind)}")
    for measure in r.measures():
        a, b = r.dp.rmse(measure), r.sn.rmse(measure)
        print(f"  {measure:22} {_f(a):>12} {_f(b):>16} {_f(_ratio(a, b)):>7}  {'':19}  "
              f"{_coverage(r.dp.covered.get(measure, [])):21} {_predicted(r, measure)}")
    print(f"CPU s per batch: dpsql cold {_f(r.cold)}, warm {_f(r.warm)} (median); SmartNoise "
          f"{_f(r.sn_seconds)} (median); "
          f"ratio dpsql/SmartNoise cold {_f(_ratio(r.cold, r.sn_seconds))}, warm {_f(_ratio(r.warm, r.sn_seconds))}")
    every = [hit for kind in KINDS for hit in r.dp.covered.get(kind, [])]
    print(f"coverage of dpsql's ±1.96·stddev: {_coverage(every)}")
    print("per statement: RMSE measured dpsql / SmartNoise / ratio; predicted (dpsql's stddevs; SmartNoise's "
          "Laplace scales, AVG by the delta method at the exact values) dpsql / SmartNoise / ratio")
    for i, statement in enumerate(r.batch.statements):
        (a, pa_), (b, pb) = r.dp.statement_rmse(i), r.sn.statement_rmse(i)
        print(f"  {i + 1:3} {_f(a):>10} {_f(b):>10} {_f(_ratio(a, b)):>6}   {_f(pa_):>10} {_f(pb):>10} "
              f"{_f(_ratio(pa_, pb)):>6}  {statement.sql.format(t='t')[:90]}")
    print(f"refusals: dpsql {_refusals(r.dp)}; SmartNoise {_refusals(r.sn)}")


def print_summary(results: Sequence[Result]) -> None:
    print("\n## Summary (ε = 1 per batch, pure ε-DP; RMSE against DuckDB's exact answers; CPU s per batch)\n")
    print("predicted ratio: dpsql's reported stddevs against SmartNoise's Laplace scales (COUNT and SUM only), "
          "free of trial noise; coverage: dpsql's ±1.96·stddev\n")
    print("| batch | kind | RMSE dpsql | RMSE SmartNoise | ratio | predicted ratio | CPU dpsql "
          "cold/warm | CPU SmartNoise | ratio cold/warm | coverage | refused statements |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for kind in [k for k in KINDS if k in r.dp.squares or k in r.sn.squares] + r.measures():
            a, b = r.dp.rmse(kind), r.sn.rmse(kind)
            covered = r.dp.covered.get(kind, [])
            print(f"| ({r.batch.number}) {r.batch.title} | {kind} | {_f(a)} | {_f(b)} | {_f(_ratio(a, b))} "
                  f"| {_f(_ratio(r.dp.reported(kind), r.sn.reported(kind)))} | {_f(r.cold)} / {_f(r.warm)} "
                  f"| {_f(r.sn_seconds)} "
                  f"| {_f(_ratio(r.cold, r.sn_seconds))} / {_f(_ratio(r.warm, r.sn_seconds))} "
                  f"| {f'{np.mean(covered):.3f}' if covered else '—'} "
                  f"| dpsql {r.dp.refused_statements}/{r.dp.statements}, SN "
                  f"{r.sn.refused_statements}/{r.sn.statements} |")
    every = [hit for r in results for kind in KINDS for hit in r.dp.covered.get(kind, [])]
    print(f"\nOverall coverage of dpsql's ±1.96·stddev intervals: {_coverage(every)} (target 0.95 ± 0.02)")


# ---------------------------------------------------------------------------------------- main
def _data_folder(option: str | None) -> Path | None:
    if option:
        return Path(option)
    for candidate in (Path(__file__).resolve().parents[1].parent / "shared" / "data", Path("/work/shared/data")):
        if candidate.is_dir():
            return candidate
    return None


def _duckdb(dataset: Dataset) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.register("source", pa.Table.from_pandas(dataset.frame, preserve_index=False))
    connection.execute(f"CREATE TABLE {dataset.table} AS SELECT * FROM source")
    connection.unregister("source")
    return connection


def _trials(run: Callable[[], Trial], count: int, least: int, seconds: float) -> list[Trial]:
    """Up to ``count`` trials, stopping after ``seconds`` of wall time once ``least`` have run."""
    started = time.perf_counter()
    trials: list[Trial] = []
    while len(trials) < count and (len(trials) < least or time.perf_counter() - started < seconds):
        trials.append(run())
    return trials


def run_batch(batch: Batch, dataset: Dataset, reader: Any, args: argparse.Namespace) -> Result:
    connection = _duckdb(dataset)
    exact = exact_answers(connection, dataset, batch)
    cells = sum(len(a) * len(s.values) for a, s in zip(exact, batch.statements))

    os.environ["DPSQL_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"dpsql-peers-{batch.number}-")  # cold: nothing cached
    private = dpsql.connect(connection, schema=dataset.schema, budget=dpsql.Budget(epsilon=EPSILON * (args.trials + 1)),
                            rng=SeededRandomSource(args.seed + 1000 * batch.number))
    dp = Score()
    for trial in _trials(lambda: run_dpsql(private, batch, dataset), args.trials, min(2, args.trials),
                         args.max_seconds):
        score(trial, exact, batch, dataset, dp)
    private.close()

    plan = smartnoise_plan(reader, batch, dataset)
    sn = Score()
    for trial in _trials(lambda: run_smartnoise(reader, batch, dataset, plan), args.trials, 1, args.max_seconds):
        score(trial, exact, batch, dataset, sn)
    connection.close()
    return Result(batch=batch, cells=cells, dp=dp, sn=sn)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20, help="trials per batch and system (default 20)")
    parser.add_argument("--batches", default="1,2,3,4,5,6,7", help="comma-separated batch numbers 1..7")
    parser.add_argument("--max-seconds", type=float, default=40.0,
                        help="stop adding a system's trials to a batch after this many seconds (default 40)")
    parser.add_argument("--data", default=None, help="folder with PUMS.csv and adult.csv (default ../shared/data)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        import snsql
        from snsql import Privacy
    except ImportError as error:
        print(f"SmartNoise SQL is not installed ({error}); install the bench extra: pip install 'dpsql[bench]' "
              "(smartnoise-sql>=1.0.10).", file=sys.stderr)
        return 2
    from importlib.metadata import version

    chosen = {int(n) for n in args.batches.split(",") if n.strip()}
    every = [b for b in batches(args.seed) if b.number in chosen]
    print(header(f"dpsql vs SmartNoise SQL {version('smartnoise-sql')} (OpenDP {version('opendp')}), ε = {EPSILON} "
                 f"per batch, {args.trials} trials"))
    threads = {v: os.environ[v] for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
               if v in os.environ}
    print(f"# dpsql from {Path(dpsql.__file__).parent}; thread settings: {threads or 'library defaults'}")
    folder = _data_folder(args.data)
    loaders = {"pums": pums, "adult": adult}
    datasets = {name: loaders[name](folder, args.seed) for name in sorted({b.data for b in every})}
    readers = {}
    for name, dataset in datasets.items():
        print(f"# {dataset.name}: {len(dataset.frame):,} rows from {dataset.source}")
        readers[name] = snsql.from_df(dataset.frame, privacy=Privacy(epsilon=EPSILON, delta=0.0),
                                      metadata=dataset.metadata)
    results = []
    for batch in every:
        result = run_batch(batch, datasets[batch.data], readers[batch.data], args)
        print_batch(result)
        sys.stdout.flush()
        results.append(result)
    print_summary(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
