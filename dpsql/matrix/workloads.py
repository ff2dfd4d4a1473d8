"""Implicit workload and strategy matrices.

Notation (Li's thesis): a workload ``W`` is an m × n matrix whose rows are linear queries over the n
cells of a data vector ``x``; a strategy ``A`` (p × n) is what the mechanism measures; ``G = WᵀW``
is the Gram matrix. Nothing here materialises an m × n matrix unless ``dense()`` is called: every
operator applies itself to vectors through its structure (cumulative sums for ranges, factor by
factor for Kronecker products), keeps ``gram()`` in Kronecker form where the input is, and computes
exact L1 / L2 sensitivities (maximum column norms) without forming the product domain.

A subclass must provide ``shape``, ``_matmat`` (A X) and ``_rmatmat`` (Aᵀ Y). It may override
``T``, ``gram``, ``dense``, ``trace``, ``_column_terms`` (column power sums as a sum of Kronecker
vectors), ``_quadratic_diag_dense`` (diag(A M Aᵀ) for a dense M) and ``integral``.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql.errors import DomainTooLargeError, ShapeError
from dpsql.matrix.kronvec import ColumnTerm, align_terms, kron, kron_vectors, max_of_kron_sum

FloatArray = npt.NDArray[np.float64]
Norm = Literal["l1", "l2"]

#: The most entries any operation here will materialise as a dense array.
MAX_DENSE_ENTRIES = 2**26


def cached(method: Callable[[Any], Workload]) -> Callable[[Any], Workload]:
    """Memoise a no-argument method on the instance (operators are immutable once built)."""
    key = f"_cached_{method.__name__}"

    @functools.wraps(method)
    def wrapper(self: Any) -> Workload:
        if key not in self.__dict__:
            self.__dict__[key] = method(self)
        return self.__dict__[key]

    return wrapper


def check_dense_size(rows: int, cols: int, what: str) -> None:
    """Raise DomainTooLargeError if a rows × cols dense array would exceed MAX_DENSE_ENTRIES."""
    if rows * cols > MAX_DENSE_ENTRIES:
        raise DomainTooLargeError(
            f"{what} would need a dense {rows} × {cols} matrix ({rows * cols:,} entries; the limit is "
            f"{MAX_DENSE_ENTRIES:,}). Use a Kronecker-structured workload or strategy, or fewer cells."
        )


class Workload(ABC):
    """An implicit real matrix: the base of every workload and strategy.

    must implement: ``shape``, ``_matmat``, ``_rmatmat``.
    may override: ``T``, ``gram``, ``dense``, ``trace``, ``integral``, ``_column_terms``,
    ``_quadratic_diag_dense``.
    """

    @property
    @abstractmethod
    def shape(self) -> tuple[int, int]:
        """(rows, columns)."""

    @abstractmethod
    def _matmat(self, X: FloatArray) -> FloatArray:
        """A X for a dense (n, k) array X."""

    @abstractmethod
    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        """Aᵀ Y for a dense (m, k) array Y."""

    @property
    def integral(self) -> bool:
        """True when every entry is an integer (so A x is exact integer arithmetic on counts)."""
        return bool(np.all(np.mod(self.dense(), 1.0) == 0.0))

    # ----------------------------------------------------------------------------- products
    @overload
    def __matmul__(self, other: Workload) -> Workload: ...

    @overload
    def __matmul__(self, other: npt.ArrayLike) -> FloatArray: ...

    def __matmul__(self, other: Workload | npt.ArrayLike) -> FloatArray | Workload:
        if isinstance(other, Workload):
            return Product(self, other)
        X = np.asarray(other)
        if X.ndim not in (1, 2) or X.shape[0] != self.shape[1]:
            raise ShapeError(
                f"cannot multiply a {self.shape[0]} × {self.shape[1]} matrix by an array of shape "
                f"{X.shape}; the first dimension must be {self.shape[1]}."
            )
        if X.ndim == 1:
            return self._matmat(X[:, None])[:, 0]
        return self._matmat(X)

    def rmatvec(self, y: npt.ArrayLike) -> FloatArray:
        """Aᵀ y for a vector (or (m, k) array) y."""
        Y = np.asarray(y)
        if Y.ndim not in (1, 2) or Y.shape[0] != self.shape[0]:
            raise ShapeError(f"Aᵀ y needs y with {self.shape[0]} rows; got shape {Y.shape}.")
        return self._rmatmat(Y[:, None])[:, 0] if Y.ndim == 1 else self._rmatmat(Y)

    @property
    def T(self) -> Workload:
        """The transpose Aᵀ."""
        return Transpose(self)

    @cached
    def gram(self) -> Workload:
        """AᵀA (n × n); structured subclasses keep their structure."""
        n = self.shape[1]
        check_dense_size(n, n, "the Gram matrix")
        return Explicit(self._rmatmat(self._matmat(np.eye(n))))

    def dense(self) -> FloatArray:
        """The matrix as a dense array (for tests and small domains)."""
        m, n = self.shape
        check_dense_size(m, n, f"densifying {self!r}")
        return np.asarray(self._matmat(np.eye(n)), dtype=np.float64)

    def trace(self) -> float:
        """trace(A) of a square operator."""
        return float(np.trace(self.dense()))

    # ----------------------------------------------------------------------------- norms
    def _column_terms(self, p: int) -> list[ColumnTerm]:
        """Σ_i |A_ij|^p as a sum of Kronecker products of non-negative vectors."""
        return [(np.sum(np.abs(self.dense()) ** p, axis=0),)]

    def column_norms(self, norm: Norm = "l2") -> FloatArray:
        """Every column's L1 or L2 norm as a dense n-vector (forms the product domain)."""
        p = _norm_power(norm)
        total = np.sum([kron_vectors(term) for term in align_terms(self._column_terms(p))], axis=0)
        return np.asarray(total, dtype=np.float64) ** (1.0 / p)

    def max_column_power_sum(self, p: int, weights: ColumnTerm | None = None) -> float:
        """max_j w_j Σ_i |A_ij|^p, exact, without forming the product domain (Δ₁ for p = 1, Δ₂² for
        p = 2; ``weights``: non-negative Kronecker vectors w = w₁ ⊗ w₂ ⊗ … over the columns, else 1)."""
        terms = self._column_terms(p)
        if weights is None:
            return max_of_kron_sum(terms)
        if int(np.prod([len(v) for v in weights])) != self.shape[1]:
            raise ShapeError(f"column weights over {[len(v) for v in weights]} cells do not "
                             f"match {self.shape[1]} columns.")
        *aligned, w = align_terms([*terms, tuple(np.asarray(v, dtype=np.float64) for v in weights)])
        return max_of_kron_sum([tuple(a * b for a, b in zip(term, w)) for term in aligned])

    def sensitivity(self, norm: Norm = "l2") -> float:
        """Δ₁ or Δ₂: the largest column norm.

        Under add/remove-one-row neighbours x changes by one in one cell, so ‖A x − A x′‖ is a
        column norm of A; the sensitivity is the largest one.
        """
        p = _norm_power(norm)
        return float(self.max_column_power_sum(p) ** (1.0 / p))

    def max_abs_entry(self) -> float:
        """max_ij |A_ij| (bounds the size of A x for exact integer arithmetic)."""
        return float(np.abs(self.dense()).max(initial=0.0))

    # ----------------------------------------------------------------------------- quadratic forms
    def _quadratic_diag_dense(self, M: FloatArray) -> FloatArray:
        """diag(A M Aᵀ) for a dense n × n M, computed a block of rows at a time."""
        m, n = self.shape
        out = np.empty(m)
        step = max(1, MAX_DENSE_ENTRIES // (4 * max(n, 1)))
        for start in range(0, m, step):
            stop = min(m, start + step)
            selector = np.zeros((m, stop - start))
            selector[np.arange(start, stop), np.arange(stop - start)] = 1.0
            rows = self._rmatmat(selector).T
            out[start:stop] = np.einsum("ij,ij->i", rows @ M, rows)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.shape}"


