"""HDMM templates on multi-attribute workloads: OPT_⊗, OPT_M, OPT₊ and Eigen-Design beside standard strategies.

For marginal, range-marginal and union workloads over several attributes (the HDMM paper's CPS
benchmarks among them), prints each strategy's RMSE per query in the HDMM digest's normalisation
(noise variance 1 per unit sensitivity: Laplace ε = √2, Gaussian σ = Δ₂), for both noise
families, with each optimized template's optimization time, then the planner's choice. Gaussian
rows also give the ratio of total error to the SVD lower bound (≥ 1; ~ marks a bound that is only
a weaker lower bound for this structure). Digest references (hdmm.md §5.3, §7 O5/O6): cps-1
Laplace OPT⊗ 3.4319, OPT_M 3.4214; Gaussian OPT⊗ 1.8585, OPT_M ≤ 1.8595; Identity 3.8073.

Run: python benchmarks/templates.py
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

from _machine import header

from dpsql import strategies
from dpsql.matrix import workloads as wl
from dpsql.matrix.workloads import Workload
from dpsql.planning import accuracy, planner
from dpsql.strategies.budget import MAX_EVALUATIONS


def total_plus_identity(n: int) -> Workload:
    """[1ᵀ; I]: the total and every value."""
    return wl.VStack([wl.Total(n), wl.Identity(n)])


def marginals(sizes: list[int], order: int, factor: Callable[[int, int], Workload]) -> Workload:
    """All `order`-way products: factor(i, n) on the chosen attributes, Total elsewhere."""
    blocks = [wl.Kron([factor(i, n) if i in chosen else wl.Total(n) for i, n in enumerate(sizes)])
              for chosen in itertools.combinations(range(len(sizes)), order)]
    return wl.VStack(blocks)


def workloads_to_run() -> list[tuple[str, Workload, list[int], list[bool]]]:
    cps = [50, 100, 7, 4, 2]
    cps_ordered = [True, True, False, False, False]
    adult = [75, 16, 5, 2, 20]
    small = wl.VStack([wl.Kron([wl.AllRange(32), wl.Total(16)]), wl.Kron([wl.Total(32), wl.Prefix(16)]),
                       wl.Kron([wl.Identity(32), wl.Identity(16)])])
    return [
        ("cps-1: ⊗[1ᵀ;I] (50,100,7,4,2)", wl.Kron([total_plus_identity(n) for n in cps]), cps, cps_ordered),
        ("cps-2: P⊗P⊗[1ᵀ;I]³", wl.Kron([wl.Prefix(50), wl.Prefix(100)] + [total_plus_identity(n) for n in cps[2:]]),
         cps, cps_ordered),
        ("CPS 2-way range-marginals",
         marginals(cps, 2, lambda i, n: wl.AllRange(n) if cps_ordered[i] else wl.Identity(n)),
         cps, cps_ordered),
        ("Adult 2-way marginals (75,16,5,2,20)", marginals(adult, 2, lambda i, n: wl.Identity(n)), adult,
         [True, False, False, False, True]),
        ("Adult 3-way marginals", marginals(adult, 3, lambda i, n: wl.Identity(n)), adult,
         [True, False, False, False, True]),
        ("[R⊗T; T⊗P; I⊗I] (32,16)", small, [32, 16], [True, True]),
    ]


def templates(W: Workload, noise: str) -> dict[str, Callable[[], Workload]]:
    result: dict[str, Callable[[], Workload]] = {
        "HDMM-Kron": lambda: strategies.opt_kron(W, noise=noise, max_evaluations=MAX_EVALUATIONS),  # type: ignore[arg-type]
        "HDMM-marginals": lambda: strategies.opt_marginals(W, noise=noise, max_evaluations=MAX_EVALUATIONS),  # type: ignore[arg-type]
    }
    if W.shape[1] <= planner.UNION_MAX_CELLS:
        result["HDMM-union"] = lambda: strategies.opt_union(W, noise=noise, max_evaluations=MAX_EVALUATIONS)  # type: ignore[arg-type]
    if W.shape[1] <= 2048 and noise == "gaussian":
        result["Eigen"] = lambda: strategies.eigen_design(W, max_evaluations=MAX_EVALUATIONS)
    return result


def rmse(W: Workload, A: Workload, noise: str) -> float:
    total = accuracy.expected_error(W, A, noise=noise)  # type: ignore[arg-type]
    return math.sqrt(total / (2.0 if noise == "laplace" else 1.0) / W.shape[0])


def main() -> None:
    print(header("HDMM templates on multi-attribute workloads: RMSE per query (unit-variance noise) and seconds"))
    for label, W, sizes, ordered in workloads_to_run():
        bound, exact = accuracy.svd_bound_detail(W)
        print(f"\n{label}: {W.shape[0]:,} queries over {W.shape[1]:,} cells; "
              f"SVD bound RMSE {math.sqrt(bound / W.shape[0]):.4f}{'' if exact else ' (weaker bound)'}")
        for noise in ("laplace", "gaussian"):
            cells = []
            for name, A in planner.candidates(sizes, ordered).items():
                cells.append(f"{name} {rmse(W, A, noise):.4f}")
            for name, build in templates(W, noise).items():
                started = time.perf_counter()
                try:
                    A = build()
                    value = rmse(W, A, noise)
                except Exception as err:  # report, do not stop the benchmark
                    cells.append(f"{name} failed ({type(err).__name__})")
                    continue
                seconds = time.perf_counter() - started
                ratio = (f", {value**2 * W.shape[0] / bound:.3f}×svdb{'' if exact else '~'}" if noise == "gaussian"
                         else "")
                cells.append(f"{name} {value:.4f} ({seconds:.1f} s{ratio})")
            started = time.perf_counter()
            choice = planner.plan(W, noise=noise, sizes=sizes, ordered=ordered)  # type: ignore[arg-type]
            chosen = math.sqrt(choice.expected_error / (2.0 if noise == "laplace" else 1.0) / W.shape[0])
            cells.append(f"→ planner: {choice.name} {chosen:.4f} ({time.perf_counter() - started:.1f} s)")
            print(f"  {noise:<8} " + "; ".join(cells))


if __name__ == "__main__":
    main()
