"""``dpsql demo``: a census-like DuckDB table, its schema, a dozen analyst queries, answered privately.

The population is synthetic (a fixed seed, so it is the same every run); the schema and the
queries are the ones in ``examples/census/``. The demo writes the database, ``schema.toml`` and
``queries.sql`` into a folder, sets a total budget of ε = 3 in a fresh ledger next to the
database (as the data owner would with ``dpsql budget set``), runs the batch once at ε = 1 with OS
randomness, and prints each statement's private answers with their standard errors and the budget
spent and left (the plan too with ``--explain``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.schema import Schema

STATES = ("AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY NC "
          "ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY").split()
RACES = ("white", "black", "asian", "native", "pacific", "multiple", "other")
EDUCATION = ("none", "primary", "some_high_school", "high_school", "some_college", "bachelors", "masters", "doctorate")
#: The total ε the demo's data owner sets (or the batch's ε, if that is larger).
DEMO_TOTAL = 3.0

SCHEMA = f"""# Public schema of the demo census table. Domains are declared, never read from the data.
[tables.census]
privacy_unit = "row"

[tables.census.columns.age]
type = "integer"
lower = 0
upper = 99
bin_width = 5          # GROUP BY age reports 5-year bands
resolution = 1         # predicates may cut at any whole year

[tables.census.columns.sex]
type = "categorical"
values = ["F", "M"]

[tables.census.columns.race]
type = "categorical"
values = {list(RACES)!r}

[tables.census.columns.education]
type = "categorical"
values = {list(EDUCATION)!r}

[tables.census.columns.state]
type = "categorical"
values = {STATES!r}

[tables.census.columns.hours]  # usual hours worked per week
type = "integer"
lower = 0
upper = 99
bin_width = 10
resolution = 1

