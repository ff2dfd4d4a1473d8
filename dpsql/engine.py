"""One batch, end to end: parse, compile, plan, cost, charge, scan, measure, package.

Privacy:
    Each data vector the batch needs (cell counts; per column, non-NULL counts and clamped sums)
    is measured once with the strategy its plan chose. A privacy unit adds or removes at most
    k = max_rows rows, changing a count vector by at most k in L1 (and L2) norm and a sum vector
    by at most k·B, B = max(|lower|, |upper|) / quantum in the sum's integer units; so measurement
    j runs at ε_j/(k·B_j) (Laplace) or ρ_j/(k·B_j)² (Gaussian) of the strategy's own sensitivity,
    and the shares add up to the batch's ε (sequential composition) or ρ (zCDP composition).
    Everything after the measurements is post-processing. Nothing is read from the data before
    the cost is checked and charged, and the cells come from the schema only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql import mechanism, planner
from dpsql.accounting import Budget, PrivacyCost
from dpsql.backends.duckdb import CellData, DuckDBBackend, measure_quantum
from dpsql.noise import RandomSource
from dpsql.results import statement_tables
from dpsql.schema import Ordered, Schema, Table
from dpsql.sql import ir
from dpsql.sql.compile import (
    MERGE_CELLS,
    CompiledBatch,
    CompiledGroup,
    batch_table,
    column_set,
    compile_batch,
    compile_group,
    group_cells,
    initial_partition,
)
from dpsql.sql.parse import parse_batch

DataKind = tuple[str, str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """How one data vector of one statement group is measured: plan, budget share, per-row scale."""

    group: int
    kind: DataKind
    plan: planner.Plan
    share: float      # this measurement's ε or ρ
    row_scale: int    # k·B: the most one privacy unit moves one cell of this vector
    quantum: float    # value of one integer unit (1 for counts)

    def expected_rmse(self, candidate: str) -> float:
        """RMSE per query of a candidate strategy at this measurement's budget, in data units."""
        unit_error = self.plan.candidates[candidate]  # at ε = 1 or ρ = 1/2, one unit moving one count
        scale = (self.row_scale / self.share) ** 2 if self.plan.noise == "laplace" else self.row_scale**2 / (2 * self.share)
        return math.sqrt(unit_error * scale / self.plan.queries) * self.quantum


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """Everything decided before the data is touched."""

    compiled: CompiledBatch
    cost: PrivacyCost
    measurements: tuple[Measurement, ...]


#: How many candidate statement groups the partition search may plan before it stops merging.
MAX_GROUP_EVALUATIONS = 60


def prepare(text: str, schema: Schema, cost: PrivacyCost, parameters: Sequence[object] | None = None,
            progress: planner.Progress | None = None) -> Prepared:
    """Parse, compile, plan every data vector and split the batch's budget — no data read.

    ``progress`` hears about each strategy that has to be optimized (seconds, not milliseconds).
    """
    batch = parse_batch(text, parameters)
    noise: planner.Noise = "laplace" if cost.family == "epsilon" else "gaussian"
    compiled = compile_batch(batch, schema, _choose_partition(batch, batch_table(batch, schema), noise))
    unit_rows = compiled.table.privacy_unit.max_rows if compiled.table.privacy_unit.column else 1
    drafts = []
    for index, group in enumerate(compiled.groups):
        sizes = [axis.size for axis in group.axes]
        ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
        for kind in group.data_kinds():
            plan = planner.plan(group.workload(kind), noise=noise, sizes=sizes, ordered=ordered, progress=progress)
            quantum, bound = _value_scale(compiled, kind)
            drafts.append((index, kind, plan, unit_rows * bound, quantum))
    shares = planner.split_budget([plan.expected_error for _, _, plan, _, _ in drafts], cost.value, noise=noise)
    measurements = tuple(Measurement(group=g, kind=kind, plan=plan, share=share, row_scale=scale, quantum=quantum)
                         for (g, kind, plan, scale, quantum), share in zip(drafts, shares))
    return Prepared(compiled=compiled, cost=cost, measurements=measurements)


