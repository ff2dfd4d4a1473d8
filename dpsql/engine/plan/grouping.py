"""Statement groups: which statements share one measurement over their joint cells.

Merging two groups answers both from one measurement over their joint cells; keeping them apart
splits the budget. With the optimal split the batch's total error is ∝ (Σ_k c_k^{1/3})³ (Laplace)
or (Σ_k √c_k)² (Gaussian) over the measurements' weighted unit errors c_k = Σ_b c_b·t_b
(``dpsql.planning.weights``): the score a greedy search lowers, merging while it falls.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from dpsql.engine.plan.planning_size import bounded_partition, dense_vectors, excess
from dpsql.engine.plan.weighing import Weighing
from dpsql.noise import Noise
from dpsql.planning import plan_cache, planner
from dpsql.planning import weights as weighting
from dpsql.schema import Ordered, Table
from dpsql.sql import ir
from dpsql.sql.compile import MERGE_CELLS, StatementMemo, column_set, compile_group, group_cells
from dpsql.sql.units import reads_units

#: How many candidate statement groups the partition search may plan before it stops merging.
MAX_GROUP_EVALUATIONS = 60
#: Statement digests kept in memory per process (:func:`statement_digest`).
DIGESTS_KEPT = 8192


def choose_partition(batch: ir.Batch, table: Table, noise: Noise, weighing: Weighing | None = None,
                     memo: StatementMemo | None = None) -> list[list[int]]:
    """Groups of statements, merged greedily while the batch's total expected error falls.

    Starts from one group per distinct column set (statements that together exceed the planning
    limits apart: ``planning_size.bounded_partition``), a statement's grouping sets in one group
    where the limits allow; merges beyond those limits are never chosen. Candidate groups are scored with the standard
    strategies and the quick optimized template (weighted marginals), which is what makes merging
    GROUP BYs over different columns pay off. The partition found is cached by the statements (what
    they ask: :func:`statement_digest`), their weights and the table's declaration
    (``dpsql.planning.plan_cache``), and so is each candidate
    group's score, by that group alone (:func:`group_key`): a batch sharing groups with an earlier one
    scores only the candidate groups it does not share. ``memo``: the batch's statements compiled so far.
    """
    weighing = weighing or Weighing(weights=(1.0,) * len(batch.statements), noise=noise)
    key = plan_cache.object_key("partition", noise, table, statement_digests(batch), weighing.weights)
    known = plan_cache.load_partition(key, len(batch.statements))
    if known is None:
        known = search_partition(batch, table, noise, weighing, memo)
        plan_cache.store_partition(key, known)
    return known


def search_partition(batch: ir.Batch, table: Table, noise: Noise, weighing: Weighing,
                     memo: StatementMemo | None = None) -> list[list[int]]:
    """:func:`choose_partition`'s greedy search (at most MAX_GROUP_EVALUATIONS candidate groups scored);
    ``memo``: the batch's statements compiled so far (one made here when not given).

    Cost of one candidate group of K statements over cells n = Π nᵢ: its statements are compiled once
    per cells of their own columns (``compile.StatementMemo``; on a new axis only a row of ones is
    added, O(K·d)), its Gram's K Kronecker terms are collected into a few (``matrix.grams``,
    O(K·Σnᵢ²)) before each quick candidate strategy is traced against it, and the workload's own rows
    are read once per distinct block (O(rows·n), while n ≤ EIGEN_MAX_CELLS); the quick OPT_M runs its
    fixed work budget."""
    power = 1 / 3 if noise == "laplace" else 1 / 2
    errors: dict[frozenset[int], list[float]] = {}
    dense: dict[frozenset[int], list[tuple[int, ...]]] = {}  # each group's densely planned vectors (planning_size)
    digests = statement_digests(batch)
    # each distinct statement compiled once per distinct set of axes, not once per candidate nor per copy
    memo = memo if memo is not None else batch_memo(batch)

    def group_errors(members: frozenset[int]) -> list[float]:
        if members not in errors:
            key = group_key("candidate group", batch, table, sorted(members), weighing, digests=digests)
            known = plan_cache.load_scores(key)
            if known is None:
                found, vectors = candidate_errors(batch, table, sorted(members), weighing, memo)
                plan_cache.store_scores(key, found, vectors)
            else:
                found, vectors = list(known[0]), list(known[1])
            errors[members], dense[members] = found, vectors
        return errors[members]

    def score(groups: list[frozenset[int]]) -> float:
        total = float(sum(c**power for g in groups for c in group_errors(g)))
        return math.inf if excess([sizes for g in groups for sizes in dense[g]]) is not None else total

    groups = _grouping_sets_together(batch, table, [frozenset(m) for m in bounded_partition(batch, table, memo)], memo)
    if len(groups) == 1:
        return [sorted(groups[0])]
    columns = {g: frozenset().union(*(column_set(batch.statements[i], table) for i in g)) for g in groups}
    # distinct units per cell are exact only over a statement's own cells (dpsql.sql.units): never merged
    apart = frozenset(i for i, statement in enumerate(batch.statements) if reads_units(statement, table))
    current = score(groups)
    while len(groups) > 1 and len(errors) < MAX_GROUP_EVALUATIONS:
        best: tuple[float, int, int] | None = None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                too_large = group_cells(table, columns[groups[i]] | columns[groups[j]]) > MERGE_CELLS
                if too_large or len(errors) >= MAX_GROUP_EVALUATIONS or groups[i] & apart or groups[j] & apart:
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


def _grouping_sets_together(batch: ir.Batch, table: Table, groups: list[frozenset[int]],
                             memo: StatementMemo) -> list[frozenset[int]]:
    """The search's start with the grouping sets of each statement (ROLLUP, CUBE, GROUPING SETS:
    ``sql.grouping_sets``) in one group, where the planning limits allow it: they are marginals of the
    same cells, which one measurement answers jointly and consistently (every total the sum of its
    parts, from one reconstruction), while the greedy merges would have to be found among
    MAX_GROUP_EVALUATIONS candidates (a CUBE of 4 keys starts as 16 groups, 120 pairs)."""
    sets: dict[int, frozenset[int]] = {}
    for index, statement in enumerate(batch.statements):
        if statement.union is not None and statement.union.grouping_set is not None:
            sets[statement.union.union] = sets.get(statement.union.union, frozenset()) | {index}
    dense: dict[frozenset[int], list[tuple[int, ...]]] = {}  # each group's densely planned vectors, found once

    def vectors(group: frozenset[int]) -> list[tuple[int, ...]]:
        if group not in dense:
            dense[group] = dense_vectors(compile_group(batch, table, sorted(group), memo=memo)[0])
        return dense[group]

    for parts in sets.values():
        holding = [g for g in groups if g & parts]
        merged = frozenset().union(*holding)
        columns = frozenset().union(*(column_set(batch.statements[i], table) for i in merged))
        if len(holding) < 2 or group_cells(table, columns) > MERGE_CELLS:
            continue
        joined = [g for g in groups if not g & parts] + [merged]
        if excess([sizes for g in joined for sizes in vectors(g)]) is None:
            groups = joined
    return groups


@functools.lru_cache(maxsize=DIGESTS_KEPT)
def statement_digest(statement: ir.Statement) -> str:
    """What ``statement`` asks, as a plan-cache digest: its content with ``ir.Span`` (where it is in
    the batch text) left out, so identical statements anywhere in any batch have one digest.
    Memoised by the (frozen, hashable) statement: preparing a batch asks for each digest several times."""
    return plan_cache.object_key("statement", statement, omit=(ir.Span,))


def statement_digests(batch: ir.Batch) -> list[str]:
    """:func:`statement_digest` of each of the batch's statements, in order."""
    return [statement_digest(statement) for statement in batch.statements]


