"""Opt-in post-processing of released answers: non-negativity and isotonic chains (Wu, Pujol,
Kotsogiannis, Machanavajjhala, "Answering Summation Queries for Numerical Attributes under
Differential Privacy", §4.3).

Both are functions of the noisy answers and the public queries only, so they cost no privacy.
They trade the unbiasedness of the answers for a lower error where the truth is known to respect
the constraint; the reported standard errors stay those of the unprocessed answers (the result
metadata says so).

    nonnegative  counts (COUNT(*), COUNT(col)) and sums over measures whose lower bound is ≥ 0
                 are set to max(0, value).
    isotonic     single-answer statements of one aggregate whose non-negative query rows are
                 nested (each row is at most the next one, cell by cell, e.g. prefix sums
                 ``WHERE income <= 800``, ``<= 1600``, …, also when read as value cells) have
                 non-decreasing true answers when the data are non-negative; their answers are
                 replaced by the inverse-variance weighted isotonic regression along the chain
                 (PAVA). The paper finds it helps answers
                 that share one bias and can hurt when biases differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise

import numpy as np

from dpsql.engine.vocabulary import AnswerKey, AnswerSet
from dpsql.planning import sum_truncation
from dpsql.planning.mechanism import Answers
from dpsql.sql.compile import CompiledBatch
from dpsql.sql.vectors import DataVector

Steps = Sequence[str]
STEPS = ("nonnegative", "isotonic")
#: Largest number of cells whose query rows are compared densely for the isotonic chain.
CHAIN_MAX_CELLS = 2**20


def apply(compiled: CompiledBatch, answers: AnswerSet, steps: Steps) -> tuple[AnswerSet, list[str]]:
    """The post-processed answers and one note per step that changed something."""
    out = dict(answers)
    notes = []
    if "isotonic" in steps:
        chains = _isotonic(compiled, out)
        if chains:
            notes.append(f"isotonic regression over {chains} chain(s) of nested single-answer statements; "
                         "stddev is that of the answers before it")
    if "nonnegative" in steps:
        clipped = _nonnegative(compiled, out)
        if clipped:
            notes.append(f"{clipped} negative count(s) or sum(s) of non-negative values set to 0; "
                         "stddev is that of the answers before it")
    return AnswerSet(out), notes


def _non_negative_data(compiled: CompiledBatch, vector: DataVector) -> bool:
    if not vector.is_sum or vector.squared:  # counts, and sums of squares, are never negative
        return True
    bounds = compiled.table.columns[vector.summed].measure_bounds
    return bounds is not None and bounds[0] >= 0


def _nonnegative(compiled: CompiledBatch, answers: dict[AnswerKey, Answers]) -> int:
    changed = 0
    for (g, b), found in answers.items():
        if _non_negative_data(compiled, compiled.groups[g].blocks[b].kind):
            negative = found.values < 0
            changed += int(negative.sum())
            answers[AnswerKey(g, b)] = replace(found, values=np.where(negative, 0.0, found.values))
    return changed


def _isotonic(compiled: CompiledBatch, answers: dict[AnswerKey, Answers]) -> int:
    chains = 0
    for g, group in enumerate(compiled.groups):
        if group.cells > CHAIN_MAX_CELLS:
            continue
        for kind in sorted({block.kind for block in group.blocks}, key=lambda k: (k.kind, k.column or "")):
            if not _non_negative_data(compiled, kind):
                continue
            single = [b for b, block in enumerate(group.blocks) if block.kind == kind and block.workload.shape[0] == 1]
            rows = {b: group.blocks[b].workload.dense()[0] for b in single}
            rows = {b: row for b, row in rows.items() if np.all(row >= 0)}
            order = sorted(rows, key=lambda b: rows[b].sum())
            if len(order) < 2 or not all(np.all(rows[a] <= rows[c]) for a, c in pairwise(order)):
                continue  # not one nested chain: on non-negative data each row's answer is at most the next one's
            values = np.array([answers[AnswerKey(g, b)].values[0] for b in order])
            weights = np.array([1.0 / max(answers[AnswerKey(g, b)].variances[0], 1e-300) for b in order])
            fitted = sum_truncation.isotonic_increasing(values, weights)
            for b, value in zip(order, fitted):
                answers[AnswerKey(g, b)] = replace(answers[AnswerKey(g, b)], values=np.array([value]))
            chains += 1
    return chains