[tables.census.columns.income]  # yearly income; SUM/AVG clamp it to [0, 500000]
type = "numeric"
lower = 0
upper = 500000
bin_width = 25000
resolution = 5000
""".replace("'", '"')

QUERIES = """-- A dozen analyst queries, answered as ONE private batch.
-- 1. Population by sex
SELECT sex, COUNT(*) AS people FROM census GROUP BY sex;
-- 2. Working-age adults
SELECT COUNT(*) AS working_age FROM census WHERE age BETWEEN 18 AND 64;
-- 3. Age pyramid: 5-year bands by sex
SELECT age, sex, COUNT(*) AS people FROM census GROUP BY age, sex;
-- 4. The ten most populous states
SELECT state, COUNT(*) AS people FROM census GROUP BY state ORDER BY people DESC LIMIT 10;
-- 5. Mean income by education
SELECT education, AVG(income) AS mean_income FROM census GROUP BY education;
-- 6. Total income by sex
SELECT sex, SUM(income) AS total_income FROM census GROUP BY sex;
-- 7. High earners
SELECT COUNT(*) AS high_earners FROM census WHERE income >= 100000;
-- 8. Seniors by race
SELECT race, COUNT(*) AS seniors FROM census WHERE age >= 65 GROUP BY race;
-- 9. Women working full time
SELECT COUNT(*) AS women_full_time FROM census WHERE hours >= 40 AND sex = 'F';
-- 10. People working by 10-hour band, among adults
SELECT hours, COUNT(*) AS workers FROM census WHERE hours > 0 AND age >= 18 GROUP BY hours;
-- 11. Three large states
SELECT COUNT(*) AS people FROM census WHERE state IN ('CA', 'NY', 'TX');
-- 12. Dependents: children or seniors
SELECT COUNT(*) AS dependents FROM census WHERE age < 18 OR age >= 65;
"""


def population(people: int = 1_000_000, seed: int = 20261121) -> pa.Table:
    """A synthetic census table (public, generated data; the same for a given seed)."""
    rng = np.random.default_rng(seed)
    age = np.clip(rng.gamma(3.2, 12.5, size=people), 0, 99).astype(np.int64)
    sex = rng.choice(np.array(["F", "M"]), size=people)
    race = rng.choice(np.array(RACES), size=people, p=[0.60, 0.13, 0.06, 0.01, 0.005, 0.035, 0.16])
    weights = np.linspace(3.0, 0.4, len(STATES)) * rng.uniform(0.5, 1.5, len(STATES))
    state = rng.choice(np.array(STATES), size=people, p=weights / weights.sum())
    schooling = np.clip(rng.normal(3.6, 1.5, size=people) + (age > 22) * 0.4, 0, len(EDUCATION) - 1)
    schooling = np.where(age < 16, np.minimum(schooling, age // 6), schooling).astype(np.int64)
    working = (age >= 16) & (age < 70) & (rng.random(people) < 0.78)
    hours = np.where(working, np.clip(rng.normal(38, 10, size=people), 1, 99), 0).astype(np.int64)
    income = np.where(age >= 16, rng.lognormal(9.6 + 0.22 * schooling + 0.012 * hours, 0.7), 0.0)
    return pa.table({"age": age, "sex": sex, "race": race, "education": np.array(EDUCATION)[schooling],
                     "state": state, "hours": hours, "income": np.round(income, 2)})


def write_files(folder: Path, people: int = 1_000_000) -> Path:
    """Write census.duckdb, schema.toml and queries.sql into ``folder``; return the database path."""
    folder.mkdir(parents=True, exist_ok=True)
    database = folder / "census.duckdb"
    database.unlink(missing_ok=True)
    table = population(people)
    with duckdb.connect(str(database)) as connection:
        connection.register("generated", table)
        connection.execute("CREATE TABLE census AS SELECT * FROM generated")
    (folder / "schema.toml").write_text(SCHEMA)
    (folder / "queries.sql").write_text(QUERIES)
    return database


def run(folder: Path | None = None, *, people: int = 1_000_000, epsilon: float = 1.0, explain: bool = False,
        echo: Callable[[str], None] = print) -> list[pa.Table]:
    """Build the demo database and answer the example batch privately; returns the result tables.

    Prints the answers first, under a line saying what ± means; with ``explain``, the plan follows
    them (it is made before the batch is answered, as ``dpsql explain`` would show it)."""
    import dpsql
    from dpsql.answers.tables import PLUS_MINUS, format_table

    started = time.perf_counter()
    keep = folder is not None
    folder = folder or Path(tempfile.mkdtemp(prefix="dpsql-demo-"))
    echo(f"Building a census-like table of {people:,} people in {folder} ...")
    database = write_files(folder, people)
    echo(f"  done in {time.perf_counter() - started:.1f} s. Schema: {folder / 'schema.toml'}; "
         f"queries: {folder / 'queries.sql'}")
    ledger = Ledger(default_path(database))
    ledger.path.unlink(missing_ok=True)  # the data were just generated anew: so is their budget
    ledger.set_total(database.name, PrivacyCost(epsilon=max(DEMO_TOTAL, epsilon)),
                     binding=Binding.of(Schema.load(SCHEMA), database))  # as `dpsql budget set --schema` binds it
    echo(f"  data owner: total budget ε = {max(DEMO_TOTAL, epsilon):g} in the ledger {ledger.path}")
    statements = [line for line in QUERIES.splitlines() if line.startswith("-- ") and line[3].isdigit()]
    with dpsql.connect(str(database), schema=folder / "schema.toml") as connection:
        cursor = connection.cursor()
        plan = cursor.explain(QUERIES, epsilon=epsilon) if explain else None  # before the batch is answered
        answering = time.perf_counter()
        cursor.execute(QUERIES, epsilon=epsilon)
        tables = cursor.fetch_arrow_tables()
        budget = connection.budget
        echo(f"Answered {len(tables)} statements as one release at ε = {epsilon} in "
             f"{time.perf_counter() - answering:.1f} s; budget spent ε = {float(budget.spent):g}, "
             f"left ε = {budget.remaining:g} of {budget.total.describe()} (dpsql budget show --db {database}).\n")
    echo(f"{PLUS_MINUS}\n")
    for title, table in zip(statements, tables):
        echo(title[3:])
        echo(format_table(table, limit=12))
        echo("")
    if plan is not None:
        echo(f"How dpsql planned the batch (made before it was answered; nothing spent):\n{plan}\n")
    else:
        echo(f"How dpsql planned the batch: dpsql demo --explain, or dpsql explain {folder / 'queries.sql'} --db "
             f"{database} --schema {folder / 'schema.toml'} --epsilon {epsilon:g} --no-reuse")
    if not keep:
        echo(f"(The files are in {folder}; run `dpsql demo --dir DIR` to keep them somewhere else.)")
    return tables