def batch_memo(batch: ir.Batch) -> StatementMemo:
    """An empty :class:`~dpsql.sql.compile.StatementMemo` for ``batch``: identical statements share one entry."""
    return StatementMemo(same_statements(statement_digests(batch)))


def same_statements(digests: Sequence[str]) -> list[int]:
    """For each statement, the index of the first statement with its digest (itself when it is the first)."""
    first: dict[str, int] = {}
    return [first.setdefault(digest, index) for index, digest in enumerate(digests)]


def group_key(purpose: str, batch: ir.Batch, table: Table, members: Sequence[int], weighing: Weighing,
              *extra: object, digests: Sequence[str] | None = None) -> str:
    """The plan cache's key for one statement group: what it is for, its statements in order (what they
    ask, not where they are in the batch text: :func:`statement_digest`), their weights, the noise family,
    the table's declaration and the caller's ``extra`` — everything a group's plan depends on, so that
    a batch sharing the group with an earlier one, whatever its other statements, reuses it. ``digests``:
    the batch's :func:`statement_digests`, when the caller already has them (the key is the same)."""
    found = [digests[i] if digests is not None else statement_digest(batch.statements[i]) for i in members]
    return plan_cache.object_key(purpose, weighing.noise, table, found, [weighing.weights[i] for i in members],
                                 *extra)


def candidate_errors(batch: ir.Batch, table: Table, members: Sequence[int], weighing: Weighing,
                     memo: StatementMemo | None = None) -> tuple[list[float], list[tuple[int, ...]]]:
    """(errors, dense) of the candidate group of statements ``members``: each data vector's weighted
    unit error under its quick plan (∞ alone when the group exceeds a planning limit) and the axis
    sizes of its densely planned vectors (``planning_size.dense_vectors``); ``memo`` holds the statements
    compiled for earlier candidates."""
    group, statements = compile_group(batch, table, members, memo=memo)
    dense = dense_vectors(group)
    if excess(dense) is not None:  # a merge the planning limits refuse is never chosen
        return [math.inf], dense
    sizes = [axis.size for axis in group.axes]
    ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
    weights = weighing.blocks(group, statements, members, table.columns)
    found = []
    for vector in group.data_kinds():
        positions = [p for p, block in enumerate(group.blocks) if block.data == vector]
        top, scales = weighting.normalized([weights[p] for p in positions])
        W = weighting.scaled_stack(group.workload(vector), [group.blocks[p].workload.shape[0] for p in positions],
                                   scales)
        found.append(top * planner.expected_error(W, noise=weighing.noise, sizes=sizes, ordered=ordered, quick=True))
    return found, dense
