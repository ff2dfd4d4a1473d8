"""The matrix mechanism: measure y = A x + z with exact lattice noise, reconstruct, answer.

Notation: x (n) the data vector of cell counts, A (p × n) the strategy, z (p) the noise,
x̂ = A⁺ y the least-squares estimate, W x̂ the answers.

Math:
    Ã is an integer strategy (A itself when its entries are integers; otherwise A scaled and
    rounded, which changes nothing but the strategy: the answers stay unbiased and the reported
    variances are those of Ã). Ã x is then an exact integer vector, and
        laplace:  z_i ~ Lap_ℤ(t) i.i.d., t ≥ Δ₁(Ã)/ε a rational,      Var z_i = 2e^{-1/t}/(1−e^{-1/t})²
        gaussian: z_i ~ N_ℤ(0, σ²) i.i.d., σ² ≥ Δ₂(Ã)²/(2ρ) a rational, Var z_i < σ² (exact value used)
    x̂ = Ã⁺ y (per-factor pseudo-inverses for Kronecker Ã, LSMR for large unstructured Ã) and the
    answers W x̂ have variance Var(z)·diag(W (ÃᵀÃ)⁺ Wᵀ) when W Ã⁺ Ã = W. Over a Kronecker Ã the
    answers are computed as (W Ã⁺) y factor by factor instead, never through x̂, whose float64
    rounding W x̂ would amplify far beyond that variance (``linalg.kron_answers``).
Privacy:
    Neighbouring data vectors differ by one in one cell (add or remove one row), so ‖Ãx − Ãx′‖
    is at most a column norm of Ã: Δ₁ for Laplace, Δ₂ for Gaussian. Hence measure() is ε-DP
    (Laplace) or ρ-zCDP (Gaussian); reconstruct() and answer() are post-processing. The noise is
    sampled exactly (dpsql.noise) from OS randomness unless a seeded source is injected for tests.
    Rounding the scale up makes the spent ε = Δ₁/t or ρ = Δ₂²/(2σ²) at most the requested one;
    Measurement records the spent value.
Per-cell contribution bounds (``cell_bounds`` b, b_j ≥ 1 integers, Kronecker-structured): when
    one row in cell j moves x_j by at most b_j (a SUM's cells on an axis of the summed column),
    one privacy unit of c rows moves x by d with Σ_j |d_j|/b_j ≤ c, so
        ‖Ã d‖ ≤ Σ_j |d_j| ‖Ã e_j‖ ≤ c · max_j b_j ‖Ã e_j‖   (L1 for Laplace, L2 for Gaussian),
    attained by one row of contribution b_j in the maximising cell j. The noise is calibrated to
    this Δ, so the guarantee (ε-DP or ρ-zCDP) is unchanged; with b ≡ 1 it is the bound above.
    :func:`cell_bounded_strategy` turns a strategy A planned for y = diag(1/b) x (where every
    row moves one cell by at most 1, like a count) into the integer strategy Ã·diag(m) on x,
    m_j ≈ const/b_j, so the integer data x are measured exactly (Li's thesis Prop. 3.7: only the
    strategy's rows matter, and any positive column scaling spans the same row space).
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import scipy.sparse.linalg as spla

from dpsql import noise as exact
from dpsql.answers.tail_bounds import NoiseLaw
from dpsql.errors import (
    DataError,
    DpsqlWarning,
    InternalError,
    PrivacyParameterError,
    ShapeError,
)
from dpsql.matrix.kronvec import ColumnTerm
from dpsql.matrix.linalg import bilinear_diag, diagonal_entries, kron_answers, pinv_gram, quadratic_diag
from dpsql.matrix.partitions import Parts
from dpsql.matrix.workloads import (
    Explicit,
    FloatArray,
    Identity,
    Kron,
    Product,
    Sum,
    VStack,
    Weighted,
    Workload,
    scale_columns,
)
from dpsql.noise import Noise
from dpsql.planning.accuracy import check_support
from dpsql.planning.noise_forms import NoiseForm
from dpsql.residual.basis import marginal_form

#: Bits of precision kept when a real-valued strategy is rounded to integers.
STRATEGY_BITS = 20
#: Largest cell count for which a dense per-factor pseudo-inverse is used instead of LSMR.
DENSE_SOLVE_LIMIT = 8192
_EXACT_FLOAT = 2.0**53
_INT64_SAFE = 2.0**62


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One noisy release y = Ã x + z, with everything needed to interpret it."""

    strategy: Workload
    y: FloatArray
    noise: Noise
    noise_scale: Fraction
    noise_variance: float
    epsilon: Fraction | None = None
    rho: Fraction | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Answers:
    """W x̂ with each answer's exact variance (and, keyed by another block of the same
    measurement, the row-by-row covariances with that block's answers; and, where an interval
    needs tail bounds, the law of the noise the answers are linear in; and, where outputs combine
    answers of several rows, their :mod:`~dpsql.planning.noise_forms` form)."""

    values: FloatArray
    variances: FloatArray
    covariances: Mapping[int, FloatArray] = field(default_factory=dict)
    law: NoiseLaw | None = None
    form: NoiseForm | None = None

    @property
    def stddevs(self) -> FloatArray:
        return np.sqrt(self.variances)