def _norm_power(norm: str) -> int:
    if norm == "l1":
        return 1
    if norm == "l2":
        return 2
    raise ValueError(f"norm must be 'l1' or 'l2'; got {norm!r}.")


def _as_float(X: npt.ArrayLike) -> FloatArray:
    return np.asarray(X, dtype=np.float64)


# =================================================================================== leaves
class Identity(Workload):
    """I_n: one query per cell."""

    def __init__(self, n: int) -> None:
        self.n = positive_int(n, "n")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    def _matmat(self, X: FloatArray) -> FloatArray:
        return X.copy()

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return Y.copy()

    @property
    def integral(self) -> bool:
        return True

    @property
    def T(self) -> Workload:
        return self

    @cached
    def gram(self) -> Workload:
        return self

    def trace(self) -> float:
        return float(self.n)

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        return [(np.ones(self.n),)]

    def max_abs_entry(self) -> float:
        return 1.0

    def _quadratic_diag_dense(self, M: FloatArray) -> FloatArray:
        return np.diag(M).copy()


class Ranges(Workload):
    """Interval-count queries over one ordered attribute: row r sums cells lo_r..hi_r (inclusive)."""

    def __init__(self, n: int, intervals: npt.ArrayLike) -> None:
        self.n = positive_int(n, "n")
        bounds = np.asarray(intervals, dtype=np.int64).reshape(-1, 2)
        if bounds.size and (bounds.min() < 0 or bounds.max() >= self.n or np.any(bounds[:, 0] > bounds[:, 1])):
            raise ShapeError(f"every interval (lo, hi) must satisfy 0 <= lo <= hi < {self.n}.")
        self._bounds = bounds

    @property
    def lo(self) -> npt.NDArray[np.int64]:
        return self._bounds[:, 0]

    @property
    def hi(self) -> npt.NDArray[np.int64]:
        return self._bounds[:, 1]

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.lo), self.n)

    @property
    def integral(self) -> bool:
        return True

    def max_abs_entry(self) -> float:
        return 1.0 if self.shape[0] else 0.0

    def _matmat(self, X: FloatArray) -> FloatArray:
        cumulative = np.concatenate([np.zeros((1, X.shape[1]), dtype=X.dtype), np.cumsum(X, axis=0)])
        return cumulative[self.hi + 1] - cumulative[self.lo]

    @cached_property
    def _endpoints(self) -> sp.csr_array:
        """(n+1) × m: +1 at each interval's start, −1 just past its end (a difference array)."""
        m = self.shape[0]
        rows = np.concatenate([self.lo, self.hi + 1])
        values = np.concatenate([np.ones(m), -np.ones(m)])
        return sp.csr_array((values, (rows, np.tile(np.arange(m), 2))), shape=(self.n + 1, m))

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return np.cumsum(np.asarray(self._endpoints @ Y)[:-1], axis=0)

    @cached
    def gram(self) -> Workload:
        """Σ_r 1_[lo,hi] 1_[lo,hi]ᵀ by a two-dimensional difference array: O(m + n²)."""
        check_dense_size(self.n, self.n, "the Gram matrix")
        diff = np.zeros((self.n + 1, self.n + 1))
        for rows, cols, sign in ((self.lo, self.lo, 1), (self.lo, self.hi + 1, -1),
                                 (self.hi + 1, self.lo, -1), (self.hi + 1, self.hi + 1, 1)):
            np.add.at(diff, (rows, cols), sign)
        return Explicit(np.cumsum(np.cumsum(diff, axis=0), axis=1)[:-1, :-1])

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        return [(self._rmatmat(np.ones((self.shape[0], 1)))[:, 0].astype(np.float64),)]

    def _quadratic_diag_dense(self, M: FloatArray) -> FloatArray:
        """1_[lo,hi]ᵀ M 1_[lo,hi] from the 2-D prefix sums of M: O(n² + m)."""
        S = np.zeros((self.n + 1, self.n + 1))
        S[1:, 1:] = np.cumsum(np.cumsum(M, axis=0), axis=1)
        lo, hi = self.lo, self.hi + 1
        return S[hi, hi] - S[lo, hi] - S[hi, lo] + S[lo, lo]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, m={self.shape[0]})"