def _choose_partition(batch: ir.Batch, table: Table, noise: planner.Noise) -> list[list[int]]:
    """Groups of statements, merged greedily while the batch's total expected error falls.

    Starts from one group per distinct column set. Merging two groups answers both from one
    measurement over their joint cells; keeping them apart splits the budget. Candidate groups
    are scored with the standard strategies and the quick optimized template (weighted
    marginals), which is what makes merging GROUP BYs over different columns pay off. With the optimal
    split the batch's total error is ∝ (Σ_k c_k^{1/3})³ (Laplace) or (Σ_k √c_k)² (Gaussian) over
    the measurements' unit errors c_k, which is the score compared here.
    """
    power = 1 / 3 if noise == "laplace" else 1 / 2
    errors: dict[frozenset[int], list[float]] = {}

    def group_errors(members: frozenset[int]) -> list[float]:
        if members not in errors:
            group, _ = compile_group(batch, table, sorted(members))
            sizes = [axis.size for axis in group.axes]
            ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
            errors[members] = [planner.plan(group.workload(kind), noise=noise, sizes=sizes, ordered=ordered,
                                            bound=False, quick=True).expected_error for kind in group.data_kinds()]
        return errors[members]

    def score(groups: list[frozenset[int]]) -> float:
        return float(sum(c**power for g in groups for c in group_errors(g)))

    groups = [frozenset(members) for members in initial_partition(batch, table)]
    columns = {g: frozenset().union(*(column_set(batch.statements[i], table) for i in g)) for g in groups}
    current = score(groups)
    while len(groups) > 1 and len(errors) < MAX_GROUP_EVALUATIONS:
        best: tuple[float, int, int] | None = None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                if group_cells(table, columns[groups[i]] | columns[groups[j]]) > MERGE_CELLS or len(errors) >= MAX_GROUP_EVALUATIONS:
                    continue
                merged = [g for k, g in enumerate(groups) if k not in (i, j)] + [groups[i] | groups[j]]
                candidate = score(merged)
                if candidate < current * (1 - 1e-9) and (best is None or candidate < best[0]):
                    best = (candidate, i, j)
        if best is None:
            break
        current, i, j = best
        union = groups[i] | groups[j]
        columns[union] = columns[groups[i]] | columns[groups[j]]
        groups = [g for k, g in enumerate(groups) if k not in (i, j)] + [union]
    return [sorted(g) for g in groups]


def _value_scale(compiled: CompiledBatch, kind: DataKind) -> tuple[float, int]:
    """(quantum, B): counts are (1, 1); sums count in quanta, one row moving a cell by at most B."""
    if kind[0] != "sum":
        return 1.0, 1
    column = compiled.table.columns[kind[1]]  # type: ignore[index]
    quantum = measure_quantum(column)
    low, high = column.measure_bounds  # type: ignore[misc]
    return quantum, max(1, math.ceil(max(abs(low), abs(high)) / quantum))


def run(prepared: Prepared, *, backend: DuckDBBackend, budget: Budget, rng: RandomSource | None = None,
        progress: Callable[[str], None] | None = None) -> list[pa.Table]:
    """Charge the batch, scan once per statement group, measure each data vector, package one table per statement.

    ``progress`` receives a short message before each step (scan, measurement, packaging).
    """
    report = progress or (lambda message: None)
    compiled = prepared.compiled
    budget.check(prepared.cost)
    backend.check_table(compiled.table)
    budget.charge(prepared.cost)
    answers: dict[tuple[int, int], mechanism.Answers] = {}
    for index, group in enumerate(compiled.groups):
        mine = [m for m in prepared.measurements if m.group == index]
        sums = {compiled.table.columns[str(m.kind[1])]: m.quantum for m in mine if m.kind[0] == "sum"}
        nonnull = [compiled.table.columns[str(m.kind[1])] for m in mine if m.kind[0] == "nonnull"]
        report(f"scanning '{compiled.table.name}' for group {index + 1} of {len(compiled.groups)} ({group.cells:,} cells)")
        data = backend.cell_data(compiled.table, [axis.column for axis in group.axes], sum_columns=sums, count_columns=nonnull)
        for m in mine:
            report(f"measuring {_name(m)} with {m.plan.name} ({m.plan.strategy.shape[0]:,} noisy values)")
            x = _batch_vector(group, data, m.kind)
            budget_argument = {"epsilon" if m.plan.noise == "laplace" else "rho": Fraction(m.share)}
            release = mechanism.measure(m.plan.strategy, x, rng=rng, max_contribution=m.row_scale, **budget_argument)
            positions = [p for p, block in enumerate(group.blocks) if block.data == m.kind]
            results = mechanism.answer_blocks([group.blocks[p].workload for p in positions], release)
            for position, result in zip(positions, results):
                answers[index, position] = mechanism.Answers(values=result.values * m.quantum,
                                                             variances=result.variances * m.quantum**2)
    report("packaging the results")
    metadata = {
        "mechanism": "matrix mechanism, " + ("discrete Laplace (pure ε-DP)" if prepared.cost.family == "epsilon"
                                             else "discrete Gaussian (ρ-zCDP)"),
        "strategy": {_name(m): m.plan.name for m in prepared.measurements},
        "expected_rmse": {_name(m): m.expected_rmse(m.plan.name) for m in prepared.measurements},
        "budget_spent": prepared.cost.describe(),
        "budget_remaining": f"{budget.remaining:.6g} of {budget.total.describe()}",
    }
    return statement_tables(compiled, answers, metadata)


