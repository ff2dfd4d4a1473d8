"""A Gram matrix G = WᵀW as a short sum of Kronecker products, for scoring many strategies on one workload.

A stacked workload's Gram has one Kronecker term per block, G = Σ_k c_k ⊗ᵢ G_ki (``linalg.gram_terms``);
a batch of a thousand statements gives a thousand terms, and every trace(G M) against a strategy's
error profile M then costs a thousand factor-by-factor traces. Terms that agree on every factor but
one are one term, by linearity of the Kronecker product in each factor:

    Σ_k c_k (⊗_{i<a} Fᵢ) ⊗ G_ka ⊗ (⊗_{i>a} Fᵢ) = (⊗_{i<a} Fᵢ) ⊗ (Σ_k c_k G_ka) ⊗ (⊗_{i>a} Fᵢ),

so :func:`collected` sums them axis by axis: statements over one column of a group (a range, a
GROUP BY, a threshold) whose other factors are rows of ones collapse into one term per distinct
pattern of their other factors. The result is the same operator (equal up to floating-point
rounding of the sums), usually with a handful of terms.

Cost: with K terms over d axes of nᵢ cells, O(K · Σᵢ nᵢ²) to add them; factors are compared by their
entries' SHA-256, read once per factor object (a statement's block Grams recur in every workload holding
it); the terms' number never grows.
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np
import scipy.sparse as sp

from dpsql.matrix.linalg import square_terms
from dpsql.matrix.workloads import Explicit, FloatArray, Identity, Kron, Sum, Weighted, Workload

#: Factors of at most this many entries are compared by their entries and summed densely; larger ones
#: are kept as they are (compared by identity, never summed).
COLLECT_ENTRIES = 2**20

Term = tuple[float, tuple[Workload, ...]]


def collected(G: Workload) -> Workload:
    """``G`` (a Gram, or any square operator) with its Kronecker terms that differ in one factor summed
    into one (see the module docstring); ``G`` itself when it has one term or a non-square factor."""
    terms = square_terms(G) if isinstance(G, (Sum, Weighted)) else None
    if terms is None or len(terms) < 2:
        return G
    keys: dict[int, tuple[Workload, object]] = {}
    for axis in range(len(terms[0][1])):
        terms = _collect_axis(terms, axis, keys)
    parts = [_term(weight, factors) for weight, factors in terms]
    return parts[0] if len(parts) == 1 else Sum(parts)


def _term(weight: float, factors: tuple[Workload, ...]) -> Workload:
    base = factors[0] if len(factors) == 1 else Kron(list(factors))
    return base if weight == 1.0 else Weighted(weight, base)


def _collect_axis(terms: list[Term], axis: int, keys: dict[int, tuple[Workload, object]]) -> list[Term]:
    """The terms with those that agree on every factor but ``axis`` summed, in order of first appearance."""
    buckets: dict[tuple[object, ...], list[Term]] = {}
    for term in terms:
        other = tuple(_key(f, keys) for i, f in enumerate(term[1]) if i != axis)
        buckets.setdefault(other, []).append(term)
    result: list[Term] = []
    for members in buckets.values():
        if len(members) == 1 or not all(_small(factors[axis]) for _, factors in members):
            result.extend(members)
            continue
        total = members[0][0] * _dense(members[0][1][axis])
        for weight, factors in members[1:]:  # 1.0 · F is F exactly: added as it is
            total += _dense(factors[axis]) if weight == 1.0 else weight * _dense(factors[axis])
        first = members[0][1]
        result.append((1.0, (*first[:axis], Explicit(total), *first[axis + 1:])))
    return result


def _small(factor: Workload) -> bool:
    return factor.shape[0] * factor.shape[1] <= COLLECT_ENTRIES


def _dense(factor: Workload) -> FloatArray:
    """The factor's entries, read only (an explicit factor's own array, not a copy)."""
    if isinstance(factor, Explicit) and isinstance(factor.matrix, np.ndarray):
        return np.asarray(factor.matrix, dtype=np.float64)
    return np.asarray(factor.dense(), dtype=np.float64)


_digests: weakref.WeakKeyDictionary[Workload, bytes] = weakref.WeakKeyDictionary()


def _entries_digest(factor: Workload) -> bytes:
    """SHA-256 of a small factor's entries (−0.0 read as 0.0), kept per factor object while it lives: a
    statement's block Grams recur in every candidate group holding it, each read once."""
    known = _digests.get(factor)
    if known is None:
        known = _digests[factor] = hashlib.sha256((_dense(factor) + 0.0).tobytes()).digest()
    return known


def _key(factor: Workload, keys: dict[int, tuple[Workload, object]]) -> object:
    """What a factor is, for telling equal factors apart: an Identity by its size, a small factor by its
    entries (their SHA-256), a sparse one by its arrays, another by itself (``keys`` holds each factor, so
    that its id stays its own, and its key, for one call)."""
    known = keys.get(id(factor))
    if known is not None:
        return known[1]
    if isinstance(factor, Identity):
        key: object = ("identity", factor.shape)
    elif _small(factor):
        key = ("entries", factor.shape, _entries_digest(factor))
    elif isinstance(factor, Explicit) and sp.issparse(factor.matrix):
        matrix = sp.csr_array(factor.matrix)
        key = ("sparse", factor.shape, matrix.data.tobytes(), matrix.indices.tobytes(), matrix.indptr.tobytes())
    else:
        key = ("object", id(factor))
    keys[id(factor)] = (factor, key)
    return key
