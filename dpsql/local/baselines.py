"""Fixed ε-LDP mechanisms written as strategy matrices Q (m × n): the competitors of the optimizer.

Notation: n cells, m outputs, Q[o, u] = Pr[report o | cell u], e = e^ε, H_K the K × K Sylvester
Hadamard matrix (entries ±1, first column all ones). "∝" means each column is normalised to sum 1.

Privacy (all of them): every row of Q takes at most two values per column normaliser, in the ratio
e : 1 or less, and the normaliser is the same for every column, so Q[o, u] ≤ e^ε Q[o, u'] and each
mechanism is ε-LDP (Prop. 2.6 of McKenna et al. 2020). The reason is given per mechanism.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import numpy as np
import scipy.linalg as sla

from dpsql.errors import DomainTooLargeError, ShapeError
from dpsql.local.strategy import LocalStrategy, check_epsilon
from dpsql.matrix.workloads import FloatArray

HadamardForm = Literal["general", "high_privacy"]

#: Largest output count built for the exponential-size mechanisms (RAPPOR, subset selection).
MAX_OUTPUTS = 2**16


def randomized_response(n: int, *, epsilon: float) -> LocalStrategy:
    """Randomized response: report the true cell with probability e/(e + n − 1), else a uniform other cell.

    Math:
        Q = ((e − 1) I + J) / (e + n − 1)   (m = n).
    Privacy:
        ε-LDP: each row holds e/(e+n−1) once and 1/(e+n−1) elsewhere, a ratio of exactly e^ε.
    """
    n, e = _cells(n), math.exp(check_epsilon(epsilon))
    Q = (np.ones((n, n)) + (e - 1) * np.eye(n)) / (e + n - 1)
    return LocalStrategy(Q=Q, epsilon=epsilon, name="randomized response")


def rappor(n: int, *, epsilon: float) -> LocalStrategy:
    """Basic one-time RAPPOR: the one-hot vector of the cell, each bit flipped with probability 1/(1 + e^{ε/2}).

    Math:
        outputs o ∈ {0,1}ⁿ (m = 2ⁿ; o's bit j is bit j of the output index),
        Q[o, u] ∝ e^{(ε/2)(n − ‖o − e_u‖₁)}; the normaliser (1 + e^{ε/2})ⁿ is the same for every u.
    Privacy:
        ε-LDP: ‖o − e_u‖₁ and ‖o − e_u'‖₁ differ by at most 2, so a row's entries differ by at
        most a factor e^{2·ε/2} = e^ε.
    Raises:
        DomainTooLargeError: 2ⁿ > MAX_OUTPUTS.
    """
    n, epsilon = _cells(n), check_epsilon(epsilon)
    _check_outputs(2**n if n < 64 else math.inf, "RAPPOR", n)
    bits = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1             # (m, n): bit j of output o
    ones = bits.sum(axis=1, keepdims=True)
    distance = ones - bits + (1 - bits)                                         # ‖o − e_u‖₁ for every (o, u)
    Q = np.exp(0.5 * epsilon * (n - distance) - n * math.log1p(math.exp(0.5 * epsilon)))
    return LocalStrategy(Q=Q, epsilon=epsilon, name="RAPPOR")


def subset_selection(n: int, *, epsilon: float, d: int | None = None) -> LocalStrategy:
    """Subset selection (Ye & Barg): report a d-subset of cells, likelier by e^ε when it holds the true cell.

    Math:
        outputs: the C(n, d) subsets o of size d (default d = ⌈n / (e + 1)⌉),
        Q[o, u] = (e if u ∈ o else 1) / (e·C(n−1, d−1) + C(n−1, d)).
    Privacy:
        ε-LDP: each entry is e or 1 over one normaliser shared by every column, a ratio ≤ e^ε.
    Raises:
        ShapeError: d is not in [1, n]. DomainTooLargeError: C(n, d) > MAX_OUTPUTS.
    """
    n, e = _cells(n), math.exp(check_epsilon(epsilon))
    d = max(1, math.ceil(n / (e + 1))) if d is None else d
    if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= n:
        raise ShapeError(f"subset size d must be an integer in [1, {n}]; got {d!r}.")
    _check_outputs(math.comb(n, d), f"subset selection (d={d})", n)
    members = np.zeros((math.comb(n, d), n))
    for row, subset in enumerate(itertools.combinations(range(n), d)):
        members[row, list(subset)] = 1.0
    Q = (1.0 + (e - 1) * members) / (e * math.comb(n - 1, d - 1) + math.comb(n - 1, d))
    return LocalStrategy(Q=Q, epsilon=epsilon, name=f"subset selection (d={d})")


def hadamard(n: int, *, epsilon: float, form: HadamardForm = "general") -> LocalStrategy:
    """Hadamard response: report a Hadamard row index, likelier by e^ε where the cell's column has +1.

    Math:
        high_privacy (Table 1 of McKenna et al.): K = 2^⌈log₂(n+1)⌉ outputs; cell u takes column
            u+1 of H_K (the all-ones column is skipped); Q[o, u] ∝ e if H_K[o, u+1] = 1 else 1.
        general (Acharya et al.'s general-privacy form): B = 2^(⌈log₂ min(e, 2n)⌉ − 1) diagonal
            blocks, each H_b with b = 2^⌈log₂(n/B + 1)⌉, −1 outside the blocks; the first column of
            every block is dropped and cells take the remaining columns in order (K = bB outputs).
            For e ≤ 2 (B = 1) the two forms coincide; at larger ε the general form is far better.
    Privacy:
        ε-LDP: every column has the same number of +1 entries (b/2, since each non-first Hadamard
        column is balanced), so every column has the same normaliser and each row's entries are
        e or 1 over it.
    """
    n, epsilon = _cells(n), check_epsilon(epsilon)
    e = math.exp(epsilon)
    if form == "high_privacy":
        blocks = 1
    elif form == "general":
        blocks = 2 ** (math.ceil(math.log2(min(e, 2 * n))) - 1)
    else:
        raise ValueError(f"form must be 'general' or 'high_privacy'; got {form!r}.")
    size = 2 ** math.ceil(math.log2(n / blocks + 1))
    signs = -np.ones((blocks * size, blocks * (size - 1)))
    for block in range(blocks):
        signs[block * size:(block + 1) * size, block * (size - 1):(block + 1) * (size - 1)] = sla.hadamard(size)[:, 1:]
    signs = signs[:, :n]
    weights = np.where(signs > 0, e, 1.0)
    label = "Hadamard" if form == "general" else "Hadamard (high-privacy)"
    return LocalStrategy(Q=weights / weights.sum(axis=0), epsilon=epsilon, name=label)


def hierarchical(n: int, *, epsilon: float, branching: int = 4, form: HadamardForm = "general") -> LocalStrategy:
    """Hierarchical histograms: pick one level uniformly, report the cell's bucket there with Hadamard response.

    Math:
        levels ℓ = 0, 1, … while branching^ℓ < n; level ℓ has c_ℓ = ⌈n / branching^ℓ⌉ buckets and
        cell u is in bucket ⌊u / branching^ℓ⌋. Q stacks the levels' Hadamard strategies (over c_ℓ
        cells, applied to the bucket) and divides by the number of levels L. (For n a power of
        the branching factor this is Q_ℓ ⊗ 1ᵀ, as in Cormode et al. and Wang et al.; the root,
        which only counts N, is left out because N is public.)
    Privacy:
        ε-LDP: a row of level ℓ is a row of an ε-LDP Hadamard strategy divided by L, so its
        entries keep a ratio ≤ e^ε.
    """
    n, epsilon = _cells(n), check_epsilon(epsilon)
    if isinstance(branching, bool) or not isinstance(branching, int) or branching < 2:
        raise ShapeError(f"branching must be an integer >= 2; got {branching!r}.")
    cells = np.arange(n)
    parts: list[FloatArray] = []
    width = 1
    while width < n:
        oracle = hadamard(-(-n // width), epsilon=epsilon, form=form)
        parts.append(oracle.Q[:, cells // width])
        width *= branching
    if not parts:  # n = 1: the single cell is the total, known without asking anyone
        parts.append(np.ones((1, 1)))
    label = "hierarchical" if form == "general" else "hierarchical (high-privacy Hadamard)"
    return LocalStrategy(Q=np.vstack(parts) / len(parts), epsilon=epsilon, name=f"{label}, branching {branching}")


def fourier(n: int, *, epsilon: float, order: int | None = None) -> LocalStrategy:
    """Fourier (Cormode et al. 2018): report one random low-order parity of the cell's bits, randomized.

    Math:
        n = 2^d cells, read as d bits; T = the attribute sets t with |t| ≤ order (default d),
        O = |T|, m = 2O, χ_t(u) = (−1)^{popcount(t & u)} and p = e/(1 + e):
        Q[t, u] = (p if χ_t(u) = 1 else 1 − p)/O and Q[O + t, u] = (1 − p if χ_t(u) = 1 else p)/O.
        With order < d, Q has rank O < n: it answers only workloads in the span of those
        characters (low-order marginals), not the histogram.
    Privacy:
        ε-LDP: every row holds p/O or (1 − p)/O, a ratio of p/(1 − p) = e^ε.
    Raises:
        ShapeError: n is not a power of two, or order is not in [0, d].
    """
    n, e = _cells(n), math.exp(check_epsilon(epsilon))
    d = n.bit_length() - 1
    if n != 2**d:
        raise ShapeError("the Fourier mechanism needs n = 2^d cells (d binary attributes), a "
                         f"power of two; got n = {n}.")
    order = d if order is None else order
    if isinstance(order, bool) or not isinstance(order, int) or not 0 <= order <= d:
        raise ShapeError(f"order must be an integer in [0, {d}]; got {order!r}.")
    sets = np.array(sorted((t for t in range(n) if bin(t).count("1") <= order), key=lambda t: (bin(t).count("1"), t)))
    overlap = sets[:, None] & np.arange(n)[None, :]
    parity = np.zeros_like(overlap)
    for bit in range(d):
        parity ^= (overlap >> bit) & 1
    p = e / (1 + e)
    agree = np.where(parity == 0, p, 1 - p)
    Q = np.vstack([agree, 1 - agree]) / len(sets)
    return LocalStrategy(Q=Q, epsilon=epsilon, name=f"Fourier (order {order})")


def _cells(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ShapeError(f"n (the number of cells) must be a positive integer; got {n!r}.")
    return int(n)


def _check_outputs(m: float, what: str, n: int) -> None:
    if m > MAX_OUTPUTS:
        raise DomainTooLargeError(f"{what} over n = {n} cells needs {m:g} outputs (more than {MAX_OUTPUTS:,}); "
                                  "use hadamard or randomized_response, or fewer cells.")