def _name(m: Measurement) -> str:
    """'count', 'sum(income)'... prefixed with the statement group when there are several."""
    kind = m.kind[0] if m.kind[1] is None else f"{m.kind[0]}({m.kind[1]})"
    return f"group {m.group + 1}: {kind}"


def _batch_vector(group: CompiledGroup, data: CellData, kind: DataKind) -> npt.NDArray[np.int64]:
    """Base-cell data summed into the group's cells (the axes' coarser partitions)."""
    values = data.counts if kind[0] == "count" else (data.sums if kind[0] == "sum" else data.nonnull)[kind[1]]  # type: ignore[index]
    sizes = [axis.size for axis in group.axes]
    if not sizes:
        return np.array([int(np.sum(values))], dtype=np.int64)
    base = np.unravel_index(data.index, data.shape)
    cells = tuple(axis.cell_of_base[b] for axis, b in zip(group.axes, base))
    flat = np.ravel_multi_index(cells, sizes)
    return np.bincount(flat, weights=values, minlength=int(np.prod(sizes))).round().astype(np.int64)


def explain(prepared: Prepared, budget: Budget | None = None) -> str:
    """A readable report of the plan: workload sizes, candidates' expected RMSE, SVD bound, cost."""
    compiled = prepared.compiled
    lines = [f"Batch: {len(compiled.statements)} statement(s) on table '{compiled.table.name}' in "
             f"{len(compiled.groups)} group(s) answered jointly.",
             f"Cost: {prepared.cost.describe()}" + (f"; budget left {budget.remaining:.6g} of {budget.total.describe()}" if budget else "")]
    for index, group in enumerate(compiled.groups):
        members = [str(i + 1) for i, s in enumerate(compiled.statements) if s.group == index]
        columns = ", ".join(f"{a.column.name}({a.size})" for a in group.axes) or "no columns"
        lines.append(f"Group {index + 1}: statements {', '.join(members)}; {group.cells:,} cells over {columns}.")
    for m in prepared.measurements:
        lines.append(f"\n{_name(m)}: {m.plan.queries:,} queries, noise {m.plan.noise}, budget share "
                     f"{'ε' if m.plan.noise == 'laplace' else 'ρ'}={m.share:.6g}")
        width = max(map(len, m.plan.candidates))
        for name in sorted(m.plan.candidates, key=m.plan.candidates.__getitem__):
            marker = "*" if name == m.plan.name else " "
            lines.append(f"  {marker} {name:<{width}} expected RMSE {m.expected_rmse(name):12.4g}")
        lines.extend(f"    note: {note}" for note in m.plan.notes)
        if m.plan.svd_bound is not None:
            floor = m.plan.svd_bound * (2 if m.plan.noise == "laplace" else 1)  # Laplace variance is 2b², b ≥ Δ₂
            ratio = m.plan.expected_error / floor if floor else float("nan")
            kind = "" if m.plan.svd_bound_exact else " (partial: from the largest sub-workload, the true bound is higher)"
            lines.append(f"    SVD lower bound{kind}: RMSE {m.expected_rmse(m.plan.name) / math.sqrt(ratio):.4g}; "
                         f"chosen strategy's error / bound = {ratio:.3f}")
        else:
            lines.append("    SVD bound: not computed (domain too large for a dense spectrum)")
    return "\n".join(lines)
