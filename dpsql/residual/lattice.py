"""The closure lattice of a batch of marginals, shared by ResidualPlanner and ResidualPlanner+.

Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy Marginals under
Convex Loss Functions" (NeurIPS 2023), and He, Xiao, Toksoz, Ding, Zhang and Kifer,
"ResidualPlanner+: a scalable matrix mechanism for marginals and beyond" (arXiv:2305.08175, 2023).

Notation: d attributes of public sizes nᵢ ≥ 2. A marginal A is a strictly increasing tuple of
attribute indices; its table has shape (nᵢ)_{i∈A} in row-major (Kronecker) order, cells(A) =
Π_{i∈A} nᵢ, and () is the grand total. closure(W) is every subset of every requested marginal:
both planners release one residual per closure set S and reconstruct A from the releases of its
subsets, so they share
    the lattice   closure sets, the marginal–subset pairs (A, S ⊆ A), and table-shape groups;
    the inputs    validation of domains, marginals, ρ and weights (checked before any work);
    the tables    the exact integer table of every closure set, summed from the given ones.
The lattice also carries ResidualPlanner's p_S = Π_{i∈S}(nᵢ − 1)/nᵢ and C_{A,S} = p_S Π_{A∖S} nⱼ⁻²
(ResidualPlanner+ computes its own from its residual pieces). Reads only public sizes and the
workload, except ``closure_tables``, which sums the caller's exact tables before measurement.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpsql.errors import DataError, DomainTooLargeError, PrivacyParameterError, ShapeError

__all__ = ["BATCH_CELLS", "MAX_MARGINAL_CELLS", "MAX_SUBSET_PAIRS", "OBJECTIVES", "FloatArray", "IntArray",
           "Lattice", "Marginal", "Objective", "Orders", "as_marginal", "build_lattice", "check_domains",
           "check_marginals", "check_rho", "check_weights", "closure_tables", "unique_rows"]

Marginal = tuple[int, ...]
Objective = Literal["sum_variance", "max_variance"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: Per marginal order k: (positions of the order-k marginals, their k-column attribute array).
Orders = dict[int, tuple[IntArray, IntArray]]

OBJECTIVES: tuple[str, ...] = ("sum_variance", "max_variance")
#: Most marginal–subset pairs Σ_A 2^|A| a selection enumerates.
MAX_SUBSET_PAIRS = 2**25
#: Most cells of one marginal (products of sizes must also stay exact in int64).
MAX_MARGINAL_CELLS = 2**62
#: Cells per batch when measuring and reconstructing.
BATCH_CELLS = 2**22


# ============================================================================ the lattice
@dataclass(frozen=True, eq=False)
class Lattice:
    """The closure of a batch of marginals, its marginal–subset pairs and its table shapes.

    Closure sets are rows of ``sets`` (attribute indices, padded with −1), sorted
    lexicographically, so () comes first. Pair e joins marginal ``pair_marginal[e]`` to its subset
    ``pair_set[e]``; the pairs of marginal j are ``pair_start[j] + mask`` for mask < 2^|A|, bit b
    of the mask keeping the b-th attribute of A. Sets with equal table shapes form a group; set s
    is row ``row[s]`` of group ``group[s]``.
    """

    sizes: IntArray
    marginals: tuple[Marginal, ...]
    sets: IntArray
    set_size: IntArray
    p: FloatArray
    pair_set: IntArray
    pair_marginal: IntArray
    pair_start: IntArray
    pair_label: IntArray
    coefficient: FloatArray
    marginal_set: IntArray
    group: IntArray
    row: IntArray
    group_shapes: tuple[tuple[int, ...], ...]
    group_members: tuple[IntArray, ...]

    @cached_property
    def closure(self) -> tuple[Marginal, ...]:
        """Every closure set as a tuple, in lattice order."""
        return tuple(tuple(int(a) for a in row[:k]) for row, k in zip(self.sets.tolist(), self.set_size.tolist()))

    @cached_property
    def index(self) -> dict[Marginal, int]:
        """Closure set → its lattice position."""
        return {s: i for i, s in enumerate(self.closure)}

    @cached_property
    def marginal_of_set(self) -> IntArray:
        """For each closure set, its position among the requested marginals, or −1."""
        out = np.full(len(self.sets), -1, dtype=np.int64)
        out[self.marginal_set] = np.arange(len(self.marginal_set))
        return out

    def locate(self, marginal: object, what: str = "marginal") -> int:
        """The lattice position of a closure set given by the caller, or ShapeError."""
        key = as_marginal(marginal, len(self.sizes), what)
        position = self.index.get(key)
        if position is None:
            raise ShapeError(
                f"{what} {key} is not one of the selected marginals or a subset of one, so nothing "
                "measured determines it; add it to the marginals passed to select()."
            )
        return position

    def subset_ids(self, positions: IntArray) -> IntArray:
        """(len(positions), 2^k) closure positions of every subset, in mask order, of sets of size k."""
        k = int(self.set_size[positions[0]])
        marginal = self.marginal_of_set[positions]
        if np.all(marginal >= 0):
            return self.pair_set[self.pair_start[marginal][:, None] + np.arange(1 << k)]
        out = np.empty((len(positions), 1 << k), dtype=np.int64)
        for r, position in enumerate(positions.tolist()):
            members = self.closure[position]
            for mask in range(1 << k):
                out[r, mask] = self.index[tuple(members[b] for b in range(k) if mask >> b & 1)]
        return out

    def shape(self, position: int) -> tuple[int, ...]:
        return self.group_shapes[int(self.group[position])]


def as_marginal(value: object, d: int, what: str = "marginal") -> Marginal:
    """``value`` as a strictly increasing tuple of attribute indices in [0, d), else ShapeError."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ShapeError(f"each {what} must be a tuple of attribute indices, e.g. (0, 2); got {value!r}.")
    items = list(value)
    if not all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in items):
        raise ShapeError(f"{what} {value!r} must hold integer attribute indices.")
    key = tuple(int(a) for a in items)
    bad = [a for a in key if not 0 <= a < d]
    if bad:
        raise ShapeError(f"{what} {key} names attribute {bad[0]}, but the domain has attributes 0…{d - 1}.")
    if any(b <= a for a, b in itertools.pairwise(key)):
        raise ShapeError(
            f"{what} {key} must list distinct attributes in increasing order, e.g. {tuple(sorted(set(key)))}."
        )
    return key


