"""Standard and optimized strategies on range and prefix workloads: error ratio to the SVD bound, and time.

For AllRange(n) and Prefix(n) at n = 256, 1024, 4096 and for 3-attribute Kronecker workloads,
prints each strategy's exact expected total squared error (Gaussian, ρ = 1/2) divided by the
SVD lower bound, and the seconds taken (for the optimized templates HDMM — OPT₀, or OPT_⊗ on
Kronecker workloads — and Eigen-Design, the optimization time; for the others, computing the
error). The last column is the planner's choice. The ratio is scale-free: the same at any ρ.

Run: python benchmarks/strategies.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

from _machine import header

from dpsql import strategies
from dpsql.matrix import workloads
from dpsql.matrix.workloads import Workload
from dpsql.planning import accuracy, planner

ONE_ATTRIBUTE: dict[str, Callable[[int], Workload]] = {
    "identity": strategies.identity,
    "H2": lambda n: strategies.hierarchical(n, 2),
    "H4": lambda n: strategies.hierarchical(n, 4),
    "H16": lambda n: strategies.hierarchical(n, 16),
    "wavelet": strategies.wavelet,
}


def row(label: str, W: Workload, candidates: dict[str, Workload | None]) -> None:
    started = time.perf_counter()
    bound = accuracy.svd_bound(W)
    cells = [f"{label:<34} {W.shape[0]:>13,} {time.perf_counter() - started:6.2f}s"]
    best_standard = float("inf")
    for name, A in candidates.items():
        if A is None:
            cells.append(f"{'-':>8} {'':>7}")
            continue
        started = time.perf_counter()
        ratio = accuracy.expected_error(W, A, noise="gaussian") / bound
        seconds = OPTIMIZE_SECONDS.get(name, time.perf_counter() - started)
        cells.append(f"{ratio:8.3f} {seconds:6.2f}s")
        if name in ONE_ATTRIBUTE or name == "A = W":
            best_standard = min(best_standard, ratio)
    sizes = [f.shape[1] for f in workloads.kron_factors(W)]
    chosen = planner.plan(W, noise="gaussian", sizes=sizes)
    ratio = chosen.expected_error / bound
    worse = " (worse than standard!)" if ratio > best_standard * (1 + 1e-9) else ""
    cells.append(f"{chosen.name:>12} {ratio:6.3f}{worse}")
    print("  ".join(cells))


def optimized(W: Workload, sizes: list[int]) -> dict[str, Workload | None]:
    """HDMM and (up to 2048 cells) Eigen-Design, each timed; None where a template does not apply."""
    result: dict[str, Workload | None] = {}
    started = time.perf_counter()
    result["HDMM"] = strategies.opt0(W) if len(sizes) == 1 else strategies.opt_kron(W)
    OPTIMIZE_SECONDS["HDMM"] = time.perf_counter() - started
    started = time.perf_counter()
    result["Eigen"] = strategies.eigen_design(W) if W.shape[1] <= 2048 else None
    OPTIMIZE_SECONDS["Eigen"] = time.perf_counter() - started
    return result


OPTIMIZE_SECONDS: dict[str, float] = {}


def main() -> None:
    print(header("standard and optimized strategies: expected error / SVD bound (Gaussian), and seconds"))
    names = list(ONE_ATTRIBUTE) + ["A = W", "HDMM", "Eigen"]
    columns = "  ".join(f"{name:>15}" for name in names)
    print(f"{'workload':<34} {'queries':>13} {'svdb':>7}  " + columns + "   planner's choice")
    for make in (workloads.AllRange, workloads.Prefix):
        for n in (256, 1024, 4096):
            W = make(n)
            candidates = {name: build(n) for name, build in ONE_ATTRIBUTE.items()} | {"A = W": W}
            row(repr(W), W, candidates | optimized(W, [n]))
    three = [
        workloads.Kron([workloads.AllRange(64), workloads.AllRange(32), workloads.Prefix(16)]),
        workloads.Kron([workloads.AllRange(256), workloads.Prefix(128), workloads.AllRange(32)]),
        workloads.Kron([workloads.AllRange(64)] * 3),
    ]
    for W in three:
        sizes = [f.shape[1] for f in W.factors]
        candidates = {name: strategies.kron([build(k) for k in sizes]) for name, build in ONE_ATTRIBUTE.items()}
        row("⊗".join(f"{type(f).__name__}({k})" for f, k in zip(W.factors, sizes)), W,
            candidates | {"A = W": W} | optimized(W, sizes))


if __name__ == "__main__":
    main()
