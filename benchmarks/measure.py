"""Throughput of one measurement over a million cells: noise, y = A x + z, and x̂ = A⁺ y.

Run: python benchmarks/measure.py
"""

from __future__ import annotations

import time

import numpy as np
from _machine import header

from dpsql import strategies
from dpsql.matrix import workloads
from dpsql.planning import mechanism


def main() -> None:
    print(header("one measurement of a million-cell data vector"))
    x = np.random.default_rng(0).poisson(3, size=1_000_000)
    cases = {
        "identity(10^6)": strategies.identity(1_000_000),
        "H2(1000) ⊗ identity(1000)": strategies.kron([strategies.hierarchical(1000), strategies.identity(1000)]),
        "wavelet(1000) ⊗ H4(1000)": strategies.kron([strategies.wavelet(1000), strategies.hierarchical(1000, 4)]),
    }
    W = workloads.Kron([workloads.Prefix(1000), workloads.Identity(1000)])
    print(f"{'strategy':<28} {'rows':>10} {'noise':>9} {'measure':>9} {'reconstruct':>12} {'answers+var':>12}")
    for name, A in cases.items():
        for budget in ({"rho": 0.1}, {"epsilon": 1.0}):
            started = time.perf_counter()
            release = mechanism.measure(A, x, **budget)
            measured = time.perf_counter() - started
            started = time.perf_counter()
            mechanism.reconstruct(release)
            reconstructed = time.perf_counter() - started
            started = time.perf_counter()
            mechanism.answer(W, release)
            answered = time.perf_counter() - started
            print(f"{name:<28} {A.shape[0]:>10,} {release.noise:>9} {measured:8.2f}s {reconstructed:11.2f}s "
                  f"{answered:11.2f}s")


if __name__ == "__main__":
    main()