class Total(Ranges):
    """The single all-ones row: the total count."""

    def __init__(self, n: int) -> None:
        super().__init__(n, [(0, positive_int(n, "n") - 1)])

    def __repr__(self) -> str:
        return f"Total({self.n})"


class Prefix(Ranges):
    """Prefix sums (the CDF workload): row i sums cells 0..i."""

    def __init__(self, n: int) -> None:
        n = positive_int(n, "n")
        super().__init__(n, np.stack([np.zeros(n, dtype=np.int64), np.arange(n)], axis=1))

    def _matmat(self, X: FloatArray) -> FloatArray:
        return np.cumsum(X, axis=0)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return np.cumsum(Y[::-1], axis=0)[::-1]

    @cached
    def gram(self) -> Workload:
        """G_ij = n − max(i, j) (0-based); eigenvalues 1 / (4 sin²((2k−1)π/(4n+2))), k = 1..n."""
        check_dense_size(self.n, self.n, "the Gram matrix")
        index = np.arange(self.n)
        k = np.arange(1, self.n + 1)
        spectrum = 1.0 / (2.0 * np.sin((2 * k - 1) * np.pi / (4 * self.n + 2))) ** 2
        return Explicit((self.n - np.maximum.outer(index, index)).astype(np.float64), eigenvalues=spectrum)

    def __repr__(self) -> str:
        return f"Prefix({self.n})"


