"""The symmetry of a marginal workload: the coarsest equitable partition of its closure lattice.

ResidualPlanner (Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy
Marginals under Convex Loss Functions", NeurIPS 2023) selects one noise scale σ_S² per closure set.
Both of its objectives are convex with a unique optimum, and they only see the bipartite graph
(marginals, closure sets; edge A–S weighted C_{A,S}). Averaging over an equitable partition of that
graph is a fractional automorphism (its averaging operators X, Y satisfy CX = YC and preserve p and
w), so by Jensen the optimum is constant on its classes: the selection needs one variable per class
(4 classes for all ≤3-way marginals on equal sizes at any d, instead of 166,751 variables at
d = 100). The partition is found by colour refinement, neighbourhoods hashed as wrapping sums of
64-bit mixes. A (vanishingly unlikely) hash collision merges classes that should differ, which
can cost optimality only: the planner recomputes every variance on the full problem. Reads only
public sizes and the workload.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpsql.residual.lattice import FloatArray, IntArray, Lattice, unique_rows

__all__ = ["equitable_classes"]

_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser: a bijective 64-bit hash (wrapping arithmetic)."""
    x = x + _MIX[0]
    x = (x ^ (x >> np.uint64(30))) * _MIX[1]
    x = (x ^ (x >> np.uint64(27))) * _MIX[2]
    return x ^ (x >> np.uint64(31))


def _pair_hash(a: IntArray, b: IntArray) -> npt.NDArray[np.uint64]:
    return _mix((a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64))


def _segment_sums(values: npt.NDArray[np.uint64], order: IntArray, starts: IntArray) -> npt.NDArray[np.uint64]:
    return np.add.reduceat(values[order], starts)


def _refine(colour: IntArray, sums: npt.NDArray[np.uint64]) -> IntArray:
    """New classes: old class and neighbourhood hash together."""
    return unique_rows(np.stack([colour, sums.view(np.int64)], axis=1))[1]


def equitable_classes(lattice: Lattice, weights: FloatArray) -> tuple[IntArray, IntArray]:
    """Coarsest equitable partition (colour refinement) of sets and marginals.

    Sets start coloured by their multiset of sizes (so p_S and Π nᵢ are constant on a class),
    marginals by weight; a vertex's colour is then refined by the multiset of (edge label
    Π_{A∖S} n, neighbour colour), hashed as a wrapping sum of 64-bit mixes, until stable.
    """
    set_sizes = np.where(lattice.sets >= 0, lattice.sizes[np.maximum(lattice.sets, 0)], 0)
    set_colour = unique_rows(np.sort(set_sizes, axis=1))[1]
    marginal_colour = np.unique(weights, return_inverse=True)[1].astype(np.int64)
    label = np.unique(lattice.pair_label, return_inverse=True)[1].astype(np.int64)
    by_set = np.argsort(lattice.pair_set, kind="stable")
    set_starts = np.flatnonzero(np.r_[True, np.diff(lattice.pair_set[by_set]) != 0])
    by_marginal = np.argsort(lattice.pair_marginal, kind="stable")
    marginal_starts = np.flatnonzero(np.r_[True, np.diff(lattice.pair_marginal[by_marginal]) != 0])
    while True:
        incoming = _pair_hash(label, marginal_colour[lattice.pair_marginal])
        new_set = _refine(set_colour, _segment_sums(incoming, by_set, set_starts))
        outgoing = _pair_hash(label, new_set[lattice.pair_set])
        new_marginal = _refine(marginal_colour, _segment_sums(outgoing, by_marginal, marginal_starts))
        stable = new_set.max() == set_colour.max() and new_marginal.max() == marginal_colour.max()
        set_colour, marginal_colour = new_set, new_marginal
        if stable:
            return set_colour, marginal_colour

