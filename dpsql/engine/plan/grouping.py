"""Statement groups: which statements share one measurement over their joint cells.

Merging two groups answers both from one measurement over their joint cells; keeping them apart
splits the budget. With the optimal split the batch's total error is ∝ (Σ_k c_k^{1/3})³ (Laplace)
or (Σ_k √c_k)² (Gaussian) over the measurements' weighted unit errors c_k = Σ_b c_b·t_b
(``dpsql.planning.weights``): the score a greedy search lowers, merging while it falls.
"""

from __future__ import annotations

import math

from dpsql.engine.plan.planning_size import bounded_partition, dense_vectors, excess
from dpsql.engine.plan.weighing import Weighing
from dpsql.noise import Noise
from dpsql.planning import plan_cache, planner
from dpsql.planning import weights as weighting
from dpsql.schema import Ordered, Table
from dpsql.sql import ir
from dpsql.sql.compile import MERGE_CELLS, column_set, compile_group, group_cells

#: How many candidate statement groups the partition search may plan before it stops merging.
MAX_GROUP_EVALUATIONS = 60


def choose_partition(batch: ir.Batch, table: Table, noise: Noise, weighing: Weighing | None = None) -> list[list[int]]:
    """Groups of statements, merged greedily while the batch's total expected error falls.

    Starts from one group per distinct column set (statements that together exceed the planning
    limits apart: ``planning_size.bounded_partition``); merges beyond those limits are never
    chosen. Candidate groups are scored with the standard
    strategies and the quick optimized template (weighted marginals), which is what makes merging
    GROUP BYs over different columns pay off. The partition found is cached by the statements,
    their weights and the table's declaration (``dpsql.planning.plan_cache``).
    """
    weighing = weighing or Weighing(weights=(1.0,) * len(batch.statements), noise=noise)
    key = plan_cache.object_key("partition", noise, table, batch.statements, weighing.weights)
    known = plan_cache.load_partition(key, len(batch.statements))
    if known is None:
        known = search_partition(batch, table, noise, weighing)
        plan_cache.store_partition(key, known)
    return known


def search_partition(batch: ir.Batch, table: Table, noise: Noise, weighing: Weighing) -> list[list[int]]:
    """:func:`choose_partition`'s greedy search (at most MAX_GROUP_EVALUATIONS candidate groups scored)."""
    power = 1 / 3 if noise == "laplace" else 1 / 2
    errors: dict[frozenset[int], list[float]] = {}
    dense: dict[frozenset[int], list[tuple[int, ...]]] = {}  # each group's densely planned vectors (planning_size)

    def group_errors(members: frozenset[int]) -> list[float]:
        if members not in errors:
            group, statements = compile_group(batch, table, sorted(members))
            dense[members] = dense_vectors(group)
            if excess(dense[members]) is not None:  # a merge the planning limits refuse is never chosen
                errors[members] = [math.inf]
                return errors[members]
            sizes = [axis.size for axis in group.axes]
            ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
            weights = weighing.blocks(group, statements, sorted(members), table.columns)
            found = []
            for vector in group.data_kinds():
                positions = [p for p, block in enumerate(group.blocks) if block.data == vector]
                top, scales = weighting.normalized([weights[p] for p in positions])
                W = weighting.scaled_stack(group.workload(vector),
                                           [group.blocks[p].workload.shape[0] for p in positions], scales)
                found.append(top * planner.expected_error(W, noise=noise, sizes=sizes, ordered=ordered, quick=True))
            errors[members] = found
        return errors[members]

    def score(groups: list[frozenset[int]]) -> float:
        total = float(sum(c**power for g in groups for c in group_errors(g)))
        return math.inf if excess([sizes for g in groups for sizes in dense[g]]) is not None else total

    groups = [frozenset(members) for members in bounded_partition(batch, table)]
    if len(groups) == 1:
        return [sorted(groups[0])]
    columns = {g: frozenset().union(*(column_set(batch.statements[i], table) for i in g)) for g in groups}
    current = score(groups)
    while len(groups) > 1 and len(errors) < MAX_GROUP_EVALUATIONS:
        best: tuple[float, int, int] | None = None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                too_large = group_cells(table, columns[groups[i]] | columns[groups[j]]) > MERGE_CELLS
                if too_large or len(errors) >= MAX_GROUP_EVALUATIONS:
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