class AllRange(Ranges):
    """All n(n+1)/2 intervals [i, j], i <= j, ordered by i then j; applied by cumulative sums."""

    def __init__(self, n: int) -> None:
        self.n = positive_int(n, "n")

    @cached_property
    def _bounds(self) -> npt.NDArray[np.int64]:  # type: ignore[override]
        lo, hi = np.triu_indices(self.n)
        return np.stack([lo, hi], axis=1).astype(np.int64)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n * (self.n + 1) // 2, self.n)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        """(Aᵀy)_l = Σ_{i <= l} Σ_{j >= l} y_ij: per start i, a reverse cumulative sum over j.

        O(n²k) time and O(nk) memory.
        """
        out = np.zeros((self.n, Y.shape[1]), dtype=np.result_type(Y.dtype, np.float64))
        start = 0
        for i in range(self.n):
            block = Y[start:start + self.n - i]
            out[i:] += np.cumsum(block[::-1], axis=0)[::-1]
            start += self.n - i
        return out

    @cached
    def gram(self) -> Workload:
        """G_ij = (min(i, j) + 1)·(n − max(i, j)) (0-based): the number of ranges holding both.

        G = (n+1)·T⁻¹ with T = tridiag(−1, 2, −1), so its eigenvalues are
        (n+1) / (4 sin²(kπ / (2(n+1)))), k = 1..n.
        """
        check_dense_size(self.n, self.n, "the Gram matrix")
        index = np.arange(self.n)
        k = np.arange(1, self.n + 1)
        spectrum = (self.n + 1) / (4.0 * np.sin(k * np.pi / (2 * (self.n + 1))) ** 2)
        dense = (np.minimum.outer(index, index) + 1) * (self.n - np.maximum.outer(index, index))
        return Explicit(dense.astype(np.float64), eigenvalues=spectrum)

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        index = np.arange(self.n)
        return [(((index + 1) * (self.n - index)).astype(np.float64),)]

    def __repr__(self) -> str:
        return f"AllRange({self.n})"


class Explicit(Workload):
    """A matrix given as a dense numpy array or a scipy.sparse matrix."""

    matrix: FloatArray | sp.csr_array

    def __init__(self, matrix: npt.ArrayLike | sp.spmatrix | sp.sparray, *,
                 eigenvalues: FloatArray | None = None) -> None:
        """``eigenvalues``: the spectrum of a symmetric matrix when it is known in closed form."""
        self.known_eigenvalues = eigenvalues
        if sp.issparse(matrix):
            self.matrix = sp.csr_array(matrix, dtype=np.float64)
            values = self.matrix.data
        else:
            dense = np.asarray(matrix, dtype=np.float64)
            if dense.ndim != 2:
                raise ShapeError(f"Explicit needs a 2-D matrix; got an array of shape {dense.shape}.")
            self.matrix = values = dense
        if not np.all(np.isfinite(values)):
            raise ShapeError("Explicit needs finite entries; the matrix holds NaN or infinity.")

    @cached_property
    def shape(self) -> tuple[int, int]:  # kept: operators are immutable once built, and shapes are read often
        rows, cols = self.matrix.shape
        return (int(rows), int(cols))

    def _matmat(self, X: FloatArray) -> FloatArray:
        return np.asarray(self.matrix @ X)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return np.asarray(self.matrix.T @ Y)

    @property
    def T(self) -> Workload:
        return Explicit(self.matrix.T)

    @cached_property
    def integral(self) -> bool:
        values = self.matrix.data if sp.issparse(self.matrix) else self.matrix
        return bool(np.all(np.mod(values, 1.0) == 0.0))

    @cached
    def gram(self) -> Workload:
        product = self.matrix.T @ self.matrix
        return Explicit(product)

    def dense(self) -> FloatArray:
        check_dense_size(*self.shape, "densifying an explicit matrix")
        if isinstance(self.matrix, sp.csr_array):
            return np.asarray(self.matrix.toarray(), dtype=np.float64)
        return self.matrix.copy()

    def trace(self) -> float:
        return float(self.matrix.diagonal().sum())

    def max_abs_entry(self) -> float:
        values = self.matrix.data if sp.issparse(self.matrix) else self.matrix
        return float(np.abs(values).max(initial=0.0))

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        powered = abs(self.matrix).power(p) if sp.issparse(self.matrix) else np.abs(self.matrix) ** p
        return [(np.asarray(powered.sum(axis=0), dtype=np.float64).ravel(),)]

    def _quadratic_diag_dense(self, M: FloatArray) -> FloatArray:
        product = np.asarray(self.matrix @ M)
        if isinstance(self.matrix, sp.csr_array):
            return np.asarray(self.matrix.multiply(product).sum(axis=1), dtype=np.float64).ravel()
        return np.einsum("ij,ij->i", product, self.matrix)


# =================================================================================== combinators
class Kron(Workload):
    """A₁ ⊗ A₂ ⊗ … ⊗ A_d over the product of the factors' domains (row-major cell order)."""

    def __init__(self, factors: Sequence[Workload]) -> None:
        if not factors:
            raise ShapeError("Kron needs at least one factor.")
        self.factors: tuple[Workload, ...] = tuple(factors)

    @cached_property
    def shape(self) -> tuple[int, int]:
        shapes = [f.shape for f in self.factors]  # math.prod: exact ints, without numpy's per-call overhead
        return math.prod(rows for rows, _ in shapes), math.prod(cols for _, cols in shapes)

    def _apply(self, X: FloatArray, transpose: bool) -> FloatArray:
        k = X.shape[1]
        sizes = [f.shape[0] if transpose else f.shape[1] for f in self.factors]
        tensor = X.reshape(*sizes, k)
        for axis, factor in enumerate(self.factors):
            moved = np.moveaxis(tensor, axis, 0)
            rest = moved.shape[1:]
            flat = moved.reshape(moved.shape[0], -1)
            applied = factor._rmatmat(flat) if transpose else factor._matmat(flat)
            tensor = np.moveaxis(applied.reshape(applied.shape[0], *rest), 0, axis)
        return tensor.reshape(-1, k)

    def _matmat(self, X: FloatArray) -> FloatArray:
        return self._apply(X, transpose=False)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return self._apply(Y, transpose=True)

    @property
    def T(self) -> Workload:
        return Kron([f.T for f in self.factors])

    @property
    def integral(self) -> bool:
        return all(f.integral for f in self.factors)

    @cached
    def gram(self) -> Workload:
        return Kron([f.gram() for f in self.factors])

    def dense(self) -> FloatArray:
        """np.kron of the dense factors: each entry Πᵢ (Aᵢ)_{jᵢkᵢ}, one product per entry instead of
        applying every factor to the n columns of I_n."""
        check_dense_size(*self.shape, f"densifying {self!r}")
        product = self.factors[0].dense()
        for factor in self.factors[1:]:
            product = np.asarray(kron(product, factor.dense()), dtype=np.float64)
        return product

    def trace(self) -> float:
        """Π trace(Aᵢ) when every factor is square; otherwise densely."""
        if all(f.shape[0] == f.shape[1] for f in self.factors):
            return float(np.prod([f.trace() for f in self.factors]))
        return super().trace()

    def max_abs_entry(self) -> float:
        return float(np.prod([f.max_abs_entry() for f in self.factors]))

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        terms: list[ColumnTerm] = [()]
        for factor in self.factors:
            terms = [left + right for left in terms for right in factor._column_terms(p)]
        return terms

    def __repr__(self) -> str:
        return "Kron([" + ", ".join(map(repr, self.factors)) + "])"