def unique_rows(rows: IntArray) -> tuple[IntArray, IntArray]:
    """(distinct rows in lexicographic order, position of each input row among them)."""
    order = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(len(rows))
    ordered = rows[order]
    fresh = np.ones(len(rows), dtype=bool)
    fresh[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(fresh) - 1
    return ordered[fresh], inverse


def build_lattice(sizes: IntArray, marginals: tuple[Marginal, ...], orders: Orders) -> Lattice:
    """Closure, pairs, coefficients C_{A,S} and shape groups, vectorised per marginal order k."""
    width = max(orders)
    rows, owner, labels = [], [], []
    pair_start = np.empty(len(marginals), dtype=np.int64)
    offset = 0
    for k, (js, attributes) in orders.items():
        block = np.full((len(js), 1 << k, width), -1, dtype=np.int64)
        label = np.ones((len(js), 1 << k), dtype=np.int64)
        for mask in range(1 << k):
            kept = [b for b in range(k) if mask >> b & 1]
            block[:, mask, :len(kept)] = attributes[:, kept]
            for b in range(k):
                if not mask >> b & 1:
                    label[:, mask] *= sizes[attributes[:, b]]
        rows.append(block.reshape(len(js) << k, width))
        labels.append(label.ravel())
        owner.append(np.repeat(js, 1 << k))
        pair_start[js] = offset + np.arange(len(js)) * (1 << k)
        offset += len(js) << k
    sets, pair_set = unique_rows(np.concatenate(rows))
    set_size = (sets >= 0).sum(axis=1)
    set_sizes = np.where(sets >= 0, sizes[np.maximum(sets, 0)], 0)
    ordered_sizes = np.sort(set_sizes, axis=1)  # equal multisets → identical float products
    p = np.prod(np.where(ordered_sizes > 0, (ordered_sizes - 1) / np.maximum(ordered_sizes, 1), 1.0), axis=1)
    pair_label = np.concatenate(labels)
    coefficient = p[pair_set] / pair_label.astype(np.float64) ** 2
    shapes, group = unique_rows(set_sizes)
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=len(shapes))
    members = tuple(np.split(order, np.cumsum(counts)[:-1]))
    row = np.empty(len(sets), dtype=np.int64)
    for m in members:
        row[m] = np.arange(len(m))
    return Lattice(
        sizes=sizes, marginals=marginals, sets=sets, set_size=set_size, p=p,
        pair_set=pair_set, pair_marginal=np.concatenate(owner), pair_start=pair_start,
        pair_label=pair_label, coefficient=coefficient,
        marginal_set=pair_set[pair_start + (1 << np.array([len(a) for a in marginals])) - 1],
        group=group, row=row,
        group_shapes=tuple(tuple(int(n) for n in s if n > 0) for s in shapes.tolist()),
        group_members=members,
    )


