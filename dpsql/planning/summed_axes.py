"""Planning a workload that reads some attributes only through their totals: on the other attributes.

Let W = ⋃ₖ ⊗ᵢ Wₖᵢ over attributes of sizes n₁ … n_d, and call attribute i *summed* when every term's
factor has constant rows there: Wₖᵢ = fₖᵢ 1ᵀ (a SUM grouped by sex in a group over sex × region reads
region only through its total). Then W = W″P, where W″ has the same terms with each summed factor
replaced by its one column fₖᵢ (attribute i of size 1) and P = ⊗ᵢ Pᵢ, Pᵢ = 1ᵀ on summed attributes
and I elsewhere, sums the cells of x into the marginal x″ = Px. For a strategy A″ of W″, the strategy
A = A″P measures that marginal, and:

- Δ(A) = Δ(A″): every column of A is a column of A″ (P's columns are unit vectors);
- trace(WᵀW (AᵀA)⁺) = trace(W″ᵀW″ (A″ᵀA″)⁺): P Pᵀ = N·I (N = Π of the summed sizes), so
  P⁺ = Pᵀ/N, (AᵀA)⁺ = P⁺(A″ᵀA″)⁺P⁺ᵀ and P P⁺ = I; and A supports W exactly when A″ supports W″;
- nothing better exists: for any A supporting W, the strategy AQ, Q = P⁺P (each column replaced by
  the mean of the columns the marginal adds into its cell), has Δ(AQ) ≤ Δ(A) (a mean of columns is
  no longer than the longest, in any norm) and no larger error, as (QXQ)⁺ ⪯ QX⁺Q on Q's range
  for X = AᵀA ⪰ 0 supporting it (the inverse of a compression is at most the compression of the
  inverse; R. Bhatia, "Positive Definite Matrices", 2007, Prop. 1.3.2 / Ex. 1.3.5), and AQ = A″P
  with A″ = AP⁺.

So the planner plans W″, over N times fewer cells, and lifts the strategy it chooses; every candidate's
error is the same number either way, the optimizers run on smaller problems, and a summed attribute
gets its exact optimum (its total) instead of an optimizer's approach to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dpsql.matrix.workloads import Explicit, Identity, Kron, Total, VStack, Weighted, Workload
from dpsql.residual.basis import kron_terms

#: A lifted factor spanning a summed attribute between others is written out densely up to this many entries;
#: a strategy that would need more is not lifted (the workload is then planned over all its cells).
DENSE_LIFT_ENTRIES = 2**22


@dataclass(frozen=True)
class Reduction:
    """W″ over ``sizes`` (summed attributes of size 1) and the full sizes it lifts back to."""

    workload: Workload
    sizes: tuple[int, ...]
    full: tuple[int, ...]

    @property
    def summed(self) -> tuple[int, ...]:
        """The summed attributes' positions."""
        return tuple(i for i, (n, m) in enumerate(zip(self.full, self.sizes)) if m != n)

    def note(self, names: Sequence[str] | None = None) -> str:
        """What was done, for the plan's notes (attributes by ``names`` where given, else by position)."""
        which = ", ".join(f"{names[i] if names else f'attribute {i + 1}'} ({self.full[i]:,} cells)"
                          for i in self.summed)
        cells = int(np.prod(self.sizes))
        return (f"the queries read {which} only through totals: planned on the other attributes' {cells:,} cells and "
                "lifted (the same expected error, exactly; the total is optimal there)")

    def lift(self, strategy: Workload) -> Workload | None:
        """A = A″P for a strategy A″ of W″ (None where a dense factor would exceed DENSE_LIFT_ENTRIES)."""
        if isinstance(strategy, Weighted):
            base = self.lift(strategy.base)
            return None if base is None else Weighted(strategy.weight, base)
        if isinstance(strategy, VStack):
            blocks = [self.lift(block) for block in strategy.blocks]
            return None if any(b is None for b in blocks) else VStack(blocks)  # type: ignore[arg-type]
        factors = list(strategy.factors) if isinstance(strategy, Kron) else [strategy]
        spans = _spans([f.shape[1] for f in factors], self.sizes)
        if spans is None:
            return None
        flat: list[Workload] = []
        for factor, span in zip(factors, spans):
            lifted = self._lift_factor(factor, span)
            if lifted is None:
                return None
            flat.extend(lifted.factors if isinstance(lifted, Kron) else (lifted,))
        return flat[0] if len(flat) == 1 else Kron(flat)

    def _lift_factor(self, factor: Workload, span: range) -> Workload | None:
        """One factor over attributes ``span`` of W″, times P restricted to them (None: a kind of factor
        this does not lift)."""
        summed = [i for i in span if self.sizes[i] != self.full[i]]
        if not summed:
            return factor
        if not isinstance(factor, (Identity, Total, Explicit)):
            return None
        if len(span) == 1:  # a factor of one column over a summed attribute: f 1ᵀ = f ⊗ 1ᵀ
            total = Total(self.full[span[0]])
            return total if isinstance(factor, Identity) else Kron([factor, total])
        kept = [i for i in span if i not in summed]
        if summed == list(span[len(kept):]):  # every summed attribute after the others: F ⊗ 1ᵀ
            return Kron([factor, Total(int(np.prod([self.full[i] for i in summed])))])
        if summed == list(span[:len(summed)]):  # every summed attribute before the others: 1ᵀ ⊗ F
            return Kron([Total(int(np.prod([self.full[i] for i in summed]))), factor])
        cells = int(np.prod([self.full[i] for i in span]))
        if factor.shape[0] * cells > DENSE_LIFT_ENTRIES:
            return None
        P = sp.csr_array(np.ones((1, 1)))
        for i in span:
            P = sp.kron(P, sp.csr_array(np.ones((1, self.full[i]))) if i in summed else sp.eye_array(self.full[i]),
                        format="csr")
        return Explicit(np.asarray(factor.dense(), dtype=np.float64) @ P.toarray())