class VStack(Workload):
    """Blocks stacked on top of each other: the union of their queries over the same cells."""

    def __init__(self, blocks: Sequence[Workload]) -> None:
        if not blocks:
            raise ShapeError("VStack needs at least one block.")
        widths = {b.shape[1] for b in blocks}
        if len(widths) != 1:
            raise ShapeError(f"VStack blocks must have the same number of columns; got {sorted(widths)}.")
        self.blocks: tuple[Workload, ...] = tuple(blocks)

    @cached_property
    def shape(self) -> tuple[int, int]:  # kept: a stack of a thousand blocks would add them up on every read
        return (sum(b.shape[0] for b in self.blocks), self.blocks[0].shape[1])

    def _matmat(self, X: FloatArray) -> FloatArray:
        return np.concatenate([b._matmat(X) for b in self.blocks])

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        offsets = np.cumsum([0] + [b.shape[0] for b in self.blocks])
        return sum(b._rmatmat(Y[lo:hi]) for b, lo, hi in zip(self.blocks, offsets[:-1], offsets[1:]))  # type: ignore[return-value]

    @property
    def integral(self) -> bool:
        return all(b.integral for b in self.blocks)

    @cached
    def gram(self) -> Workload:
        return Sum([b.gram() for b in self.blocks])

    def dense(self) -> FloatArray:
        """The blocks' dense forms stacked (each block keeps its own structured ``dense``)."""
        check_dense_size(*self.shape, f"densifying {self!r}")
        return np.concatenate([b.dense() for b in self.blocks])

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        return [term for b in self.blocks for term in b._column_terms(p)]

    def max_abs_entry(self) -> float:
        return max(b.max_abs_entry() for b in self.blocks)

    def _quadratic_diag_dense(self, M: FloatArray) -> FloatArray:
        return np.concatenate([b._quadratic_diag_dense(M) for b in self.blocks])

    def __repr__(self) -> str:
        return "VStack([" + ", ".join(map(repr, self.blocks)) + "])"


