"""ResidualPlanner+: generalized marginals mixing range, prefix and custom queries with marginals.

He, Xiao, Toksoz, Ding, Zhang and Kifer, "ResidualPlanner+: a scalable matrix mechanism for marginals
and beyond" (arXiv:2305.08175, 2023), Section 7. Each attribute i has a public size nᵢ and a
*basis* Wᵢ (mᵢ × nᵢ: identity, prefix sums, all ranges or any custom matrix). A query set A (a
strictly increasing attribute tuple) asks the Πᵢ mᵢ queries
    Q_A = ⊗_{i∈A} Wᵢ ⊗_{i∉A} 1ᵀ,
e.g. the age ranges of every gender, in row-major (np.kron) order. Nothing here forms Π nᵢ.

Residual pieces (dpsql.residual.pieces, Algorithm 4). A per-attribute strategy Sᵢ is realised by an
integer matrix Tᵢ (tᵢ × nᵢ, Tᵢ1 = 0, rank nᵢ − 1) and a scale τᵢ with Subᵢ = Tᵢ/τᵢ; from them
    βᵢ = max diag(SubᵢᵀSubᵢ) (exactly ‖Tᵢ col‖²_max/τᵢ²), Subᵢ⁺ = (SubᵢᵀSubᵢ + J/n)⁻¹Subᵢᵀ,
    aᵢ[r] = ‖(WᵢSubᵢ⁺)[r]‖², bᵢ[r] = ((Wᵢ1)[r]/nᵢ)², fᵢ = Σ aᵢ, gᵢ = Σ bᵢ.
Everything below is computed from the integer Tᵢ, so privacy and variances are exact for what is
measured; rounding a real strategy only costs optimality.

Base mechanisms (Eq. 9, Thm 7.1). For every S in the closure (all subsets of requested sets)
    ω_S = (⊗_{i∈S} Subᵢ) v_S + N(0, σ_S² I),  v_S the COUNT table over S.
Rows of different S are orthogonal (Subᵢ1 = 0), so the cost matrix is Σ_S σ_S⁻² ⊗_{i∈S} SubᵢᵀSubᵢ
⊗_{i∉S} J; its diagonal entry at cell c is Σ_S σ_S⁻² Π_{i∈S} diag(SubᵢᵀSubᵢ)[cᵢ], maximised at once
by every term at the per-attribute argmax, so the closure costs exactly
    pcost = Σ_S p_S/σ_S²,  p_S = Π_{i∈S} βᵢ,   and is ρ = pcost/2 zCDP (add/remove one record).
Reconstruction (Alg. 6, Thm 7.2). With Bᵢ = [1/nᵢ · 1 | Subᵢ⁺] (nᵢ × (1 + tᵢ)), the table estimate
q_A = (⊗_{i∈A} Bᵢ) Ω_A (Ω_A holds ω_S, S ⊆ A, in its block "index 0 on A∖S, 1… on S") is
unbiased for the COUNT table over A (Subᵢ⁺Subᵢ = C), the answers are (⊗ Wᵢ) q_A, and as the
releases of different S are independent with orthogonal rows this is the BLUE. Per query r:
    Var_A[r] = Σ_{S⊆A} σ_S² Π_{i∈S} aᵢ[rᵢ] Π_{i∈A∖S} bᵢ[rᵢ],
    SoV_A = Σ_r Var_A[r] = Σ_{S⊆A} σ_S² Π_{i∈S} fᵢ Π_{i∈A∖S} gᵢ   (a Kronecker contraction).
Selection, weights w_A > 0 (default 1), budget c = pcost = 2ρ:
    sum_variance  min Σ_A w_A SoV_A: Lemma 2 verbatim with v_S = Σ_{A⊇S} w_A Π_S f Π_{A∖S} g,
        T = (Σ_S √(v_S p_S))²/c at σ_S² = √(p_S/v_S) Σ_T √(v_T p_T)/c. T depends on attribute i
        only through fᵢβᵢ = max diag(Kᵢ) tr(Wᵢ Kᵢ⁺ Wᵢᵀ), increasingly in every term, so the
        per-attribute problem separates: fᵢβᵢ is the Gaussian matrix-mechanism loss of the centred
        basis WᵢC, minimised over Kᵢ ⪰ 0 on 1⊥. Its Lagrange dual is max_μ ‖WᵢC diag(√μ)‖²_* over
        the simplex, the same as unconstrained OPT₀ on WᵢC, whose optimum X has null vector 1
        (WᵢC1 = 0); so ``pieces.attribute_strategy`` (OPT₀ on WᵢC, the default) gives the best
        residual pieces of *any* RP+ mechanism for this objective, up to OPT₀'s certified 1e-5
        gap and PIECE_TOLERANCE. The paper's rule (OPT₀ on [1ᵀ; WᵢC], ``rule="paper"``)
        reproduces its Tables 8 and 10–14 and is never better (e.g. 9.00 → 8.26 on Table 12's
        3-way prefix workload).
    max_variance  min max_A w_A max_r Var_A[r]. Var_A[r] is linear in (aᵢ[rᵢ], bᵢ[rᵢ]) with
        nonnegative coefficients for each attribute, so its maximum over rows is attained on
        Π_{i∈A} Hᵢ, Hᵢ the rows on the upper-right convex hull of {(aᵢ[r], bᵢ[r])} (replace the
        coordinates of a maximiser one at a time). That gives Σ_A Π|Hᵢ| linear constraints; the
        convex program min Σ p_S/u_S s.t. C u ≤ 1 is solved by dpsql.residual.solver's certified
        interior-point method, on the full closure (no symmetry reduction).
    ``bound`` is the optimum (sum) or the dual bound (max) over all σ² for the selected pieces.
Secure measurement (discrete Gaussian; Algorithm 3 extended to general Sᵢ). For each S,
    y_S = (⊗_{i∈S} Tᵢ) v_S + z,  z iid N_Z(0, γ_S²),  γ_S² = σ̄_S² Π_{i∈S} τᵢ² (rational, ≥ σ_S²Πτ²),
computed exactly in integers (int64, else Python integers); ω_S = y_S/Π τᵢ is post-processing.
A record changes y_S by ⊗ Tᵢ[:, cᵢ], of squared norm ≤ Π_{i∈S} ‖Tᵢ col‖²_max, so by Canonne–Kamath–
Steinke y_S is ρ_S = Π ‖Tᵢ col‖²_max/(2γ_S²) = p_S/(2σ̄_S²)-zCDP: exactly the continuous cost, as
in Algorithm 3 (which this is for integer Sᵢ = I). Composition adds the ρ_S (exactly, by
dpsql.residual.rational). The continuous
formulas then hold with σ_S² = Var[N_Z(0, γ_S²)]/Π τᵢ² < σ̄_S² (computed exactly). Draws per S:
Π tᵢ (tᵢ = nᵢ for the identity, ≤ nᵢ for a rounded piece, the nonconstant rows of an integer
strategy). γ² above 2^56 (sets with two or more rounded pieces, as τᵢ ≈ 2^12–2^15) take
dpsql.noise's exact scalar sampler: exact, but ~30× slower per draw.

Costs (E = Σ_A 2^|A| set–subset pairs): select O(E log E) plus one OPT₀ per distinct basis
(O(n³) per iteration) and O(n³ log PIECE_BITS) rounding; max_variance adds Σ_A Π|Hᵢ| constraints.
measure Σ_S Π tᵢ exact draws plus O(|S| Π nᵢ · n) integer work; reconstruct O(|A| Π(nᵢ+1) n +
cost(W) Π mᵢ) per set; variance O(2^|A| + |A| Π mᵢ).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql import noise
from dpsql.errors import DomainTooLargeError, ShapeError
from dpsql.matrix.workloads import Explicit, Workload
from dpsql.planning.mechanism import exact_along_axis
from dpsql.residual import base, rational, solver
from dpsql.residual.lattice import (
    BATCH_CELLS,
    FloatArray,
    IntArray,
    Lattice,
    Marginal,
    Objective,
    build_lattice,
    check_marginals,
    check_request,
    closure_tables,
    unique_rows,
)
from dpsql.residual.pieces import ResidualPiece, as_workload, build_pieces

__all__ = ["PlusMeasurements", "PlusSelection", "gaussian_parameters", "hull_variance", "measure", "query_variance",
           "reconstruct", "select"]

IntTensor = npt.NDArray[np.int64] | npt.NDArray[np.object_]

#: Most entries of one dense answer or variance tensor (Π mᵢ over a query set).
MAX_QUERY_ENTRIES = 2**27
#: dpsql.noise.discrete_gaussian's largest σ² (its int64 samples); beyond it draws are Python integers.
SAMPLER_LIMIT = 2**118


# ============================================================================ selection
@dataclass(frozen=True, eq=False, kw_only=True)
class PlusSelection(base.Selection):
    """The selected RP+ base mechanisms: one residual piece per attribute, one noise scale per closure set.

    Fields (besides those of dpsql.residual.base.Selection, whose ``marginals`` here are query sets,
    ``sigma2`` is γ_S²/Π τᵢ² and ``bound`` holds over every choice of σ² for these pieces):
        bases        one basis Wᵢ per attribute.
        pieces       per attribute its residual piece (None for an attribute no query set uses).
        noise_class  per closure set, its class: sets of a class share γ² (so their draws).
        class_gamma2 γ² per class, the exact rational discrete-Gaussian parameter.
    """

    bases: tuple[Workload, ...] = field(repr=False)
    pieces: tuple[ResidualPiece | None, ...] = field(repr=False)
    noise_class: IntArray = field(repr=False)
    class_gamma2: tuple[Fraction, ...] = field(repr=False)

    def variance(self, marginal: Sequence[int]) -> FloatArray:
        """Exact variance of every query of a closure set, shaped (mᵢ)_{i∈A} (module doc)."""
        return query_variance(self, self.sigma2, marginal)

    @cached_property
    def sum_variances(self) -> FloatArray:
        """SoV_A, the sum of the query variances of every requested set, in ``marginals`` order."""
        coefficient = _sum_coefficients(self.lattice, self.pieces)
        return np.bincount(self.lattice.pair_marginal, weights=coefficient * self.sigma2[self.lattice.pair_set],
                           minlength=len(self.marginals)).astype(np.float64)

    @cached_property
    def max_variances(self) -> FloatArray:
        """The largest query variance of every requested set (over its hull rows: exact)."""
        return np.array([hull_variance(self, self.sigma2, a).max() for a in self.marginals])

    def queries(self) -> int:
        """Σ_A Π_{i∈A} mᵢ: the number of queries requested."""
        return sum(math.prod(self.bases[i].shape[0] for i in a) for a in self.marginals)

    def rmse(self) -> float:
        """√(total query variance / number of queries) over the requested sets (the paper's RMSE)."""
        return math.sqrt(float(self.sum_variances.sum()) / self.queries())

    def max_variance(self) -> float:
        """The largest query variance over the requested sets."""
        return float(self.max_variances.max())

    def objective_value(self) -> float:
        """Σ_A w_A SoV_A (sum_variance) or max_A w_A max_r Var_A[r] (max_variance)."""
        w = np.asarray(self.weights)
        if self.objective == "sum_variance":
            return float(w @ self.sum_variances)
        return float(np.max(w * self.max_variances))

    def piece(self, attribute: int) -> ResidualPiece:
        """The residual piece of an attribute some query set uses."""
        piece = self.pieces[attribute]
        if piece is None:
            raise ShapeError(f"no query set uses attribute {attribute}, so it has no residual piece.")
        return piece

    @cached_property
    def squares(self) -> FloatArray:
        """Π_{i∈S} τᵢ² per closure set (γ_S² = σ̄_S² Π τᵢ²)."""
        return _squares(self.lattice, self.pieces)


def select(
    bases: Sequence[Workload | npt.ArrayLike],
    marginals: Sequence[Sequence[int]],
    *,
    objective: Objective = "sum_variance",
    rho: float | Fraction = 0.5,
    weights: Sequence[float] | None = None,
    strategies: Sequence[Workload | npt.ArrayLike | None] | None = None,
) -> PlusSelection:
    """Choose residual pieces and noise scales for the generalized marginals ``marginals``.

    Args:
        bases: one basis Wᵢ per attribute (a Workload such as Identity(n), Prefix(n), AllRange(n),
            Ranges(n, …), or a 2-D matrix), over nᵢ ≥ 2 public cells; some row must be non-constant
            and some row must have a nonzero total.
        marginals: the query sets, strictly increasing attribute tuples (() is the grand total);
            set A asks ⊗_{i∈A} Wᵢ ⊗_{i∉A} 1ᵀ. Each appears once.
        objective: "sum_variance" (Σ_A w_A · sum of the query variances of A; the paper's RMSE
            objective at unit weights) or "max_variance" (max_A w_A · largest query variance).
        rho: the zCDP budget ρ > 0 of the measurement (pcost = 2ρ).
        weights: one weight w_A > 0 per query set (default 1).
        strategies: per attribute None (default: :func:`attribute_strategy`) or a strategy Sᵢ
            with nᵢ columns and full column rank (an integer one is measured exactly as given).

    Privacy: selection reads only public sizes, bases, strategies and the workload, never data.
    The returned ``rho`` (≤ the requested ρ) is exactly what :func:`measure` spends.

    Raises:
        ShapeError: malformed bases, strategies, query sets or weights.
        ValueError: an unknown objective.
        PrivacyParameterError: rho is not a finite number > 0, or too small to account exactly.
        DomainTooLargeError: more than MAX_SUBSET_PAIRS set–subset pairs.
    """
    W = _check_bases(bases)
    sizes = np.array([basis.shape[1] for basis in W], dtype=np.int64)
    batch, orders = check_marginals(marginals, sizes)
    budget, w = check_request(orders, len(batch), objective, rho, weights, sets="query sets", pair="set")
    used = sorted({i for a in batch for i in a})
    pieces = build_pieces(W, _check_strategies(strategies, W), used)
    lattice = build_lattice(sizes, batch, orders)
    p = _set_products(lattice, [1.0 if q is None else float(q.beta) for q in pieces])
    c = 2.0 * float(budget)
    if objective == "sum_variance":
        sigma2, bound = _sum_variance_scales(lattice, _sum_coefficients(lattice, pieces), w, p, c)
    else:
        sigma2, bound = _max_variance_scales(lattice, pieces, w, p, c)
    classes, gamma2, spent = _rational_scales(lattice, pieces, sigma2, budget)
    return PlusSelection(
        domains=tuple(int(n) for n in sizes), bases=W, pieces=tuple(pieces), marginals=batch, objective=objective,
        weights=tuple(float(x) for x in w), noise_class=classes, class_gamma2=gamma2,
        sigma2=np.array([float(g) for g in gamma2])[classes] / _squares(lattice, pieces), rho=spent, bound=bound,
        lattice=lattice,
    )


def _check_bases(bases: Sequence[Workload | npt.ArrayLike]) -> tuple[Workload, ...]:
    if isinstance(bases, (str, bytes)) or not isinstance(bases, Sequence) or len(bases) == 0:
        raise ShapeError("bases must be a non-empty list with one basis per attribute, e.g. [Prefix(10), Identity(3)].")
    out = []
    for i, value in enumerate(bases):
        W = as_workload(value, f"the basis of attribute {i}")
        m, n = W.shape
        if n < 2 or m < 1:
            raise ShapeError(
                f"the basis of attribute {i} is {m} × {n}; it needs at least one query over at least 2 cells "
                "(a constant attribute adds nothing: drop it)."
            )
        out.append(W)
    return tuple(out)


def _check_strategies(strategies: Sequence[Workload | npt.ArrayLike | None] | None,
                      bases: tuple[Workload, ...]) -> list[Workload | None]:
    if strategies is None:
        return [None] * len(bases)
    if isinstance(strategies, (str, bytes)) or not isinstance(strategies, Sequence) or len(strategies) != len(bases):
        raise ShapeError(f"strategies needs one entry (a strategy or None) per attribute ({len(bases)}).")
    return [None if s is None else as_workload(s, f"the strategy of attribute {i}") for i, s in enumerate(strategies)]


def _kind_codes(pieces: Sequence[ResidualPiece | None]) -> IntArray:
    """Per attribute a code equal for equal integer pieces (−1 if unused), plus a trailing −1 that
    the −1 padding of ``_Lattice.sets`` reads."""
    kinds: dict[tuple[int, int, bytes], int] = {}
    codes = [-1 if piece is None else kinds.setdefault((piece.scale, piece.T.shape[0], piece.T.tobytes()), len(kinds))
             for piece in pieces]
    return np.array(codes + [-1], dtype=np.int64)


def _set_products(lattice: Lattice, values: Sequence[float]) -> FloatArray:
    """Π_{i∈S} values[i] for every closure set S."""
    table = np.append(np.asarray(values, dtype=np.float64), 1.0)
    return np.prod(table[lattice.sets], axis=1)  # −1 padding reads the 1


def _pair_products(lattice: Lattice, kept: Sequence[float], dropped: Sequence[float]) -> FloatArray:
    """Per set–subset pair (A, S): Π_{i∈S} kept[i] Π_{i∈A∖S} dropped[i], vectorised per order."""
    keep, drop = np.asarray(kept, dtype=np.float64), np.asarray(dropped, dtype=np.float64)
    out = np.empty(len(lattice.pair_set))
    sizes = np.array([len(a) for a in lattice.marginals])
    for k in np.unique(sizes).tolist():
        js = np.flatnonzero(sizes == k)
        attributes = np.array([lattice.marginals[j] for j in js.tolist()], dtype=np.int64).reshape(len(js), k)
        masks = np.arange(1 << k)
        block = np.ones((len(js), 1 << k))
        for b in range(k):
            bit = (masks >> b & 1).astype(bool)
            block *= np.where(bit[None, :], keep[attributes[:, b]][:, None], drop[attributes[:, b]][:, None])
        out[lattice.pair_start[js][:, None] + masks] = block
    return out


def _sum_variance_scales(lattice: Lattice, coefficient: FloatArray, w: FloatArray, p: FloatArray,
                         c: float) -> tuple[FloatArray, float]:
    """Lemma 2: σ_S² = √(p_S/v_S) Σ_T √(v_T p_T)/c; returns (σ², T)."""
    v = np.bincount(lattice.pair_set, weights=w[lattice.pair_marginal] * coefficient, minlength=len(lattice.sets))
    root = math.fsum(np.sqrt(v * p).tolist())
    ones = np.ones(len(p), dtype=np.int64)
    return solver.normalise(p, ones, np.sqrt(p / v) * root / c, c), root**2 / c


def _max_variance_scales(lattice: Lattice, pieces: Sequence[ResidualPiece | None], w: FloatArray,
                         p: FloatArray, c: float) -> tuple[FloatArray, float]:
    """min max_A w_A max_r Var_A[r] at cost c: one constraint per hull pattern (module doc)."""
    rows, cols, values = [], [], []
    offset = 0
    for j, a in enumerate(lattice.marginals):
        k = len(a)
        chosen = _pieces_of(pieces, a)
        hulls = [piece.hull for piece in chosen]
        grid = np.stack(np.meshgrid(*hulls, indexing="ij"), axis=-1).reshape(-1, k) if k else np.zeros((1, 0), int)
        subsets = lattice.subset_ids(np.array([lattice.index[a]]))[0]
        for mask in range(1 << k):
            value = np.full(len(grid), w[j])
            for b, piece in enumerate(chosen):
                weights = piece.residual_weights if mask >> b & 1 else piece.total_weights
                value = value * weights[grid[:, b]]
            rows.append(offset + np.arange(len(grid)))
            cols.append(np.full(len(grid), subsets[mask]))
            values.append(value)
        offset += len(grid)
    C = sp.csr_array((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
                     shape=(offset, len(lattice.sets)))
    C.eliminate_zeros()
    u, lower = solver.minimise_cost(p, C)
    ones = np.ones(len(p), dtype=np.int64)
    return solver.normalise(p, ones, u * math.fsum((p / u).tolist()) / c, c), lower / c


def _pieces_of(pieces: Sequence[ResidualPiece | None], attributes: Sequence[int]) -> list[ResidualPiece]:
    """The pieces of attributes of a closure set (every one is used, so none is None)."""
    return [piece for i in attributes if (piece := pieces[i]) is not None]


def _squares(lattice: Lattice, pieces: Sequence[ResidualPiece | None]) -> FloatArray:
    """Π_{i∈S} τᵢ² per closure set."""
    return _set_products(lattice, [1.0 if piece is None else float(piece.scale) ** 2 for piece in pieces])


def _sum_coefficients(lattice: Lattice, pieces: Sequence[ResidualPiece | None]) -> FloatArray:
    """Per set–subset pair (A, S): Π_{i∈S} fᵢ Π_{i∈A∖S} gᵢ, the coefficient of σ_S² in SoV_A."""
    f = [1.0 if piece is None else piece.f for piece in pieces]
    return _pair_products(lattice, f, [1.0 if piece is None else piece.g for piece in pieces])


def gaussian_parameters(pieces: Sequence[ResidualPiece], sigma2: Fraction) -> tuple[Fraction, Fraction]:
    """(γ², ρ) of one residual release over attributes with these pieces at noise scale σ².

    γ² = σ² Π τᵢ² is the discrete-Gaussian parameter per draw; ρ = Π ‖Tᵢ col‖²_max/(2γ²) = Π βᵢ/(2σ²)
    is the exact zCDP cost (the squared L2 sensitivity of ⊗Tᵢ over 2γ²).
    """
    gamma2 = Fraction(sigma2) * math.prod(piece.scale**2 for piece in pieces)
    return gamma2, Fraction(math.prod(piece.column for piece in pieces)) / (2 * gamma2)


def _rational_scales(lattice: Lattice, pieces: Sequence[ResidualPiece | None], sigma2: FloatArray,
                     budget: Fraction) -> tuple[IntArray, tuple[Fraction, ...], Fraction]:
    """Noise classes (equal piece multiset and σ²), γ² per class rounded up, and the exact ρ spent.

    The sensitivity of a release over S is Π ‖Tᵢ col‖²_max (module doc); rounding and the exact
    sum are dpsql.residual.rational's, so ρ never exceeds the budget.
    """
    signature = np.sort(_kind_codes(pieces)[lattice.sets], axis=1)
    key = np.column_stack([signature, sigma2.view(np.int64)])
    _, classes = unique_rows(key)
    first = np.unique(classes, return_index=True)[1]
    count = np.bincount(classes)
    gammas: list[Fraction] = []
    total = 0
    for s, members in zip(first.tolist(), count.tolist()):
        chosen = _pieces_of(pieces, lattice.closure[s])
        gamma2 = rational.noise_parameter(float(sigma2[s]), math.prod(piece.scale**2 for piece in chosen))
        gammas.append(gamma2)
        total += rational.rho_units(members, math.prod(piece.column for piece in chosen), gamma2)
    spent = rational.spent_rho(total, budget)
    return classes.astype(np.int64), tuple(gammas), spent


# ============================================================================ variances
def _contract(selection: PlusSelection, sigma2: FloatArray, marginal: Sequence[int],
              factor: Callable[[ResidualPiece], tuple[FloatArray, FloatArray]]) -> FloatArray:
    """Σ_{S⊆A} σ_S² ⊗_{i∈S} xᵢ ⊗_{i∈A∖S} yᵢ with (yᵢ, xᵢ) = factor(pieceᵢ), as a tensor over A."""
    lattice = selection.lattice
    position = lattice.locate(marginal)
    a = lattice.closure[position]
    subsets = lattice.subset_ids(np.array([position]))[0]
    core = np.zeros((2,) * len(a))
    for mask, s in enumerate(subsets.tolist()):
        core[tuple(mask >> b & 1 for b in range(len(a)))] = sigma2[s]
    for axis, piece in enumerate(_pieces_of(selection.pieces, a)):
        dropped, kept = factor(piece)
        core = np.moveaxis(np.tensordot(np.stack([dropped, kept], axis=1), core, axes=(1, axis)), 0, axis)
    return core


def query_variance(selection: PlusSelection, sigma2: FloatArray, marginal: Sequence[int]) -> FloatArray:
    """Var_A[r] for every query r of a closure set under noise scales σ² (module doc), shaped (mᵢ)_{i∈A}."""
    a = selection.lattice.closure[selection.lattice.locate(marginal)]
    _check_entries(selection, a, "variances")
    return _contract(selection, sigma2, a, lambda piece: (piece.total_weights, piece.residual_weights))


def hull_variance(selection: PlusSelection, sigma2: FloatArray, marginal: Sequence[int]) -> FloatArray:
    """Var_A on the hull patterns only: its maximum is the maximum over all queries."""
    return _contract(selection, sigma2, marginal, lambda piece: (piece.total_weights[piece.hull],
                                                                  piece.residual_weights[piece.hull]))


def _check_entries(selection: PlusSelection, a: Marginal, what: str) -> None:
    entries = math.prod(selection.bases[i].shape[0] for i in a)
    if entries > MAX_QUERY_ENTRIES:
        raise DomainTooLargeError(
            f"the {what} of query set {a} have {entries:,} entries, above MAX_QUERY_ENTRIES = {MAX_QUERY_ENTRIES:,}; "
            "give the attributes bases with only the queries you need (e.g. Ranges(n, intervals)), or use "
            "PlusMeasurements.table()."
        )


# ============================================================================ measurement
@dataclass(frozen=True, eq=False, kw_only=True)
class PlusMeasurements(base.Measurements[PlusSelection]):
    """RP+'s releases ω_S of every closure set.

    Fields (besides those of dpsql.residual.base.Measurements, whose ``sigma2`` here is
    Var[N_Z(0, γ_S²)]/Π τᵢ²):
        releases   ω_S per closure set, shaped (tᵢ)_{i∈S}: unbiased for (⊗ Subᵢ) v_S.
    """

    releases: tuple[FloatArray, ...] = field(repr=False)

    def variance(self, marginal: Sequence[int]) -> FloatArray:
        """Exact variance of every reconstructed query of ``marginal`` from these releases."""
        return query_variance(self.selection, self.sigma2, marginal)

    def table(self, marginal: Sequence[int]) -> FloatArray:
        """The unbiased estimate q_A of the COUNT table over ``marginal``, shaped (nᵢ)_{i∈A}."""
        lattice = self.selection.lattice
        position = lattice.locate(marginal)
        a = lattice.closure[position]
        pieces = _pieces_of(self.selection.pieces, a)
        omega = np.zeros([piece.T.shape[0] + 1 for piece in pieces])
        for mask, s in enumerate(lattice.subset_ids(np.array([position]))[0].tolist()):
            omega[tuple(slice(1, None) if mask >> b & 1 else 0 for b in range(len(a)))] = self.releases[s]
        for axis, piece in enumerate(pieces):
            n = piece.pinv.shape[0]
            basis = np.hstack([np.full((n, 1), 1.0 / n), piece.pinv])
            omega = _along(basis.__matmul__, omega, axis)
        return omega


def measure(
    selection: PlusSelection,
    marginal_tables: Mapping[Sequence[int], npt.ArrayLike],
    rng: noise.RandomSource | None = None,
) -> PlusMeasurements:
    """Release y_S = (⊗Tᵢ)v_S + z_S exactly, z_S iid N_Z(0, γ_S²), and ω_S = y_S/Πτᵢ (module doc).

    Args:
        selection: from :func:`select`.
        marginal_tables: exact integer COUNT tables over the public domain, query set → array of
            shape (nᵢ)_{i∈A}, from one data set. Every closure set must be one of them or a subset
            of one (the requested maximal sets suffice); smaller tables are summed from them.
        rng: the randomness (default: a fresh SystemRandomSource; tests pass SeededRandomSource).

    Privacy: ``selection.rho``-zCDP under adding or removing one record, when each record adds 1 to
    exactly one cell of each table: release S is ρ_S = Π‖Tᵢ col‖²_max/(2γ_S²)-zCDP (Canonne–Kamath–
    Steinke) and the ρ_S add up. The integer releases are exact; all float work is post-processing.

    Raises:
        ShapeError: a table for a set outside the closure, of the wrong shape, or a closure set no
            table covers.
        DataError: a table that is not integer counts.
    """
    lattice = selection.lattice
    tables = closure_tables(lattice, marginal_tables)
    source = noise.resolve_rng(rng)
    _, signature = unique_rows(_kind_codes(selection.pieces)[lattice.sets])
    releases: list[FloatArray] = [np.empty(0)] * len(lattice.sets)
    for g in np.unique(signature).tolist():
        members = np.flatnonzero(signature == g)
        a = lattice.closure[int(members[0])]
        cells = math.prod(selection.domains[i] for i in a)
        step = max(1, BATCH_CELLS // cells)
        for start in range(0, len(members), step):
            chunk = members[start:start + step]
            for s, omega in zip(chunk.tolist(), _release(selection, tables, chunk, a, source)):
                releases[s] = omega
    effective = np.array([noise.discrete_gaussian_variance(g) for g in selection.class_gamma2])
    return PlusMeasurements(selection=selection, releases=tuple(releases),
                            sigma2=effective[selection.noise_class] / selection.squares, rho=selection.rho)


def _release(selection: PlusSelection, tables: list[npt.NDArray[np.integer]], chunk: IntArray, a: Marginal,
             rng: noise.RandomSource) -> FloatArray:
    """ω for a batch of closure sets over attributes with the same pieces as ``a`` (batch axis 0)."""
    pieces = _pieces_of(selection.pieces, a)
    y: IntTensor = np.stack([tables[s] for s in chunk.tolist()]).astype(np.int64, copy=False)
    for axis, piece in enumerate(pieces):
        y = exact_along_axis(Explicit(piece.T.astype(np.float64)), y, axis + 1)
    classes = selection.noise_class[chunk]
    draws = [(rows, _draw(selection.class_gamma2[k], rows.size * math.prod(y.shape[1:]), rng))
             for k in np.unique(classes).tolist() for rows in [np.flatnonzero(classes == k)]]
    z: IntTensor = np.empty(y.shape, dtype=object if any(d.dtype == object for _, d in draws) else np.int64)
    for rows, d in draws:
        z[rows] = d.reshape(rows.size, *y.shape[1:])
    return _add_exact(y, z).astype(np.float64) / float(math.prod(piece.scale for piece in pieces))


def _draw(gamma2: Fraction, count: int, rng: noise.RandomSource) -> IntTensor:
    """``count`` iid N_Z(0, γ²): dpsql.noise's sampler, in Python integers beyond its int64 range."""
    if gamma2 <= SAMPLER_LIMIT:
        return noise.discrete_gaussian(gamma2, count, rng=rng)
    return np.array([noise.discrete_gaussian_scalar(gamma2, rng=rng) for _ in range(count)], dtype=object)


def _add_exact(x: IntTensor, z: IntTensor) -> IntTensor:
    """x + z exactly (Python integers when int64 could overflow)."""
    if x.dtype == object or z.dtype == object or int(np.abs(x).max(initial=0)) + int(np.abs(z).max(initial=0)) >= 2**63:
        return x.astype(object) + z.astype(object)
    return x + z


def _along(apply: Callable[[FloatArray], FloatArray], t: FloatArray, axis: int) -> FloatArray:
    """``apply`` (an (n, k) → (m, k) map) along one axis of a tensor."""
    moved = np.moveaxis(t, axis, 0)
    out = apply(moved.reshape(moved.shape[0], -1))
    return np.moveaxis(out.reshape((out.shape[0], *moved.shape[1:])), 0, axis)


# ============================================================================ reconstruction
def reconstruct(
    selection: PlusSelection,
    measurements: PlusMeasurements,
    marginals: Sequence[Sequence[int]] | None = None,
) -> dict[Marginal, FloatArray]:
    """Unbiased answers (⊗_{i∈A} Wᵢ) q_A of the requested (or given closure) query sets.

    Each answer tensor has shape (mᵢ)_{i∈A} (np.kron row order when raveled); its exact
    per-query variances are ``measurements.variance(A)``. Answers of different sets agree on
    shared sub-marginals (each q_A uses exactly the releases of its own subsets). Pure
    post-processing of the releases: no privacy cost.

    Raises:
        ShapeError: measurements of another selection, or a set outside the closure.
        DomainTooLargeError: a set with more than MAX_QUERY_ENTRIES answers (use ``table``).
    """
    measurements.require(selection)
    lattice = selection.lattice
    out: dict[Marginal, FloatArray] = {}
    for marginal in selection.marginals if marginals is None else marginals:
        a = lattice.closure[lattice.locate(marginal)]
        _check_entries(selection, a, "answers")
        answers = measurements.table(a)
        for axis, i in enumerate(a):
            answers = _along(selection.bases[i].__matmul__, answers, axis)
        out[a] = answers
    return out