# ============================================================================ caller input
def check_domains(domains: Sequence[int]) -> IntArray:
    """The attribute sizes as an int64 array, or ShapeError unless every size is an integer ≥ 2."""
    if isinstance(domains, (str, bytes)) or not isinstance(domains, Sequence):
        raise ShapeError(f"domains must be a sequence of attribute sizes, e.g. [100, 7, 2]; got {domains!r}.")
    for i, n in enumerate(domains):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2:
            raise ShapeError(
                f"attribute {i} has size {n!r}; every size must be an integer >= 2 (a constant "
                "attribute adds nothing to a marginal: drop it)."
            )
    return np.array([int(n) for n in domains], dtype=np.int64)


def check_marginals(marginals: Sequence[Sequence[int]], sizes: IntArray) -> tuple[tuple[Marginal, ...], Orders]:
    """The marginals as tuples, and per order k the (positions, k-column attribute array).

    Each order is checked at once in numpy; a group that fails is re-checked marginal by
    marginal for a precise message.
    """
    if isinstance(marginals, (str, bytes)) or not isinstance(marginals, Sequence) or len(marginals) == 0:
        raise ShapeError("marginals must be a non-empty list of attribute tuples, e.g. [(0,), (0, 1)].")
    d = len(sizes)
    positions: dict[int, list[int]] = {}
    for j, a in enumerate(marginals):
        if type(a) is not tuple and type(a) is not list \
                and (isinstance(a, (str, bytes)) or not isinstance(a, Sequence)):
            as_marginal(a, d)
        positions.setdefault(len(a), []).append(j)
    batch: list[Marginal] = [()] * len(marginals)
    orders: Orders = {}
    for k, js in sorted(positions.items()):
        attributes = np.array([marginals[j] for j in js]) if k else np.zeros((len(js), 0), dtype=np.int64)
        valid = (attributes.dtype.kind in "iu" and attributes.shape == (len(js), k)
                 and bool(np.all((attributes >= 0) & (attributes < d)))
                 and bool(np.all(np.diff(attributes, axis=1) > 0)))
        if not valid:
            for j in js:
                as_marginal(marginals[j], d)
        attributes = attributes.astype(np.int64)
        for j, key in zip(js, map(tuple, attributes.tolist())):
            batch[j] = key
        cells = np.prod(sizes[attributes].astype(np.float64), axis=1)
        if np.any(cells >= MAX_MARGINAL_CELLS):
            big = batch[js[int(np.argmax(cells))]]
            raise DomainTooLargeError(
                f"marginal {big} has about {cells.max():.3g} cells, above MAX_MARGINAL_CELLS = 2^62."
            )
        orders[k] = (np.array(js, dtype=np.int64), attributes)
    if len(set(batch)) < len(batch):
        seen: set[Marginal] = set()
        twice = next(a for a in batch if a in seen or seen.add(a))  # type: ignore[func-returns-value]
        raise ShapeError(f"marginal {twice} is listed twice; list each marginal once (use weights to favour it).")
    return tuple(batch), orders


def check_rho(rho: float | Fraction) -> Fraction:
    """ρ as an exact Fraction, or PrivacyParameterError unless it is a finite real number > 0."""
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not math.isfinite(rho) or rho <= 0:
        raise PrivacyParameterError(f"rho must be a finite number > 0 (zCDP; pcost = 2ρ); got {rho!r}.")
    return Fraction(rho)