def integral_strategy(A: Workload, *, bits: int = STRATEGY_BITS) -> Workload:
    """An integer-valued strategy equivalent to A up to scale and a small relative rounding.

    Scaling a strategy does not change the mechanism (Li's thesis Prop. 3.7), so only relative
    scales matter. A dense matrix becomes round(2^bits · A / max|A|), all-zero rows dropped; a
    Kronecker product is rounded factor by factor (at least KRON_FACTOR_BITS bits each); a stack
    keeps its blocks' structure and gives them integer weights with at least ``bits`` bits of
    relative precision (never rounding a block away, so the stack supports what A did). Exact
    products with such strategies are computed structurally (:func:`exact_product`).
    """
    return _integral_with_scale(A, bits)[0]


#: Fewest bits each factor of a Kronecker strategy keeps when rounded.
KRON_FACTOR_BITS = 12


def _integral_with_scale(A: Workload, bits: int) -> tuple[Workload, float]:
    """(B, s): B integer-valued with A ≈ s·B to a relative rounding of about 2^-bits."""
    if A.integral:
        return A, 1.0
    if isinstance(A, Weighted):
        base, scale = _integral_with_scale(A.base, bits)
        return base, scale * A.weight
    if isinstance(A, Kron):
        parts = [_integral_with_scale(f, max(KRON_FACTOR_BITS, bits // len(A.factors))) for f in A.factors]
        return Kron([b for b, _ in parts]), float(np.prod([s for _, s in parts]))
    if isinstance(A, VStack):
        parts = [_integral_with_scale(block, bits) for block in A.blocks]
        if all(s == parts[0][1] for _, s in parts):
            return VStack([b for b, _ in parts]), parts[0][1]
        unit = min(abs(s) for _, s in parts if s != 0.0) / 2.0**bits  # the smallest weight gets `bits` bits
        weights = [float(np.sign(s) * np.rint(abs(s) / unit)) for _, s in parts]
        return VStack([b if w == 1.0 else Weighted(w, b) for (b, _), w in zip(parts, weights) if w != 0.0]), unit
    dense = A.dense()
    top = float(np.abs(dense).max())
    rounded = np.rint(dense * (2.0**bits / top))
    return Explicit(rounded[np.any(rounded != 0, axis=1)]), top / 2.0**bits


def measure(
    A: Workload,
    x: npt.ArrayLike,
    *,
    epsilon: float | Fraction | None = None,
    rho: float | Fraction | None = None,
    max_contribution: int = 1,
    cell_bounds: CellBounds | None = None,
    rng: exact.RandomSource | None = None,
) -> Measurement:
    """Release y = Ã x + z: ε-DP with discrete Laplace noise or ρ-zCDP with discrete Gaussian noise.

    Math / Privacy: see the module docstring. ``max_contribution`` = c is the largest ‖x − x′‖₁ one
    privacy unit can cause (1 for a row's count; k·B when a unit has up to k rows each adding up
    to B to a sum cell). Then ‖Ã(x − x′)‖₁ ≤ c·Δ₁ and ‖Ã(x − x′)‖₂ ≤ Σ_j |x_j − x′_j|·‖ã_j‖₂ ≤ c·Δ₂,
    so the noise is scaled by c. With ``cell_bounds`` b (one row moves x_j by at most b_j; see the
    module docstring) the sensitivity is c·max_j b_j‖ã_j‖ instead.
    The noise is :func:`calibrate`'s, sampled exactly for any scale (Python integers beyond int64),
    and Ã x is computed exactly for counts of any size, so the outcome never depends on x except
    through the noisy values.
    Raises:
        PrivacyParameterError: as :func:`calibrate` (public parameters only).
        ShapeError: x is not a vector over A's cells.
        DataError: x is not integer counts.
    """
    calibration = calibrate(A, epsilon=epsilon, rho=rho, max_contribution=max_contribution, cell_bounds=cell_bounds)
    counts = _data_vector(A, x)
    strategy = calibration.strategy
    exact_answers = exact_product(strategy, counts)
    if calibration.noise == "laplace":
        z = exact.discrete_laplace_wide(calibration.scale, strategy.shape[0], rng=rng)
        spent = {"epsilon": calibration.spent}
    else:
        z = exact.discrete_gaussian_wide(calibration.scale, strategy.shape[0], rng=rng)
        spent = {"rho": calibration.spent}
    as_objects = object in (exact_answers.dtype, z.dtype)
    noisy = exact_answers.astype(object) + z.astype(object) if as_objects else exact_answers + z
    return Measurement(
        strategy=strategy, y=np.asarray(noisy, dtype=np.float64), noise=calibration.noise,
        noise_scale=calibration.scale, noise_variance=calibration.variance, **spent,
    )


#: Largest noise scale t (Laplace) or standard deviation σ (Gaussian) a measurement may use: far
#: beyond any sensible budget, and small enough that every variance (≈ t², σ² times the answers'
#: coefficients) is a finite float.
MAX_NOISE_SCALE = 2**400


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """The integer strategy a measurement uses, its noise parameter and the budget it spends."""

    strategy: Workload
    noise: Noise
    scale: Fraction     # Laplace scale t, or Gaussian σ²
    spent: Fraction     # ε = Δ₁/t or ρ = Δ₂²/(2σ²): at most the budget given
    variance: float     # Var z_i, exactly (up to float rounding)


def calibrate(
    A: Workload,
    *,
    epsilon: float | Fraction | None = None,
    rho: float | Fraction | None = None,
    max_contribution: int = 1,
    cell_bounds: CellBounds | None = None,
) -> Calibration:
    """The noise :func:`measure` adds for strategy A at this budget — computed from public
    parameters only, so that a caller can check it before charging anything.

    Math: Ã = integral_strategy(A); Laplace t ≥ c·Δ₁(Ã)/ε, Gaussian σ² ≥ c²·Δ₂(Ã)²/(2ρ), each
    rounded up to a rational with a small denominator (more noise, never less privacy). With
    ``cell_bounds`` b: Δ₁ = max_j b_j‖ã_j‖₁, Δ₂² = max_j b_j²‖ã_j‖₂² (exact; module docstring).
    Raises:
        PrivacyParameterError: not exactly one of epsilon, rho, or not a finite number > 0;
            max_contribution is not a positive integer; cell_bounds are not positive integers
            below 2^53 over A's columns; or the noise would exceed MAX_NOISE_SCALE.
    """
    noise, budget = _privacy_parameter(epsilon=epsilon, rho=rho)
    if (isinstance(max_contribution, bool) or not isinstance(max_contribution, (int, np.integer))
            or max_contribution < 1):
        raise PrivacyParameterError(f"max_contribution must be a positive integer; got {max_contribution!r}.")
    bounds = None if cell_bounds is None else _checked_bounds(cell_bounds, A.shape[1])
    strategy = rounded_strategy(A)
    if noise == "laplace":
        delta1 = _power_sum(strategy, 1, bounds) * int(max_contribution)
        scale = _noise_parameter(delta1 / budget)
        too_large, spent = scale > MAX_NOISE_SCALE, delta1 / scale
    else:
        squared = None if bounds is None else tuple(v**2 for v in bounds)
        delta2_squared = _power_sum(strategy, 2, squared) * int(max_contribution) ** 2
        scale = _noise_parameter(delta2_squared / (2 * budget))
        too_large, spent = scale > MAX_NOISE_SCALE**2, delta2_squared / (2 * scale)
    if too_large:
        raise PrivacyParameterError(
            f"{'epsilon' if noise == 'laplace' else 'rho'} = {float(budget):.3g} is too small for this strategy and "
            f"contribution bound: its noise would exceed 2^{MAX_NOISE_SCALE.bit_length() - 1}. Use a larger budget.")
    variance = exact.discrete_laplace_variance(scale) if noise == "laplace" else exact.discrete_gaussian_variance(scale)
    return Calibration(strategy=strategy, noise=noise, scale=scale, spent=spent, variance=float(variance))


#: Per-cell contribution bounds: one vector of positive integers per Kronecker axis of the data
#: vector; cell (j₁, …, j_d) has bound Π_i b_i[j_i] (axes the bound does not depend on: all ones).
CellBounds = Sequence[Sequence[int]]
#: Relative precision (bits) of the column multipliers of :func:`cell_bounded_strategy`.
CELL_BOUND_BITS = 8


def _checked_bounds(cell_bounds: CellBounds, cells: int) -> ColumnTerm:
    """cell_bounds as float vectors (exact: integers below 2^53), or PrivacyParameterError."""
    vectors = []
    for vector in cell_bounds:
        values = list(vector)
        if not values or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v < 2**53
                                 for v in values):
            raise PrivacyParameterError("cell_bounds must be non-empty vectors of integers from "
                                        "1 to 2^53 (one per axis).")
        vectors.append(np.asarray([int(v) for v in values], dtype=np.float64))
    if not vectors or int(np.prod([len(v) for v in vectors])) != cells:
        raise PrivacyParameterError(f"cell_bounds over {[len(v) for v in vectors]} cells do not match the strategy's "
                                    f"{cells} columns.")
    return tuple(vectors)


def cell_bounded_strategy(A: Workload, cell_bounds: CellBounds, *, bits: int = CELL_BOUND_BITS) -> Workload:
    """The integer strategy on x that measures A on y = diag(1/b) x: Ã·diag(m), Ã = integral_strategy(A).

    m = ⊗_i m_i with m_i[j] = round(2^bits · max b_i / b_i[j]) (all ones on an axis where b_i is
    constant), so m_j b_j is one constant to a relative 2^-(bits+1) and Ã·diag(m) x = const·Ã y up
    to that rounding of the columns' scales. The scaling is exact integer arithmetic on x, keeps Ã's
    Kronecker structure and row space (W is supported on x exactly when W·diag(b) is on y), and
    the reported variances are those of Ã·diag(m) itself; measure it with the same ``cell_bounds``.
    Entries grow by max b/min b · 2^bits: callers keep that ratio moderate (a bound may be raised).
    """
    vectors = _checked_bounds(cell_bounds, A.shape[1])
    multipliers = tuple(np.ones(len(v)) if np.all(v == v[0]) else np.rint(2.0**bits * v.max() / v) for v in vectors)
    return scale_columns(integral_strategy(A), multipliers)


#: Noise parameters at least this large are rounded up to an integer (relative change < 2^-32).
_INTEGER_PARAMETER = 2**32


def _noise_parameter(value: Fraction) -> Fraction:
    """The smallest convenient rational ≥ value: an integer when large (the int64 samplers then
    cover scales up to 2^56 and σ² up to 2^118), else denominator ≤ 2^20."""
    if value >= _INTEGER_PARAMETER:
        return Fraction(math.ceil(value))
    return exact.fraction_at_least(value)


def pseudo_inverse(A: Workload) -> Workload:
    """A⁺ as an operator: factor by factor for Kronecker A; (AᵀA)⁺Aᵀ densely per factor, in the
    residual basis for marginal strategies (dpsql.residual.basis), by part means for
    ``partitions.Parts`` or entry by entry for a diagonal A; else LSMR."""
    if isinstance(A, Identity):
        return A
    if isinstance(A, Weighted):
        return Weighted(1.0 / A.weight, pseudo_inverse(A.base))
    if isinstance(A, Kron):
        return Kron([pseudo_inverse(f) for f in A.factors])
    if A.shape[1] <= DENSE_SOLVE_LIMIT or isinstance(A, Parts) or diagonal_entries(A) is not None \
            or marginal_form(A) is not None:
        return Product(pinv_gram(A), A.T)
    return LeastSquares(A)


class LeastSquares(Workload):
    """y ↦ argmin ‖A x − y‖₂ by LSMR, for strategies too large for a dense pseudo-inverse."""

    def __init__(self, A: Workload, *, tolerance: float = 1e-12) -> None:
        self.A, self.tolerance = A, tolerance

    @property
    def shape(self) -> tuple[int, int]:
        return (self.A.shape[1], self.A.shape[0])

    def _matmat(self, X: FloatArray) -> FloatArray:
        operator = spla.LinearOperator(
            self.A.shape, matvec=lambda v: self.A @ v, rmatvec=self.A.rmatvec, dtype=np.float64
        )
        columns = [spla.lsmr(operator, X[:, k], atol=self.tolerance, btol=self.tolerance,
                             maxiter=10 * self.A.shape[1])[0]
                   for k in range(X.shape[1])]
        return np.stack(columns, axis=1)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        raise NotImplementedError("the transpose of an LSMR solve is not needed by dpsql.")


def reconstruct(measurement: Measurement) -> FloatArray:
    """x̂ = Ã⁺ y, the least-squares cell estimate (post-processing)."""
    return np.asarray(pseudo_inverse(measurement.strategy) @ measurement.y)


def answer(W: Workload, measurement: Measurement) -> Answers:
    """W x̂ and Var(z)·diag(W (ÃᵀÃ)⁺ Wᵀ), after checking that Ã supports W (W Ã⁺ Ã = W)."""
    return answer_blocks([W], measurement)[0]


def answer_blocks(blocks: Sequence[Workload], measurement: Measurement) -> list[Answers]:
    """Answers for several workloads over one measurement: one support check, at most one reconstruction."""
    check_support(blocks[0] if len(blocks) == 1 else VStack(list(blocks)), measurement.strategy)
    cells = functools.cache(lambda: reconstruct(measurement))
    profile = pinv_gram(measurement.strategy)
    return [Answers(values=answer_values(W, measurement, cells),
                    variances=measurement.noise_variance * quadratic_diag(W, profile))
            for W in blocks]


def answer_values(W: Workload, measurement: Measurement, cells: Callable[[], FloatArray]) -> FloatArray:
    """W Ã⁺ y: over a Kronecker Ã, each Kronecker block (of a stack, weight or sum) by
    :func:`~dpsql.matrix.linalg.kron_answers`, without the cell estimate, whose rounding W x̂ would
    amplify; otherwise W x̂ with x̂ = ``cells()``."""
    if not isinstance(measurement.strategy, Kron):
        return np.asarray(W @ cells())
    if isinstance(W, VStack):
        return np.concatenate([answer_values(block, measurement, cells) for block in W.blocks])
    if isinstance(W, Weighted):
        return W.weight * answer_values(W.base, measurement, cells)
    if isinstance(W, Sum):
        return np.sum([answer_values(term, measurement, cells) for term in W.terms], axis=0)
    values = kron_answers(W, measurement.strategy, measurement.y)
    return np.asarray(W @ cells()) if values is None else values


def answer_covariance(U: Workload, V: Workload, measurement: Measurement) -> FloatArray:
    """Cov(uᵢ x̂, vᵢ x̂) = σ² uᵢ (AᵀA)⁺ vᵢᵀ for each row i of two same-shaped workloads."""
    profile = pinv_gram(measurement.strategy)
    left = U.terms if isinstance(U, Sum) else [U]
    right = V.terms if isinstance(V, Sum) else [V]
    return measurement.noise_variance * np.sum([bilinear_diag(u, profile, v) for u in left for v in right], axis=0)


def _privacy_parameter(*, epsilon: float | Fraction | None, rho: float | Fraction | None) -> tuple[Noise, Fraction]:
    if (epsilon is None) == (rho is None):
        raise PrivacyParameterError("give exactly one of epsilon= (pure ε-DP, Laplace) or rho= (ρ-zCDP, Gaussian).")
    name, value = ("epsilon", epsilon) if epsilon is not None else ("rho", rho)
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction, np.floating, np.integer)) \
            or not np.isfinite(float(value)) or value <= 0:
        raise PrivacyParameterError(f"{name} must be a finite number > 0; got {value!r}.")
    if name == "epsilon" and value > 5:
        warnings.warn(f"epsilon = {value} is above 5, which gives little privacy protection.", DpsqlWarning,
                      stacklevel=3)
    exact_value = Fraction(value)  # floats are dyadic rationals: exact
    magnitude = exact_value.numerator.bit_length() - exact_value.denominator.bit_length()  # log2, within 1
    digits = max(20, 21 - magnitude)  # ~20 significant bits, however small the budget
    return (("laplace" if name == "epsilon" else "gaussian"),
            exact.fraction_at_most(exact_value, max_denominator=2**digits))


