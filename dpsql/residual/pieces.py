"""ResidualPlanner+'s residual pieces: per attribute, the integer matrix measured and its query weights.

He, Xiao, Toksoz, Ding, Zhang and Kifer, "ResidualPlanner+: a scalable matrix mechanism for marginals
and beyond" (arXiv:2305.08175, 2023), Section 7. Each attribute i has a public size nᵢ and a *basis*
Wᵢ (mᵢ × nᵢ: identity, prefix sums, all ranges or any custom matrix).

Residual pieces (Algorithm 4). A per-attribute strategy Sᵢ (nᵢ columns, full column rank) gives the
    residual cost Gram Kᵢ = C Sᵢᵀ Sᵢ C, C = I − J/n, J = 11ᵀ,
realised by an *integer* matrix Tᵢ (tᵢ × nᵢ, Tᵢ1 = 0, rank nᵢ − 1) and a scale τᵢ with
Subᵢ = Tᵢ/τᵢ, SubᵢᵀSubᵢ ≈ Kᵢ:
    integer Sᵢ     Tᵢ = nᵢSᵢ − (Sᵢ1)1ᵀ, τᵢ = nᵢ: Subᵢ = SᵢC exactly (the identity gives Tᵢ = nI − J,
                   ResidualPlanner's Ξ, so identity bases reproduce dpsql.residual.planner);
    real Sᵢ        Tᵢ = R̂ D: D the (n−1) × n adjacent differences, R the upper Cholesky factor of
                   D⁺ᵀKᵢD⁺ scaled to max |R| = 1, R̂ = round(2^b R) with a nonzero diagonal (so
                   rank nᵢ − 1, exactly), plus one completion row u (Σu = 0, uⱼ² ≤ the deficit of
                   column j) that restores column norms rounding lowered; τᵢ = 2^b for the
                   smallest b ≤ PIECE_BITS whose per-attribute loss fᵢβᵢ (below) is within
                   PIECE_TOLERANCE of the unrounded Kᵢ's.
Everything below is computed from the integer Tᵢ, so privacy and variances are exact for what is
measured; rounding only costs optimality (≤ PIECE_TOLERANCE relative per attribute).
    βᵢ = max diag(SubᵢᵀSubᵢ) (exactly ‖Tᵢ col‖²_max/τᵢ²), Subᵢ⁺ = (SubᵢᵀSubᵢ + J/n)⁻¹Subᵢᵀ,
    aᵢ[r] = ‖(WᵢSubᵢ⁺)[r]‖², bᵢ[r] = ((Wᵢ1)[r]/nᵢ)², fᵢ = Σ aᵢ, gᵢ = Σ bᵢ.

Selection (dpsql.residual.plus) then depends on attribute i only through these quantities; the
default strategy (``attribute_strategy``) minimises the loss fᵢβᵢ. Reads only public bases and
strategies, never data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np

from dpsql.errors import ShapeError
from dpsql.matrix.workloads import Explicit, Identity, Workload
from dpsql.residual.lattice import FloatArray, IntArray
from dpsql.strategies import hdmm

__all__ = ["PIECE_BITS", "PIECE_TOLERANCE", "ResidualPiece", "Rule", "as_workload", "attribute_strategy",
           "build_pieces", "centred_gram"]

Rule = Literal["centred", "paper"]

#: Relative error in the loss fᵢβᵢ of a rounded piece against its real strategy's.
PIECE_TOLERANCE = 2.0**-16
#: Most bits a rounded piece may use (its entries stay below 2^(PIECE_BITS+1)).
PIECE_BITS = 24
_INT64_SAFE = 2**62


@dataclass(frozen=True, eq=False)
class ResidualPiece:
    """One attribute's residual piece: the integer matrix measured and its per-query weights.

    Fields:
        basis      Wᵢ (mᵢ × nᵢ), the attribute's queries.
        strategy   Sᵢ, the strategy the piece realises.
        T          the integer matrix (tᵢ × nᵢ), T1 = 0, rank nᵢ − 1; Sub = T/τ.
        scale      τ (nᵢ for an integer strategy, 2^b for a rounded real one).
        column     max_j ‖T[:, j]‖², an exact integer (the L2 sensitivity² of T).
        pinv       Sub⁺ (nᵢ × tᵢ).
        residual_weights  a[r] = ‖(W Sub⁺)[r]‖² per query r.
        total_weights     b[r] = ((W1)[r]/nᵢ)² per query r.
        hull       the queries on the upper-right convex hull of {(a[r], b[r])}.
    """

    basis: Workload
    strategy: Workload
    T: IntArray = field(repr=False)
    scale: int
    column: int
    pinv: FloatArray = field(repr=False)
    residual_weights: FloatArray = field(repr=False)
    total_weights: FloatArray = field(repr=False)
    hull: IntArray = field(repr=False)

    @property
    def beta(self) -> Fraction:
        """βᵢ = max diag(SubᵀSub) (Thm 7.1), exactly."""
        return Fraction(self.column, self.scale**2)

    @property
    def f(self) -> float:
        """fᵢ = ‖W Sub⁺‖²_F: a residual release's contribution to the sum of variances."""
        return float(self.residual_weights.sum())

    @property
    def g(self) -> float:
        """gᵢ = ‖W1‖²/n²: a marginalised attribute's contribution to the sum of variances."""
        return float(self.total_weights.sum())

    @property
    def loss(self) -> float:
        """fᵢβᵢ: the scale-free per-attribute loss the sum-of-variances optimum increases with."""
        return self.f * float(self.beta)


