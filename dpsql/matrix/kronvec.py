"""Sums of Kronecker products of non-negative vectors, and their maximum.

A column-norm profile of a union of Kronecker products is v = Σ_k v_k1 ⊗ v_k2 ⊗ … ⊗ v_kd with
v_ki ≥ 0. Its maximum is the sensitivity of the operator; we find it exactly without forming the
product domain: for one term it is Π_i max v_ki; for several, a cell tuple (j_1, …, j_d) can be
restricted, attribute by attribute, to the Pareto front of the vectors (v_1i[j], …, v_Ki[j]), since
every term is monotone in each of them.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

ColumnTerm = tuple[npt.NDArray[np.float64], ...]

#: Fronts larger than this (points × candidates) are combined densely instead.
PARETO_WORK_LIMIT = 5_000_000


def kron_vectors(vectors: Sequence[npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
    """v₁ ⊗ v₂ ⊗ … as one vector (row-major, like np.kron)."""
    result: npt.NDArray[np.float64] = np.ones(1)
    for vector in vectors:
        result = np.asarray(kron(result, vector), dtype=np.float64)
    return result


def kron(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``np.kron(a, b)``, bit for bit: for two vectors or two matrices, entry (i·r + k, j·s + l) is the one
    product a_ij · b_kl, formed here by one broadcast multiply, without np.kron's general-shape steps (its
    cost on the small factors of a statement's blocks); other shapes are left to np.kron."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == b.ndim == 1:
        return np.multiply.outer(a, b).reshape(a.shape[0] * b.shape[0])
    if a.ndim == b.ndim == 2:
        (p, q), (r, s) = a.shape, b.shape
        return np.multiply(a[:, None, :, None], b[None, :, None, :]).reshape(p * r, q * s)
    return np.asarray(np.kron(a, b))


def shared_cuts(factorisations: Sequence[Sequence[int]]) -> set[int]:
    """Cumulative domain sizes at which every factorisation can be cut (all end at the total); each
    distinct factorisation is read once (a stack of a thousand blocks has a handful)."""
    distinct = {tuple(sizes) for sizes in factorisations}
    return set.intersection(*[set(itertools.accumulate(sizes, operator.mul)) for sizes in distinct])


def group_by_cuts(sizes: Sequence[int], cuts: set[int]) -> list[range]:
    """Index ranges of consecutive factors, one group per cut, in order.

    A group closes at the first factor whose cumulative size reaches the next cut; factors of size
    one that follow the last cut join the last group, so every factorisation of the same domain
    yields one group per cut.

    >>> group_by_cuts([2, 1, 3, 1], {2, 6})
    [range(0, 1), range(1, 4)]
    """
    groups: list[range] = []
    start, size, last = 0, 1, 0
    for index, width in enumerate(sizes):
        size *= width
        if size in cuts and size > last:
            groups.append(range(start, index + 1))
            start, last = index + 1, size
    if start < len(sizes):
        groups[-1] = range(groups[-1].start, len(sizes)) if groups else range(0, len(sizes))
    return groups


def align_terms(terms: list[ColumnTerm]) -> list[ColumnTerm]:
    """Rewrite every term over the coarsest factorisation of the domain that all terms share.

    >>> [tuple(len(v) for v in t) for t in align_terms([(np.ones(2), np.ones(6)), (np.ones(4), np.ones(3))])]
    [(12,), (12,)]
    """
    cuts = shared_cuts([[len(v) for v in term] for term in terms])
    return [tuple(kron_vectors([term[i] for i in group]) for group in group_by_cuts([len(v) for v in term], cuts))
            for term in terms]


def pareto_front(points: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Rows of ``points`` (N × K) not dominated by another row (≥ everywhere); duplicates dropped.

    >>> pareto_front(np.array([[1., 2.], [2., 1.], [0., 0.], [2., 2.]])).tolist()
    [[2.0, 2.0]]
    """
    unique = np.unique(points, axis=0)
    if unique.shape[1] == 1:
        return unique[-1:]
    if unique.shape[1] == 2:
        return _pareto_front_2d(unique)
    order = np.argsort(-unique.sum(axis=1), kind="stable")
    kept: list[npt.NDArray[np.float64]] = []
    for point in unique[order]:
        if not kept or not np.any(np.all(np.asarray(kept) >= point, axis=1)):
            kept.append(point)
    return np.asarray(kept)


def _pareto_front_2d(unique: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """O(N log N): sweep by the first coordinate downwards, keep strict records of the second."""
    order = np.lexsort((-unique[:, 1], -unique[:, 0]))
    swept = unique[order]
    running = np.maximum.accumulate(swept[:, 1])
    record = np.concatenate([[True], swept[1:, 1] > running[:-1]])
    return swept[record]


def max_of_kron_sum(terms: list[ColumnTerm]) -> float:
    """max over cells of Σ_k ⊗_i v_ki, exactly, for non-negative vectors.

    >>> max_of_kron_sum([(np.array([1., 3.]), np.array([2., 1.]))])
    6.0
    >>> max_of_kron_sum([(np.array([1., 0.]), np.array([1., 1.])), (np.array([1., 1.]), np.array([0., 1.]))])
    2.0
    """
    terms = align_terms(terms)
    if len(terms) == 1:
        return float(np.prod([v.max() for v in terms[0]]))
    partial = np.ones((1, len(terms)))
    for axis in range(len(terms[0])):
        candidates = pareto_front(np.stack([term[axis] for term in terms], axis=1))
        combined = (partial[:, None, :] * candidates[None, :, :]).reshape(-1, len(terms))
        partial = combined if combined.shape[0] * len(candidates) > PARETO_WORK_LIMIT else pareto_front(combined)
    return float(partial.sum(axis=1).max())
