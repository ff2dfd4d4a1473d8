"""Standard strategies on range and prefix workloads: error ratio to the SVD bound, and time.

For AllRange(n) and Prefix(n) at n = 256, 1024, 4096 and for 3-attribute Kronecker workloads,
prints each strategy's exact expected total squared error (Gaussian, ρ = 1/2) divided by the
SVD lower bound, and the seconds taken to compute it (sensitivity, (AᵀA)⁺ and trace). The ratio
is scale-free: it is the same at any ρ.

Run: python benchmarks/strategies.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

from _machine import header

from dpsql import error, strategies, workloads
from dpsql.workloads import Workload

ONE_ATTRIBUTE: dict[str, Callable[[int], Workload]] = {
    "identity": strategies.identity,
    "H2": lambda n: strategies.hierarchical(n, 2),
    "H4": lambda n: strategies.hierarchical(n, 4),
    "H16": lambda n: strategies.hierarchical(n, 16),
    "wavelet": strategies.wavelet,
}


def row(label: str, W: Workload, candidates: dict[str, Workload]) -> None:
    started = time.perf_counter()
    bound = error.svd_bound(W)
    cells = [f"{label:<34} {W.shape[0]:>13,} {time.perf_counter() - started:6.2f}s"]
    for A in candidates.values():
        started = time.perf_counter()
        ratio = error.expected_error(W, A, noise="gaussian") / bound
        cells.append(f"{ratio:8.3f} {time.perf_counter() - started:6.2f}s")
    print("  ".join(cells))


def main() -> None:
    print(header("standard strategies: expected error / SVD bound (Gaussian), and seconds"))
    names = list(ONE_ATTRIBUTE) + ["A = W"]
    print(f"{'workload':<34} {'queries':>13} {'svdb':>7}  " + "  ".join(f"{name:>15}" for name in names))
    for make in (workloads.AllRange, workloads.Prefix):
        for n in (256, 1024, 4096):
            W = make(n)
            candidates = {name: build(n) for name, build in ONE_ATTRIBUTE.items()} | {"A = W": W}
            row(repr(W), W, candidates)
    three = [
        workloads.Kron([workloads.AllRange(64), workloads.AllRange(32), workloads.Prefix(16)]),
        workloads.Kron([workloads.AllRange(256), workloads.Prefix(128), workloads.AllRange(32)]),
    ]
    for W in three:
        sizes = [f.shape[1] for f in W.factors]
        candidates = {name: strategies.kron([build(k) for k in sizes]) for name, build in ONE_ATTRIBUTE.items()}
        row("⊗".join(f"{type(f).__name__}({k})" for f, k in zip(W.factors, sizes)), W, candidates | {"A = W": W})


if __name__ == "__main__":
    main()