def attribute_strategy(basis: Workload, *, rule: Rule = "centred") -> Workload:
    """The default strategy Sᵢ for one attribute's basis (module doc, Selection).

    ``centred`` (the default): Identity for an identity basis (ResidualPlanner's piece, optimal for
    marginals), else HDMM OPT₀ (Gaussian) on the centred basis W(I − J/n), which minimises fᵢβᵢ
    over every residual piece. ``paper``: the paper's rule, OPT₀ on [1ᵀ; W(I − J/n)] (§5.6), kept
    to reproduce its tables. Reads only the public basis.
    """
    if rule not in ("centred", "paper"):
        raise ValueError(f"rule must be 'centred' or 'paper'; got {rule!r}.")
    W = as_workload(basis, "basis")
    n = W.shape[1]
    if _is_identity(W):
        return Identity(n)
    G = centred_gram(W)
    if rule == "paper":
        G = G + 1.0
    values, vectors = np.linalg.eigh(G)
    return hdmm.opt0(Explicit((vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T), noise="gaussian")


def as_workload(value: object, what: str) -> Workload:
    if isinstance(value, Workload):
        return value
    try:
        matrix = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{what} must be a Workload or a 2-D numeric matrix; got {value!r}.") from exc
    return Explicit(matrix)


def _is_identity(W: Workload) -> bool:
    n = W.shape[1]
    return isinstance(W, Identity) or (W.shape == (n, n) and bool(np.array_equal(W.dense(), np.eye(n))))


def centred_gram(W: Workload) -> FloatArray:
    """C WᵀW C, C = I − J/n."""
    return _centre(np.asarray(W.gram().dense(), dtype=np.float64))


def _centre(M: FloatArray) -> FloatArray:
    """C M C for a square M: every row and column mean removed."""
    M = M - M.mean(axis=0, keepdims=True)
    return M - M.mean(axis=1, keepdims=True)


def _integer_strategy(S: Workload, G: FloatArray, what: str) -> tuple[IntArray, int]:
    """(T, τ) realising strategy S (module doc): exact for an integer S, else rounded."""
    n = G.shape[0]
    if S.shape[1] != n:
        raise ShapeError(f"the strategy of {what} has {S.shape[1]} columns but its basis has {n} cells.")
    dense = S.dense()
    if not S.integral:
        return _rounded_piece(dense, G, what)
    T = n * dense - dense.sum(axis=1, keepdims=True)
    return T[np.any(T != 0, axis=1)].astype(np.int64), n


def _build_piece(W: Workload, S: Workload, T: IntArray, scale: int, what: str) -> ResidualPiece:
    """The piece (T, τ) of strategy S with its per-query weights for basis W, or ShapeError (rank)."""
    n = W.shape[1]
    sub = T / float(scale)
    try:
        pinv = np.asarray(np.linalg.solve(sub.T @ sub + 1.0 / n, sub.T), dtype=np.float64)
    except np.linalg.LinAlgError as exc:
        raise ShapeError(_rank_message(what)) from exc
    if not np.allclose(pinv @ sub, np.eye(n) - 1.0 / n, atol=1e-8):
        raise ShapeError(_rank_message(what))
    answers = W @ pinv
    total = (W @ np.ones(n)) / n
    a, b = np.einsum("ij,ij->i", answers, answers), total * total
    return ResidualPiece(basis=W, strategy=S, T=T, scale=scale, column=_max_column(T), pinv=pinv,
                         residual_weights=a, total_weights=b, hull=_upper_right_hull(a, b))


def _rank_message(what: str) -> str:
    return (f"the strategy of {what} must have full column rank (its rows and the total must span every "
            "cell); append identity rows to it, or leave it to the default.")


def _max_column(T: IntArray) -> int:
    """max_j Σ_r T[r, j]², exactly."""
    if float(np.abs(T).max(initial=0)) ** 2 * max(T.shape[0], 1) < _INT64_SAFE:
        return int((T * T).sum(axis=0).max(initial=0))
    exact = T.astype(object)
    return int((exact * exact).sum(axis=0).max())


def _rounded_piece(S: FloatArray, G: FloatArray, what: str) -> tuple[IntArray, int]:
    """(T, τ = 2^b) for a real strategy: the coarsest rounding within PIECE_TOLERANCE (module doc)."""
    n = S.shape[1]
    K = _centre(S.T @ S)
    D = np.eye(n)[:-1] - np.eye(n)[1:]
    D_pinv = np.linalg.pinv(D)
    try:
        R = np.linalg.cholesky(D_pinv.T @ K @ D_pinv).T
    except np.linalg.LinAlgError as exc:
        raise ShapeError(_rank_message(what)) from exc
    R = R / np.abs(R).max()
    ideal = _piece_loss(R @ D, 1, G)
    low, high = 0, PIECE_BITS
    while low < high:  # the smallest b within tolerance (the error falls with b up to rounding noise)
        middle = (low + high) // 2
        if abs(_piece_loss(_integer_piece(R, D, middle), 1 << middle, G) - ideal) <= PIECE_TOLERANCE * ideal:
            high = middle
        else:
            low = middle + 1
    return _integer_piece(R, D, low), 1 << low


def _integer_piece(R: FloatArray, D: FloatArray, bits: int) -> IntArray:
    """round(2^bits R) D with a nonzero diagonal (rank n − 1), plus the completion row."""
    Rh = np.rint(R * 2.0**bits)
    np.fill_diagonal(Rh, np.maximum(np.diag(Rh), 1.0))
    F = (R * 2.0**bits) @ D
    return _complete(np.rint(Rh @ D).astype(np.int64), np.einsum("ij,ij->j", F, F))


def _complete(T: IntArray, ideal: FloatArray) -> IntArray:
    """T and one more integer row u (Σu = 0) restoring column norms that rounding lowered.

    Column j is raised towards ⌊idealⱼ · top/max ideal⌋, top = max_k ‖T[:, k]‖² and ideal the
    unrounded squared column norms (the strategy's own profile, scaled to the rounded β):
    uⱼ = ±⌊√deficitⱼ⌋, signs chosen largest first against the running sum, the
    final imbalance taken off one entry of its sign that is large enough (else no row is added).
    A row never lowers the rank, never raises β and only lowers f; it undoes the first-order
    loss of rounding (the spread it adds to diag(SubᵀSub)) without changing the strategy.
    """
    norms = (T.astype(object) ** 2).sum(axis=0)
    top = max(norms)
    goals = np.floor(ideal * (float(top) / float(ideal.max()))).tolist()
    root = [math.isqrt(max(0, min(int(goal), top) - int(v))) for goal, v in zip(goals, norms)]
    u = [0] * len(root)
    balance = 0
    for j in sorted(range(len(root)), key=lambda j: -root[j]):
        u[j] = -root[j] if balance > 0 else root[j]
        balance += u[j]
    if balance:
        fits = [j for j, x in enumerate(u) if x * balance > 0 and abs(x) >= abs(balance)]
        if not fits:
            return T
        j = min(fits, key=lambda j: abs(u[j]))
        u[j] -= balance
    if not any(u):
        return T
    return np.vstack([T, np.array(u, dtype=np.int64)])


def _piece_loss(T: FloatArray | IntArray, scale: int, G: FloatArray) -> float:
    """max diag(SubᵀSub) · tr(G (SubᵀSub)⁺) for Sub = T/scale (G centred)."""
    sub = np.asarray(T, dtype=np.float64) / scale
    A = sub.T @ sub
    n = A.shape[0]
    return float(np.trace(np.linalg.solve(A + 1.0 / n, G)) * np.diag(A).max())


def _upper_right_hull(a: FloatArray, b: FloatArray) -> IntArray:
    """Rows maximising αa[r] + βb[r] for some α, β ≥ 0: the upper hull from max b to max a."""
    order = np.lexsort((b, a))
    chain: list[int] = []
    for r in order.tolist():
        while len(chain) >= 2:
            p, q = chain[-2], chain[-1]
            if (a[q] - a[p]) * (b[r] - b[p]) - (b[q] - b[p]) * (a[r] - a[p]) < 0:
                break
            chain.pop()
        chain.append(r)
    top = max(range(len(chain)), key=lambda k: (b[chain[k]], a[chain[k]]))
    return np.array(chain[top:], dtype=np.int64)



def build_pieces(bases: tuple[Workload, ...], strategies: list[Workload | None],
            used: list[int]) -> list[ResidualPiece | None]:
    """Per attribute its piece (None if no query set uses it). Strategies and their integer
    pieces are computed once per distinct (centred Gram, strategy): they depend on nothing else."""
    realised: dict[tuple[bool, bytes, bytes], tuple[Workload, IntArray, int]] = {}
    built: dict[tuple[int, int], ResidualPiece] = {}
    out: list[ResidualPiece | None] = [None] * len(bases)
    for i in used:
        W, S = bases[i], strategies[i]
        what = f"attribute {i}"
        gram = np.asarray(W.gram().dense(), dtype=np.float64)
        G = _centre(gram)
        if not np.any(np.abs(G) > 1e-12 * float(np.abs(gram).max())):
            raise ShapeError(f"every query of the basis of {what} is constant, so it only counts the total; "
                             f"drop attribute {i} from the query sets that use it.")
        if not np.any(W @ np.ones(W.shape[1])):
            raise ShapeError(f"every query of the basis of {what} sums to zero; add the total (a row of ones) to it.")
        key = (S is None and _is_identity(W), G.tobytes(), b"" if S is None else S.dense().tobytes())
        if key not in realised:
            chosen = attribute_strategy(W) if S is None else S
            realised[key] = (chosen, *_integer_strategy(chosen, G, what))
        if (id(W), id(realised[key][1])) not in built:
            built[id(W), id(realised[key][1])] = _build_piece(W, *realised[key], what)
        out[i] = built[id(W), id(realised[key][1])]
    return out