def _spans(columns: Sequence[int], sizes: Sequence[int]) -> list[range] | None:
    """The attributes each factor covers, consecutive (a factor of one column takes one size-1 attribute, and
    the last factor any left), or None when the factors do not split at attribute boundaries."""
    spans, start = [], 0
    for k, width in enumerate(columns):
        end, product = start, 1
        while end < len(sizes) and (product < width or (sizes[end] == 1 and (end == start or k + 1 == len(columns)))):
            product *= sizes[end]
            end += 1
        if product != width:
            return None
        spans.append(range(start, end))
        start = end
    return spans if start == len(sizes) else None


def reduction(W: Workload, sizes: Sequence[int]) -> Reduction | None:
    """W″ when W is a union of Kronecker products over ``sizes`` with a summed attribute (module doc) and at
    least one attribute that is not; else None."""
    terms = kron_terms(W)
    if len(sizes) < 2 or any(tuple(f.shape[1] for f in factors) != tuple(sizes) for _, factors in terms):
        return None
    summed = {i for i, n in enumerate(sizes) if n > 1 and all(_constant_rows(factors[i]) for _, factors in terms)}
    if not summed or len(summed) == sum(n > 1 for n in sizes):
        return None
    workload = _columns_for(W, summed)
    return None if workload is None else Reduction(
        workload=workload, sizes=tuple(1 if i in summed else int(n) for i, n in enumerate(sizes)),
        full=tuple(int(n) for n in sizes))


def _columns_for(W: Workload, summed: set[int]) -> Workload | None:
    """W with each summed factor replaced by its one column, its stacks and weights as written (None where a
    Kronecker term nests its factors: W″ is built from flat terms only)."""
    if isinstance(W, Weighted):
        base = _columns_for(W.base, summed)
        return None if base is None else Weighted(W.weight, base)
    if isinstance(W, VStack):
        blocks = [_columns_for(block, summed) for block in W.blocks]
        return None if any(b is None for b in blocks) else VStack(blocks)  # type: ignore[arg-type]
    if isinstance(W, Kron) and not any(isinstance(f, Kron) for f in W.factors):
        return Kron([_first_column(f) if i in summed else f for i, f in enumerate(W.factors)])
    return None


def _constant_rows(factor: Workload) -> bool:
    """Whether every row of a factor is constant (c·1ᵀ), from its stored entries (never densified)."""
    if isinstance(factor, Total):
        return True
    if isinstance(factor, Identity):
        return factor.shape[1] == 1
    if not isinstance(factor, Explicit):
        return False
    matrix = factor.matrix
    if isinstance(matrix, np.ndarray):
        return bool(np.all(matrix == matrix[:, :1]))
    stored = np.diff(matrix.indptr)  # a sparse row is constant when empty, or full with equal entries
    if np.any((stored != 0) & (stored != matrix.shape[1])):
        return False
    firsts = np.repeat(matrix.data[matrix.indptr[:-1][stored > 0]], stored[stored > 0])
    return bool(np.all(matrix.data == firsts))


def _first_column(factor: Workload) -> Workload:
    """A constant-row factor's one column f (factor = f 1ᵀ)."""
    if isinstance(factor, Total):
        return Identity(1)
    matrix = factor.matrix if isinstance(factor, Explicit) else np.asarray(factor.dense())
    if isinstance(matrix, np.ndarray):
        return Explicit(matrix[:, :1])
    return Explicit(matrix[:, [0]].toarray())
