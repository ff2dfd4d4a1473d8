"""The trivial strategies: measure every cell, measure the workload itself, and products."""

from __future__ import annotations

from collections.abc import Sequence

from dpsql.matrix.workloads import Identity, Kron, Workload


def identity(n: int) -> Identity:
    """A = I_n: every cell once. Δ₁ = Δ₂ = 1; total error v·‖W‖_F²."""
    return Identity(n)


def workload(W: Workload) -> Workload:
    """A = W: the workload's own queries (error v·Δ(W)²·rank(W)); supports W by construction."""
    return W


def kron(strategies: Sequence[Workload]) -> Workload:
    """A₁ ⊗ … ⊗ A_d: one strategy per attribute over the product domain.

    Sensitivities multiply (Δ(⊗Aᵢ) = Π Δ(Aᵢ)), and (⊗Aᵢ)⁺ = ⊗Aᵢ⁺, so errors on Kronecker
    workloads are products of per-attribute errors.
    """
    return strategies[0] if len(strategies) == 1 else Kron(list(strategies))