class Weighted(Workload):
    """w · A for a scalar weight w (a query's importance; errors scale by w²)."""

    def __init__(self, weight: float, base: Workload) -> None:
        weight = float(weight)
        if not np.isfinite(weight) or weight == 0.0:
            raise ShapeError(f"Weighted needs a finite non-zero weight; got {weight}.")
        self.weight = weight
        self.base = base

    @property
    def shape(self) -> tuple[int, int]:
        return self.base.shape

    def _matmat(self, X: FloatArray) -> FloatArray:
        return self.weight * self.base._matmat(X)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return self.weight * self.base._rmatmat(Y)

    @property
    def T(self) -> Workload:
        return Weighted(self.weight, self.base.T)

    @property
    def integral(self) -> bool:
        return float(self.weight).is_integer() and self.base.integral

    @cached
    def gram(self) -> Workload:
        return Weighted(self.weight**2, self.base.gram())

    def dense(self) -> FloatArray:
        return self.weight * self.base.dense()

    def trace(self) -> float:
        return self.weight * self.base.trace()

    def max_abs_entry(self) -> float:
        return abs(self.weight) * self.base.max_abs_entry()

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        scale = abs(self.weight) ** p
        return [(term[0] * scale, *term[1:]) for term in self.base._column_terms(p)]

    def _quadratic_diag_dense(self, M: FloatArray) -> FloatArray:
        return self.weight**2 * self.base._quadratic_diag_dense(M)

    def __repr__(self) -> str:
        return f"Weighted({self.weight:g}, {self.base!r})"