def _data_vector(A: Workload, x: npt.ArrayLike) -> IntVector:
    """x as exact integers: int64, or Python integers (an object array) when an entry needs more bits."""
    vector = np.asarray(x)
    if vector.ndim != 1 or vector.shape[0] != A.shape[1]:
        raise ShapeError(f"the data vector must have one entry per cell ({A.shape[1]}); got shape {vector.shape}.")
    if vector.dtype == object:
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vector.tolist()):
            raise DataError("the data vector must hold integer counts; got non-integer values.")
        return _narrowed(np.array([int(v) for v in vector.tolist()], dtype=object))
    if not np.all(np.isfinite(vector)) or np.any(np.mod(vector, 1) != 0):
        raise DataError("the data vector must hold integer counts; got non-integer values.")
    if vector.dtype.kind == "f" and vector.size and float(np.abs(vector).max()) >= 2.0**63:
        return np.array([int(v) for v in vector.tolist()], dtype=object)
    return vector.astype(np.int64)


IntVector = npt.NDArray[np.int64] | npt.NDArray[np.object_]


def exact_product(A: Workload, x: IntVector) -> IntVector:
    """Ã x exactly, for an integer Ã and integer x of any size, following Ã's structure.

    A stack is computed block by block, an integer weight multiplies exactly, and a Kronecker
    product is applied one factor (axis) at a time, so that only the factors' own entries meet
    floating point (:func:`_exact_matmul`). Results are int64 when they fit, Python integers otherwise.
    """
    if isinstance(A, VStack):
        parts = [exact_product(block, x) for block in A.blocks]
        return np.concatenate(parts).astype(object if any(p.dtype == object for p in parts) else np.int64)
    if isinstance(A, Weighted):
        return _narrowed(int(A.weight) * exact_product(A.base, x).astype(object))
    if isinstance(A, Kron):
        tensor = x.reshape([f.shape[1] for f in A.factors])
        for axis, factor in enumerate(A.factors):
            tensor = exact_along_axis(factor, tensor, axis)
        return tensor.reshape(-1)
    return _exact_matmul(A, x.reshape(-1, 1)).reshape(-1)


