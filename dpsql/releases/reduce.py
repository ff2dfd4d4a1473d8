"""A kept measurement's information about a statement group's cells.

A group asks about x_G, its data vector over the product of its axes (per axis, a partition of the
column's base cells). Its pool works on a *target* T that refines G on G's columns only: each of
them at the common refinement of G's cells and the cells of the measurements that join, while T has
at most a given number of cells (:func:`refinement`), so that measurements over crossing cells of
one column are combined exactly. A kept measurement y = Ã x_K + z lives on its own cells K. On
each column both have, the *meet* of the two partitions — the finest partition both refine: the connected
classes of base cells, a K cell and a G cell being linked by every base cell they share — is what
both can speak of. Over the product of the meet classes of the shared columns, θ = P x_K = Q x_G
is a marginal of both: P sums K's cells into classes (columns only K has are summed out), Q sums
G's cells (columns only G has lie inside each class).

With everything about x_K other than θ a free nuisance parameter η, write x_K = U φ + N η with
[U N] orthonormal, U = Pᵀ D^(-1/2) (D the class sizes, so φ = D^(-1/2) θ) and N the within-class
contrasts. The measurement's information about φ is the Schur complement of the information
M = Ãᵀ Ã / σ² in those coordinates,

    S_φ = Uᵀ M U − Uᵀ M N (Nᵀ M N)⁺ Nᵀ M U,     r_φ = Uᵀ b − Uᵀ M N (Nᵀ M N)⁺ Nᵀ b   (b = Ãᵀ y / σ²),

with E[r_φ] = S_φ φ and Cov[r_φ] = S_φ whatever η is (Rao, "Linear Statistical Inference and
Its Applications", 1973, 4a.4; the profile information). On G's cells: S_G = Qᵀ D^(-1/2) S_φ
D^(-1/2) Q and r_G = Qᵀ D^(-1/2) r_φ. Independent measurements add: Σ S_G and Σ r_G are the
information and score of a GLS estimate of x_G that is unbiased on every answerable query, with
exact variance w (Σ S_G)⁺ wᵀ (:mod:`dpsql.releases.gls`). Where a measurement's cells refine
nothing away (every K cell its own class: K is G or a coarsening of it), S_G is M itself, lifted.

Summing several measurements' information over the same cells before the reduction keeps what they
say jointly about the nuisance (S of a sum ⪰ the sum of the S's); measurements over other cells
have their own nuisance, and reducing each alone loses nothing when the nuisances are unrelated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from dpsql.releases.whitening import above_cutoff, certain_cholesky, whitening

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Axes = Sequence[tuple[str, IntArray]]

#: A reduction onto a meet's classes: (S_θ, r_θ, a root R_θ of S_θ or None).
Reduced = tuple[FloatArray, FloatArray, FloatArray | None]
#: Eigenvalues of Nᵀ M N below this share of the largest are its null space (η directions not measured).
EIGEN_CUTOFF = 1e-10


@dataclass(frozen=True, slots=True, kw_only=True)
class Meet:
    """The meet of a measurement's cells K with a group's cells G: per K cell and per G cell (flat,
    row-major over each one's axes), its class (-1: a cell no row can fall in), and the classes."""

    of_measured: IntArray
    of_group: IntArray
    classes: int

    @property
    def refines(self) -> bool:
        """Whether the measurement's cells are the classes themselves (nothing to reduce)."""
        return bool(np.all(self.of_measured >= 0)) and np.unique(self.of_measured).size == self.of_measured.size


def reduction_work(cells: int) -> int:
    """Multiply-adds to reduce a measurement over ``cells`` cells, at most (a dense Schur complement:
    three products of n × n matrices); it does not depend on the target, so a pool's admissions do not."""
    return 3 * cells**3 + cells**2


def refinement(group: Axes, others: Sequence[Axes], limit: int) -> tuple[tuple[str, IntArray], ...]:
    """The group's columns, each at the common refinement of its cells and those of ``others`` on it
    (taken in order, each only while the product of cells stays at most ``limit``). A base cell any
    participant maps to -1 (rows no scan reads) is left out."""
    current = {key: np.asarray(cells, dtype=np.int64) for key, cells in group}
    for axes in others:
        trial = dict(current)
        for key, cells in axes:
            if key in trial:
                trial[key] = _common_refinement(trial[key], np.asarray(cells, dtype=np.int64))
        if int(np.prod([int(c.max()) + 1 for c in trial.values()], dtype=np.int64)) <= limit:
            current = trial
    return tuple((key, current[key]) for key, _ in group)


def _common_refinement(first: IntArray, second: IntArray) -> IntArray:
    """Per base cell, its class among the base cells neither partition tells apart (-1: left out)."""
    dropped = (first < 0) | (second < 0)
    classes = np.full(first.size, -1, dtype=np.int64)
    if not np.all(dropped):
        pairs = np.stack([first[~dropped], second[~dropped]], axis=1)
        classes[~dropped] = np.unique(pairs, axis=0, return_inverse=True)[1].ravel()
    return classes


def cell_map(finer: Axes, coarser: Axes) -> IntArray:
    """For each cell of ``finer`` (flat), the flat index of the ``coarser`` cell holding it (same axes
    in the same order; ``finer`` refines ``coarser`` on each); -1 where none."""
    per_axis = []
    for (_, fine), (_, coarse) in zip(finer, coarser):
        size = int(fine.max()) + 1
        of_class = np.full(size, -1, dtype=np.int64)
        kept = fine >= 0
        of_class[fine[kept]] = coarse[kept]
        per_axis.append(of_class)
    if not per_axis:
        return np.zeros(1, dtype=np.int64)
    grid = _grid([c.size for c in per_axis])
    cells = [per[g] for per, g in zip(per_axis, grid)]
    sizes = [int(c.max()) + 1 for _, c in coarser]
    missing = np.any(np.stack(cells) < 0, axis=0)
    flat = np.ravel_multi_index(tuple(np.maximum(c, 0) for c in cells), sizes)
    return np.where(missing, -1, flat).astype(np.int64)


def axis_meet(measured: IntArray, group: IntArray) -> tuple[IntArray, IntArray, int]:
    """One column: per measured cell and per group cell, its meet class (-1: none of its base cells
    holds rows), and the number of classes. Both arrays map the column's base cells to cells."""
    sizes = int(measured.max()) + 1, int(group.max()) + 1
    linked = (measured >= 0) & (group >= 0)
    nodes = sizes[0] + sizes[1]
    graph = sp.coo_array((np.ones(int(linked.sum())), (measured[linked], sizes[0] + group[linked])),
                         shape=(nodes, nodes))
    _, labels = connected_components(graph, directed=False)
    touched = np.zeros(nodes, dtype=bool)
    touched[measured[linked]] = True
    touched[sizes[0] + group[linked]] = True
    kept, renumbered = np.unique(labels[touched], return_inverse=True)
    classes = np.full(nodes, -1, dtype=np.int64)
    classes[touched] = renumbered.ravel()
    return classes[:sizes[0]], classes[sizes[0]:], int(kept.size)


def meet(measured: Axes, group: Axes) -> Meet:
    """The meet of a measurement's cells with a group's, over the columns both have (in the group's order)."""
    mine, theirs = dict(measured), dict(group)
    shared = [key for key, _ in group if key in mine]
    measured_shape = [int(cells.max()) + 1 for _, cells in measured]
    group_shape = [int(cells.max()) + 1 for _, cells in group]
    of_measured = np.zeros(int(np.prod(measured_shape, dtype=np.int64)), dtype=np.int64)
    of_group = np.zeros(int(np.prod(group_shape, dtype=np.int64)), dtype=np.int64)
    measured_grid, group_grid = _grid(measured_shape), _grid(group_shape)
    measured_keys, group_keys = [key for key, _ in measured], [key for key, _ in group]
    classes = 1
    for key in shared:
        on_measured, on_group, count = axis_meet(mine[key], theirs[key])
        column_measured = on_measured[measured_grid[measured_keys.index(key)]]
        column_group = on_group[group_grid[group_keys.index(key)]]
        of_measured = np.where((of_measured < 0) | (column_measured < 0), -1, of_measured * count + column_measured)
        of_group = np.where((of_group < 0) | (column_group < 0), -1, of_group * count + column_group)
        classes *= count
    return Meet(of_measured=of_measured, of_group=of_group, classes=classes)


def _grid(shape: Sequence[int]) -> IntArray:
    """Per axis, the cell of every flat index (row-major): shape (axes, cells); one cell with no axes."""
    cells = int(np.prod(shape, dtype=np.int64))
    return np.indices(tuple(shape), dtype=np.int64).reshape(len(shape), cells)


def reduce(information: FloatArray, score: FloatArray,
           found: Meet) -> tuple[FloatArray | None, FloatArray, FloatArray | None]:
    """(S_G, r_G, None): the information and score about the group's cells of a measurement with
    information M = ``information`` and score b = ``score`` over its own cells (module docstring)."""
    return lifted(on_classes(information, score, found), found)


def lifted(reduced: tuple[FloatArray, FloatArray] | Reduced,
           found: Meet) -> tuple[FloatArray | None, FloatArray, FloatArray | None]:
    """(S_G, r_G, R_G) from (S_θ, r_θ[, R_θ]), the reduction onto the meet's classes (:func:`on_classes`,
    which depends on the meet only through ``found.of_measured`` and ``found.classes``): R_G is the
    root R_θ lifted alike, standing for S_G = R_Gᵀ R_G (then S_G is None: not formed); without a root,
    (S_G, r_G, None)."""
    theta, rhs = reduced[0], reduced[1]
    root = reduced[2] if len(reduced) > 2 else None
    cells = found.of_group.size
    on = found.of_group >= 0
    index = found.of_group[on]
    r = np.zeros(cells)
    r[on] = rhs[index]
    if root is not None:
        R = np.zeros((root.shape[0], cells))
        R[:, on] = root[:, index]
        return None, r, R
    S = np.zeros((cells, cells))
    S[np.ix_(on, on)] = theta[np.ix_(index, index)]
    return S, r, None


def on_classes(M: FloatArray, b: FloatArray, found: Meet) -> tuple[FloatArray, FloatArray]:
    """The Schur complement onto θ (the classes' totals) and its score: it reads ``found.of_measured``
    and ``found.classes`` only, so targets meeting a measurement in the same classes share it."""
    classes, t = found.of_measured, found.classes
    if found.refines:  # K cells are the classes: a relabelling
        S, r = np.zeros((t, t)), np.zeros(t)
        S[np.ix_(classes, classes)] = M
        r[classes] = b
        return S, r
    scale, U, N = _class_coordinates(found)
    MU, MN = np.asarray(M @ U), np.asarray(M @ N)
    Muu, Mun, Mnn = np.asarray(U.T @ MU), np.asarray(U.T @ MN), np.asarray(N.T @ MN)
    white = whitening(Mnn, EIGEN_CUTOFF)                        # (Nᵀ M N)⁺ = half halfᵀ
    half = white[1] if white is not None else None
    if half is None:
        eigenvalues, vectors = np.linalg.eigh(Mnn) if Mnn.size else (np.zeros(0), np.zeros((0, 0)))
        keep = above_cutoff(eigenvalues, EIGEN_CUTOFF)
        half = vectors[:, keep] / np.sqrt(eigenvalues[keep])
    cross = Mun @ half
    S_phi = Muu - cross @ cross.T
    r_phi = np.asarray(U.T @ b) - cross @ (half.T @ np.asarray(N.T @ b))
    S_phi = (S_phi + S_phi.T) / 2
    return _on_totals(S_phi, r_phi, scale)


def on_classes_of_root(X: FloatArray, b: FloatArray, found: Meet) -> Reduced:
    """:func:`on_classes` of M = XᵀX given X (m × n; the stacked Ã/σ of measurements over the same
    cells), without forming or decomposing Nᵀ M N when X has fewer rows than cells.

    With X N = Uₓ Σ Vᵀ (thin SVD), (Nᵀ M N)⁺ = V Σ⁻² Vᵀ over the singular values kept by the same
    rule (σᵢ² above ``EIGEN_CUTOFF`` of the largest), so Uᵀ M N (Nᵀ M N)⁺ Nᵀ M U = (XU)ᵀ Pₓ (XU) with
    Pₓ = Uₓ Uₓᵀ the projector onto X N's kept range:

        S_φ = ((I − Pₓ) X U)ᵀ ((I − Pₓ) X U),     r_φ = Uᵀ b − (XU)ᵀ Uₓ Σ⁻¹ Vᵀ Nᵀ b.

    An SVD of m × n' costs O(m² n') against the O(n'³) of Nᵀ M N's eigendecomposition (Golub and Van
    Loan, "Matrix Computations", 2013, 8.6). Returns (S_θ, r_θ, R_θ), R_θ = (I − Pₓ) X U D^(-1/2) a root of
    S_θ = R_θᵀ R_θ of m rows (where the K cells are the classes, N is empty and R_θ is X, its columns relabelled: no
    decomposition at all); where X has as many rows as cells, M is reduced as it is and R_θ is
    :func:`psd_root`'s."""
    if X.shape[0] >= found.of_measured.size:
        S_theta, r_theta = on_classes(X.T @ X, b, found)
        return S_theta, r_theta, psd_root(S_theta)
    scale, U, N = _class_coordinates(found)
    XU = np.asarray((U.T @ X.T).T)                                # X U, m × t
    XN = np.asarray((N.T @ X.T).T)                                # X N, m × n'
    left, singular, right = np.linalg.svd(XN, full_matrices=False) if XN.size else \
        (np.zeros((X.shape[0], 0)), np.zeros(0), np.zeros((0, XN.shape[1])))
    keep = above_cutoff(singular**2, EIGEN_CUTOFF)
    left, singular, right = left[:, keep], singular[keep], right[keep]
    residual = XU - left @ (left.T @ XU)                          # (I − Pₓ) X U
    r_phi = np.asarray(U.T @ b) - XU.T @ (left @ ((right @ np.asarray(N.T @ b)) / singular))
    root = residual * scale                                       # R_θ = R_φ D^(-1/2)
    return root.T @ root, r_phi * scale, root


def psd_root(S: FloatArray) -> FloatArray:
    """R with RᵀR = S for a positive semidefinite S (t × t), of as many rows as S's numerical rank (its
    eigenvalues above ``EIGEN_CUTOFF`` of the largest). Where that rank is certain to be the number of
    non-zero diagonal entries (:func:`dpsql.releases.whitening.certain_cholesky`: S on those cells is
    of full rank under the cutoff, the others are zero rows), R is Lᵀ of S's Cholesky factor there,
    about 2t³/3 multiply-adds; otherwise S's eigenvectors scaled by √λ, the eigenvalues at or below the
    cutoff left out (≈ 9t³; Golub and Van Loan, "Matrix Computations", 2013, 4.2 and 8.3). What is left
    out moves S by at most that share of its largest eigenvalue, below the cutoff of any sum it joins
    (whose largest eigenvalue is at least S's)."""
    if not S.size:
        return np.zeros((0, S.shape[0]))
    certain = certain_cholesky(S, EIGEN_CUTOFF)
    if certain is not None:
        kept, lower, _ = certain
        root = np.zeros((kept.size, S.shape[0]))
        root[:, kept] = lower.T
        return root
    eigenvalues, vectors = np.linalg.eigh(S)
    keep = above_cutoff(eigenvalues, EIGEN_CUTOFF)
    return (vectors[:, keep] * np.sqrt(eigenvalues[keep])).T


def _class_coordinates(found: Meet) -> tuple[FloatArray, sp.csr_array, sp.csc_array]:
    """(D^(-1/2) per class (0 for an empty class), U = Pᵀ D^(-1/2), N the within-class contrasts)."""
    classes, t = found.of_measured, found.classes
    sizes = np.bincount(classes[classes >= 0], minlength=t).astype(np.float64)
    scale = np.zeros(t)
    scale[sizes > 0] = 1.0 / np.sqrt(sizes[sizes > 0])
    members = np.flatnonzero(classes >= 0)
    U = sp.csr_array((scale[classes[members]], (members, classes[members])), shape=(classes.size, t))
    return scale, U, contrasts(classes)


def _on_totals(S_phi: FloatArray, r_phi: FloatArray, scale: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(S_θ, r_θ) from φ = D^(-1/2) θ (empty classes: zero)."""
    return S_phi * np.outer(scale, scale), r_phi * scale


def contrasts(classes: IntArray) -> sp.csc_array:
    """An orthonormal basis of the vectors over K's cells that sum to zero within every class (and
    are free on cells of no class): Helmert contrasts per class, unit vectors for the rest. Columns
    class by class (cells of no class first), within a class of members m_0 … m_{k-1} (cell order)
    the j-th (j = 1 … k-1) is (1, …, 1, −j, 0, …)/√(j(j+1)) over m_0 … m_j."""
    order = np.argsort(classes, kind="stable")
    starts = np.concatenate([[0], np.flatnonzero(np.diff(classes[order])) + 1]) if classes.size else \
        np.zeros(0, dtype=np.int64)
    sizes = np.diff(np.concatenate([starts, [classes.size]])).astype(np.int64)
    free = classes[order[starts]] < 0 if classes.size else np.zeros(0, dtype=bool)
    # per column: where its class starts among the sorted cells, and j (0: a unit vector of a free cell)
    per_class = np.where(free, sizes, sizes - 1)
    start = np.repeat(starts, per_class)
    within = np.arange(int(per_class.sum())) - np.repeat(np.cumsum(per_class) - per_class, per_class)
    unit = np.repeat(free, per_class)
    j = np.where(unit, 0, within + 1)
    start = np.where(unit, start + within, start)
    # per entry: its column, its place t among the column's rows, and the value
    entries = j + 1
    column = np.repeat(np.arange(j.size), entries)
    t = np.arange(int(entries.sum())) - np.repeat(np.cumsum(entries) - entries, entries)
    jj = j[column].astype(np.float64)
    safe = np.maximum(jj, 1.0)
    norm = 1.0 / np.sqrt(safe * (safe + 1.0))
    values = np.where(jj > 0, np.where(t < jj, norm, -jj * norm), 1.0)
    rows = order[start[column] + t]
    return sp.csc_array((values, (rows, column)), shape=(classes.size, j.size))