class Sum(Workload):
    """A₁ + A₂ + …: matrices of one shape added (the Gram of a VStack is the Sum of block Grams)."""

    def __init__(self, terms: Sequence[Workload]) -> None:
        if not terms or len({t.shape for t in terms}) != 1:
            raise ShapeError("Sum needs one or more terms of the same shape.")
        self.terms: tuple[Workload, ...] = tuple(terms)

    @property
    def shape(self) -> tuple[int, int]:
        return self.terms[0].shape

    def _matmat(self, X: FloatArray) -> FloatArray:
        return sum(t._matmat(X) for t in self.terms)  # type: ignore[return-value]

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return sum(t._rmatmat(Y) for t in self.terms)  # type: ignore[return-value]

    @property
    def T(self) -> Workload:
        return Sum([t.T for t in self.terms])

    @property
    def integral(self) -> bool:
        return all(t.integral for t in self.terms)

    @cached
    def gram(self) -> Workload:
        """(Σ_b K_b)ᵀ(Σ_b' K_b') = Σ_{b,b'} K_bᵀ K_b'; Kronecker terms give Kronecker cross terms."""
        shapes = {tuple(f.shape for f in t.factors) for t in self.terms}  # type: ignore[attr-defined]
        if all(isinstance(t, Kron) for t in self.terms) and len(shapes) == 1:
            return Sum([Kron([Explicit(f.rmatvec(g.dense())) for f, g in zip(left.factors, right.factors)])  # type: ignore[attr-defined]
                        for left in self.terms for right in self.terms])
        return super().gram()

    def dense(self) -> FloatArray:
        """Σ of the terms' dense forms, added in order into one array. A term c·(F₁ ⊗ … ⊗ F_d)
        (c = 1 for a plain Kronecker product) is added a row of L = F₁ ⊗ … ⊗ F_{d−1} at a time, as
        c·(L_ij · F_d), the very products ``Weighted(c, Kron).dense`` forms, without a temporary of
        the sum's size per term (when such a row block holds at least KRON_BLOCK_ENTRIES); other
        terms by their own ``dense``."""
        check_dense_size(*self.shape, f"densifying {self!r}")
        total = np.empty(self.shape)
        for index, term in enumerate(self.terms):
            weight, base = (term.weight, term.base) if isinstance(term, Weighted) else (None, term)
            if isinstance(base, Kron) and len(base.factors) > 1 \
                    and base.factors[-1].shape[0] * base.shape[1] >= KRON_BLOCK_ENTRIES:
                _add_kron(total, weight, base, first=index == 0)
            elif index == 0:
                total[...] = term.dense()
            else:
                total += term.dense()
        return total

    def trace(self) -> float:
        return float(sum(t.trace() for t in self.terms))

    def __repr__(self) -> str:
        return "Sum([" + ", ".join(map(repr, self.terms)) + "])"


#: Sum.dense adds a Kronecker term by row blocks of at least this many entries (else densely).
KRON_BLOCK_ENTRIES = 2**14


def _add_kron(total: FloatArray, weight: float | None, term: Kron, *, first: bool) -> None:
    """total (+)= weight · (L ⊗ F) for L = ⊗ of the term's leading factors and F its last, one row
    of L at a time: entries L_ij · F_kl (times the weight), as np.kron and Weighted.dense form them."""
    left = Kron(term.factors[:-1]).dense() if len(term.factors) > 2 else term.factors[0].dense()
    right = term.factors[-1].dense()
    (p, q), (r, s) = left.shape, right.shape
    blocks = total.reshape(p, r, q, s)
    block = np.empty((r, q, s))
    for i in range(p):
        out = blocks[i] if first else block
        np.multiply(left[i][None, :, None], right[:, None, :], out=out)
        if weight is not None:
            out *= weight
        if not first:
            blocks[i] += block


class DisjointSum(Sum):
    """Σ_t K_t whose terms have disjoint column supports (the caller's promise: e.g. Kronecker
    boxes over disjoint cells): column j is non-zero in one term at most.

    So Σ_i |(Σ_t K_t)_ij|^p = Σ_t Σ_i |(K_t)_ij|^p — the column power sums (sensitivities) stay a
    sum of Kronecker vectors, never a dense n × n pass.
    """

    def _column_terms(self, p: int) -> list[ColumnTerm]:
        return [term for t in self.terms for term in t._column_terms(p)]