def check_weights(weights: Sequence[float] | None, m: int) -> FloatArray:
    """One finite weight > 0 per marginal (default all 1), or ShapeError."""
    if weights is None:
        return np.ones(m)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (m,):
        raise ShapeError(f"weights needs one value per marginal ({m}); got shape {w.shape}.")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ShapeError("every weight must be a finite number > 0 (a larger weight buys a smaller variance).")
    return w


def check_request(orders: Orders, batch: int, objective: str, rho: float | Fraction, weights: Sequence[float] | None,
                  *, sets: str, pair: str) -> tuple[Fraction, FloatArray]:
    """The checks both planners make on a request after its sets are read: a known objective, ρ as
    an exact Fraction, one weight per set, and at most MAX_SUBSET_PAIRS (set, subset) pairs.
    ``sets``/``pair`` name the sets in messages ("marginals"/"marginal", "query sets"/"set")."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}; got {objective!r}.")
    budget = check_rho(rho)
    w = check_weights(weights, batch)
    pairs = sum(len(js) << k for k, (js, _) in orders.items())
    if pairs > MAX_SUBSET_PAIRS:
        raise DomainTooLargeError(
            f"the {sets} have {pairs:,} ({pair}, subset) pairs, above MAX_SUBSET_PAIRS = "
            f"{MAX_SUBSET_PAIRS:,}; request fewer or lower-order {sets}."
        )
    return budget, w


# ============================================================================ tables over the closure
def closure_tables(
    lattice: Lattice, marginal_tables: Mapping[Sequence[int], npt.ArrayLike],
) -> list[npt.NDArray[np.integer]]:
    """The exact integer table of every closure set: given ones, others summed from a superset."""
    given: dict[int, npt.NDArray[np.integer]] = {}
    for key, table in marginal_tables.items():
        s = lattice.locate(key, what="table")
        given[s] = _counts(table, lattice.shape(s), lattice.closure[s])
    owner = _owners(lattice, np.array(sorted(given), dtype=np.int64))
    missing = np.flatnonzero(owner < 0)
    if missing.size:
        raise ShapeError(
            f"no table covers {lattice.closure[int(missing[0])]}; pass the table of every requested "
            "marginal (or of a superset of it)."
        )
    tables: list[npt.NDArray[np.integer]] = []
    for s, o in enumerate(owner.tolist()):
        if s == o:
            tables.append(given[s])
            continue
        big, small = lattice.closure[o], set(lattice.closure[s])
        tables.append(given[o].sum(axis=tuple(b for b, i in enumerate(big) if i not in small)))
    return tables


def _owners(lattice: Lattice, given: IntArray) -> IntArray:
    """For every closure set, the given superset with the fewest cells (itself if given), or −1."""
    subsets, supersets = [], []
    for k in np.unique(lattice.set_size[given]).tolist():
        batch = given[lattice.set_size[given] == k]
        ids = lattice.subset_ids(batch)
        subsets.append(ids.ravel())
        supersets.append(np.repeat(batch, ids.shape[1]))
    subset, superset = np.concatenate(subsets), np.concatenate(supersets)
    cells = np.array([math.prod(shape) for shape in lattice.group_shapes], dtype=np.float64)[lattice.group[superset]]
    order = np.lexsort((superset, cells, subset))
    first = np.r_[True, np.diff(subset[order]) != 0]
    owner = np.full(len(lattice.sets), -1, dtype=np.int64)
    owner[subset[order][first]] = superset[order][first]
    return owner


def _counts(table: npt.ArrayLike, shape: tuple[int, ...], key: Marginal) -> npt.NDArray[np.integer]:
    """The table as an integer array of the right shape (kept in its own integer dtype)."""
    values = np.asarray(table)
    if values.shape != shape:
        raise ShapeError(f"the table of {key} must have shape {shape} (one axis per attribute); got {values.shape}.")
    if np.issubdtype(values.dtype, np.integer):
        return values
    if not np.issubdtype(values.dtype, np.floating) or not np.all(np.isfinite(values)) or np.any(values % 1 != 0):
        raise DataError(f"the table of {key} must hold integer counts; got dtype {values.dtype}.")
    return values.astype(np.int64)