def exact_along_axis(A: Workload, X: IntVector, axis: int) -> IntVector:
    """A applied exactly along one axis of an integer tensor X (int64 or Python integers)."""
    moved = np.moveaxis(X, axis, 0)
    product = _exact_matmul(A, moved.reshape(moved.shape[0], -1))
    return np.moveaxis(product.reshape((A.shape[0],) + moved.shape[1:]), 0, axis)


def _exact_matmul(A: Workload, X: IntVector) -> IntVector:
    """A X exactly for an integer operator A and an integer matrix X (int64 or object).

    A float64 product is exact while max|A| · max_j Σᵢ|X_ij| < 2^53, an int64 one (for a dense
    Explicit A) below 2^62. Otherwise X = X⁺ − X⁻ is split into base-2^k limbs small enough that
    each limb's product is exact, and the limbs are recombined in Python integers.
    """
    entry, depth = max(A.max_abs_entry(), 1.0), max(X.shape[0], 1)
    bound = entry * float(np.abs(X).sum(axis=0).max()) if X.size else 0.0
    if bound < _EXACT_FLOAT:
        return np.rint(np.asarray(A @ X.astype(np.float64))).astype(np.int64)
    if bound < _INT64_SAFE and X.dtype != object and isinstance(A, Explicit) and isinstance(A.matrix, np.ndarray):
        return A.matrix.astype(np.int64) @ X
    bits = int(np.floor(np.log2(_EXACT_FLOAT / (entry * depth))))
    if bits < 1:  # even one-bit limbs could round: Python integers throughout
        return _narrowed(np.vectorize(int, otypes=[object])(np.asarray(A.dense())) @ X.astype(object))
    total = np.zeros((A.shape[0], X.shape[1]), dtype=object)
    for sign, part in ((1, np.maximum(X, 0)), (-1, np.maximum(-X, 0))):
        scale = 1
        while part.any():
            limb, part = part % (1 << bits), part >> bits
            product = np.rint(np.asarray(A @ limb.astype(np.float64))).astype(np.int64)
            total += sign * scale * product.astype(object)
            scale <<= bits
    return _narrowed(total)