class Product(Workload):
    """A B, applied right to left."""

    def __init__(self, left: Workload, right: Workload) -> None:
        if left.shape[1] != right.shape[0]:
            raise ShapeError(f"cannot multiply {left.shape} by {right.shape}.")
        self.left, self.right = left, right

    @property
    def shape(self) -> tuple[int, int]:
        return (self.left.shape[0], self.right.shape[1])

    def _matmat(self, X: FloatArray) -> FloatArray:
        return self.left._matmat(self.right._matmat(X))

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return self.right._rmatmat(self.left._rmatmat(Y))

    @property
    def T(self) -> Workload:
        return Product(self.right.T, self.left.T)


class Transpose(Workload):
    """Aᵀ of any operator."""

    def __init__(self, base: Workload) -> None:
        self.base = base

    @property
    def shape(self) -> tuple[int, int]:
        return (self.base.shape[1], self.base.shape[0])

    def _matmat(self, X: FloatArray) -> FloatArray:
        return self.base._rmatmat(X)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return self.base._matmat(Y)

    @property
    def T(self) -> Workload:
        return self.base

    @property
    def integral(self) -> bool:
        return self.base.integral


def positive_int(value: int, name: str) -> int:
    """``value`` as an int >= 1 (bool refused), else ShapeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ShapeError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


def rank_bound(A: Workload) -> int:
    """An upper bound on rank(A) from its structure alone, O(number of factors and blocks): rank(A) ≤
    min(rows, columns); rank(⊗Aᵢ) = Π rank(Aᵢ); rank of a stack ≤ the sum of its blocks' ranks;
    rank(w·A) = rank(A)."""
    rows, columns = A.shape
    if isinstance(A, Weighted):
        return rank_bound(A.base)
    if isinstance(A, Kron):
        return min(rows, columns, math.prod(rank_bound(f) for f in A.factors))
    if isinstance(A, VStack):
        return min(rows, columns, sum(rank_bound(b) for b in A.blocks))
    return min(rows, columns)


def kron_factors(A: Workload) -> tuple[Workload, ...]:
    """A's Kronecker factors (a single-element tuple for a non-Kronecker operator)."""
    return A.factors if isinstance(A, Kron) else (A,)


def scale_columns(A: Workload, weights: ColumnTerm) -> Workload:
    """A·diag(w₁ ⊗ w₂ ⊗ …), keeping A's structure: a Kronecker product over the same axes scales
    its factors, stacks, sums and weights scale their parts; any other operator becomes an
    explicit (sparse) matrix with its columns scaled (DomainTooLargeError if it is too large)."""
    vectors = tuple(np.asarray(v, dtype=np.float64) for v in weights)
    if int(np.prod([len(v) for v in vectors])) != A.shape[1]:
        raise ShapeError(f"column weights over {[len(v) for v in vectors]} cells do not match {A.shape[1]} columns.")
    if all(np.all(v == 1.0) for v in vectors):
        return A
    if isinstance(A, Kron) and [f.shape[1] for f in A.factors] == [len(v) for v in vectors]:
        return Kron([f if np.all(v == 1.0) else _scaled_leaf(f, v) for f, v in zip(A.factors, vectors)])
    if isinstance(A, VStack):
        return VStack([scale_columns(b, vectors) for b in A.blocks])
    if isinstance(A, Weighted):
        return Weighted(A.weight, scale_columns(A.base, vectors))
    if isinstance(A, Sum):  # DisjointSum stays disjoint: scaling columns keeps every support
        return type(A)([scale_columns(t, vectors) for t in A.terms])
    return _scaled_leaf(A, kron_vectors(vectors))


def _scaled_leaf(A: Workload, v: FloatArray) -> Workload:
    """A·diag(v) as an Explicit matrix (sparse unless A is dense)."""
    if isinstance(A, Identity):
        return Explicit(sp.diags_array(v).tocsr())
    if isinstance(A, Explicit) and not sp.issparse(A.matrix):
        return Explicit(A.matrix * v)
    matrix = A.matrix if isinstance(A, Explicit) else sp.csr_array(A.dense())
    return Explicit(sp.csr_array(matrix @ sp.diags_array(v)))

