"""Issue 15 diagnosis: per statement of a 30-statement Adult batch, dpsql's expected RMSE against
answering that statement alone (Laplace at ε/N; an AVG as SUM and COUNT at ε/(2N) each; SUM
sensitivity k·B, COUNT k; Gaussian: ρ/N).

Reads the Adult table (integer codes; domains from adult-domain.json) into an in-memory DuckDB.
Only the plan is used (``engine.prepare``): the figures are the exact expected variances, no noise
is drawn. Prints, per statement, the expected RMSE of each aggregate part, the per-query baseline
RMSE, and the ratio of mean squared errors (> 1: worse than alone).

Run: python benchmarks/adult_sums.py [--data /work/shared/data] [--epsilon 1] [--rho R] [--weights 1,1,...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from dpsql import engine
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.plan.weighing import value_scale
from dpsql.planning import accuracy
from dpsql.schema import Schema

GROUPS = ["sex", "race", "education_num", "marital_status", "occupation", "workclass", "relationship", "income",
          "native_country"]
STATEMENTS = [
    *(f"SELECT {c}, COUNT(*) AS n FROM adult GROUP BY {c}" for c in GROUPS),
    "SELECT COUNT(*) AS n FROM adult WHERE age BETWEEN 3 AND 12",
    "SELECT COUNT(*) AS n FROM adult WHERE age BETWEEN 13 AND 22",
    "SELECT COUNT(*) AS n FROM adult WHERE age BETWEEN 23 AND 32",
    "SELECT COUNT(*) AS n FROM adult WHERE age >= 33",
    "SELECT COUNT(*) AS n FROM adult WHERE hours_per_week BETWEEN 35 AND 45",
    "SELECT COUNT(*) AS n FROM adult WHERE hours_per_week > 45",
    "SELECT sex, income, COUNT(*) AS n FROM adult GROUP BY sex, income",
    "SELECT race, sex, COUNT(*) AS n FROM adult GROUP BY race, sex",
    "SELECT COUNT(*) AS n FROM adult WHERE education_num >= 12",
    "SELECT COUNT(*) AS n FROM adult",
    "SELECT COUNT(*) AS n FROM adult WHERE capital_gain > 0",
    "SELECT sex, AVG(hours_per_week) AS a FROM adult GROUP BY sex",
    "SELECT income, AVG(age) AS a FROM adult GROUP BY income",
    "SELECT race, AVG(education_num) AS a FROM adult GROUP BY race",
    "SELECT income, AVG(capital_gain) AS a FROM adult GROUP BY income",
    "SELECT occupation, AVG(hours_per_week) AS a FROM adult GROUP BY occupation",
    "SELECT SUM(capital_gain) AS s FROM adult",
    "SELECT SUM(capital_loss) AS s FROM adult",
    "SELECT SUM(hours_per_week) AS s FROM adult WHERE sex = 1",
    "SELECT income, SUM(age) AS s FROM adult GROUP BY income",
    "SELECT SUM(education_num) AS s FROM adult",
]


def schema(domain: dict[str, int]) -> Schema:
    """Every Adult column as integer codes 0..size-1 (public bounds = the code range), one bin per code."""
    columns = {name.replace("-", "_").replace(">50k", "").replace(">50K", "").rstrip("_"):
               {"type": "integer", "lower": 0, "upper": size - 1, "bin_width": 1} for name, size in domain.items()}
    return Schema.load({"tables": {"adult": {"columns": columns}}})


def statement_figures(prepared: engine.Prepared, total: float) -> list[tuple[list[tuple[str, float, float]], float]]:
    """Per statement: [(part, expected RMSE, baseline RMSE)], and the mean of Var/baseline over its answers."""
    compiled = prepared.chosen.compiled
    n = len(compiled.statements)
    variances: dict[tuple[int, int], np.ndarray] = {}
    for m in prepared.groups.measurements:
        group = compiled.groups[m.group]
        noise_scale = (m.row_scale / m.share) ** 2 if m.plan.noise == "laplace" else m.row_scale**2 / (2 * m.share)
        for position, block in enumerate(group.blocks):
            if block.data == m.vector:
                unit = accuracy.per_query_variance(block.workload, m.plan.strategy, noise=m.plan.noise)
                variances[m.group, position] = unit * noise_scale * (m.quantum * block.scale) ** 2
    laplace = prepared.cost.family == "epsilon"
    unit_rows = compiled.table.privacy_unit.max_rows if compiled.table.privacy_unit.column else 1
    result = []
    for statement in compiled.statements:
        parts = [(output, p) for output in statement.aggregates for p in output.blocks]
        share = total / (n * len(parts))
        rows, ratios = [], []
        for _output, position in parts:
            block = compiled.groups[statement.group].blocks[position]
            bound = 1.0
            if block.kind[0] == "sum":
                quantum, steps = value_scale(compiled.table.columns[block.kind.summed])
                bound = quantum * steps
            sensitivity = unit_rows * bound
            baseline = 2 * (sensitivity / share) ** 2 if laplace else sensitivity**2 / (2 * share)
            var = variances[statement.group, position]
            label = f"{block.kind[0]}({block.kind[1] or '*'})"
            rows.append((label, math.sqrt(float(var.mean())), math.sqrt(baseline)))
            ratios.extend((var / baseline).tolist())
        result.append((rows, float(np.mean(ratios))))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--rho", type=float)
    parser.add_argument("--weights", help="comma-separated weight per statement (default: dpsql's default)")
    arguments = parser.parse_args()
    domain = json.loads((arguments.data / "adult-domain.json").read_text())
    cost = PrivacyCost(rho=arguments.rho) if arguments.rho else PrivacyCost(epsilon=arguments.epsilon)
    total = arguments.rho or arguments.epsilon
    options = {}
    if arguments.weights:
        options["weights"] = [float(w) for w in arguments.weights.split(",")]
    prepared = engine.prepare(";\n".join(STATEMENTS), schema(domain), cost, **options)
    figures = statement_figures(prepared, total)
    print(f"{len(STATEMENTS)} statements, {cost.describe()}; groups: {len(prepared.chosen.compiled.groups)}; "
          f"route: {'ResidualPlanner' if (prepared.chosen is prepared.residual) else 'statement groups'}")
    for g, note in prepared.groups.answering_notes:
        print(f"  group {g + 1}: {note[:150]}")
    for m in prepared.groups.measurements:
        print(f"  {m.name}: {m.plan.name}, share {m.share:.4g}, {m.plan.queries} queries")
    worse = 0
    for k, (sql, (rows, ratio)) in enumerate(zip(STATEMENTS, figures), 1):
        parts = "; ".join(f"{label} RMSE {rmse:.4g} (alone {base:.4g})" for label, rmse, base in rows)
        flag = "WORSE" if ratio > 1 + 1e-9 else ""
        worse += ratio > 1 + 1e-9
        print(f"{k:2d} ratio {ratio:6.3f} {flag:5s} {parts}   | {sql[7:70]}")
    print(f"statements worse than alone: {worse} of {len(STATEMENTS)}")


if __name__ == "__main__":
    main()