def _narrowed(values: npt.NDArray[np.object_]) -> IntVector:
    """Python integers as int64 when every one fits, else unchanged."""
    if values.size == 0 or all(abs(int(v)) < _INT64_SAFE for v in (values.max(), values.min())):
        return values.astype(np.int64)
    return values


#: Below this, float64 sums and products of integers are exact (every partial result < 2^53).
_EXACT_INTEGER = 2.0**50


_integral_of: weakref.WeakKeyDictionary[Workload, Workload] = weakref.WeakKeyDictionary()
_power_sums: weakref.WeakKeyDictionary[Workload, dict[int, int]] = weakref.WeakKeyDictionary()


def rounded_strategy(A: Workload) -> Workload:
    """integral_strategy(A), kept per strategy object (workloads are immutable) so that checking a
    strategy before the charge and measuring with it after round it once."""
    if A.integral:
        return A  # (not kept: an entry whose value is its own key would never be released)
    if A not in _integral_of:
        _integral_of[A] = integral_strategy(A)
    return _integral_of[A]


def _power_sum(strategy: Workload, p: int, weights: ColumnTerm | None) -> int:
    """Δ₁ (p = 1) or Δ₂² (p = 2) of an integer strategy as an integer bound (columns weighted by
    per-cell bounds when given), kept per strategy when unweighted."""
    if weights is not None:
        return integer_sensitivity(strategy.max_column_power_sum(p, weights))
    known = _power_sums.setdefault(strategy, {})
    if p not in known:
        known[p] = integer_sensitivity(strategy.max_column_power_sum(p))
    return known[p]


def integer_sensitivity(value: float) -> int:
    """An integer upper bound on an integer strategy's sensitivity computed in float64.

    Below 2^50 the float computation is exact, so the value must be an integer. Above, products
    and sums of k terms carry a relative error of at most ~k·2^-53, so value·(1 + 2^-40), rounded
    up, bounds the true value: a little more noise, never less privacy.
    """
    if value >= _EXACT_INTEGER:
        return math.ceil(value * (1.0 + 2.0**-40))
    rounded = round(value)
    if abs(value - rounded) > 1e-6 * max(1.0, abs(value)):
        raise InternalError(f"an integer strategy has a non-integer sensitivity {value}; please report this bug.")
    return int(rounded)
