"""Local DP: worst-case sample complexity of the optimized strategy against every baseline.

For Histogram, Prefix, AllRange and all 2-way marginals (over d binary attributes, n = 2^d) at
n = 64 and 512 and ε ∈ {0.5, 1, 2, 4}, prints the users needed for normalised worst-case variance
α = 0.01 (McKenna et al. Cor 5.4: max_u z_u / (p α)) of each mechanism: randomized response,
Hadamard (general and high-privacy forms), hierarchical (B = 4, on either Hadamard), Fourier (the
best order that supports the workload), the single-seed random-start descent (opt), and the
selected strategy (best of descent from a random start, descent from the best baseline, and the
baselines). Then the optimization time, the best baseline over the selected one, randomized
response over the selected one, and the SVD lower bound (Cor 5.7; 0 when vacuous).

Run: python benchmarks/local_dp.py [--sizes 64 512] [--time-limit SECONDS]   (n = 512 takes a while:
each optimization runs up to --time-limit seconds, 120 by default.)
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small dense problems: threads only contend
os.environ.setdefault("OMP_NUM_THREADS", "1")

import itertools
import time

from _machine import header

from dpsql import local
from dpsql.matrix import workloads
from dpsql.matrix.workloads import Workload

ALPHA = 0.01
EPSILONS = (0.5, 1.0, 2.0, 4.0)
COLUMNS = {
    "RR": "randomized response",
    "Had": "Hadamard",
    "Had-HP": "Hadamard (high-privacy)",
    "Hier": "hierarchical, branching 4",
    "Hier-HP": "hierarchical (high-privacy Hadamard), branching 4",
}


def two_way_marginals(n: int) -> Workload:
    """All C(d, 2) two-way marginals over d binary attributes (n = 2^d)."""
    d = n.bit_length() - 1
    return workloads.VStack([workloads.Kron([workloads.Identity(2) if i in pair else workloads.Total(2)
                                             for i in range(d)])
                             for pair in itertools.combinations(range(d), 2)])


WORKLOADS = {"Histogram": workloads.Identity, "Prefix": workloads.Prefix, "AllRange": workloads.AllRange,
             "2-way marg": two_way_marginals}


def row(name: str, n: int, epsilon: float, time_limit: float) -> str:
    W = WORKLOADS[name](n)
    scale = W.shape[0] * ALPHA
    started = time.perf_counter()
    ranked = local.rank(W, epsilon=epsilon, seed=0, restarts=1, time_limit=time_limit)
    seconds = time.perf_counter() - started
    by_name = {s.strategy.name: s.worst_case_variance / scale for s in ranked}
    fourier = min((v for k, v in by_name.items() if k.startswith("Fourier")))
    random_start = next(v for k, v in by_name.items() if k.startswith("optimized (m="))
    selected = ranked[0]
    baseline = min(s.worst_case_variance for s in ranked if not s.strategy.name.startswith("optimized")) / scale
    chosen = selected.worst_case_variance / scale
    bound = local.lower_bound(W, epsilon=epsilon) / scale
    cells = [f"{name:<10} {n:>4} {epsilon:>4.1f}"]
    cells += [f"{by_name[label]:>11.1f}" if label in by_name else f"{'(= Had)':>11}" for label in COLUMNS.values()]
    cells += [f"{fourier:>11.1f}", f"{random_start:>11.1f}", f"{chosen:>11.1f}", f"{seconds:>7.1f}s",
              f"{baseline / chosen:>6.2f}", f"{by_name['randomized response'] / chosen:>7.2f}", f"{bound:>9.1f}",
              f"  {selected.strategy.name}"]
    return " ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds per optimization (both descents)")
    arguments = parser.parse_args()
    print(header("local DP: worst-case sample complexity at α = 0.01 (users needed; lower is better)"))
    titles = ["workload", "   n", "   ε", *[f"{c:>11}" for c in COLUMNS], f"{'Fourier':>11}", f"{'opt(seed0)':>11}",
              f"{'selected':>11}", f"{'time':>8}", f"{'base/sel':>6}", f"{'RR/sel':>7}", f"{'SVD-LB':>9}",
              "  selected mechanism"]
    print(" ".join(titles))
    for n in arguments.sizes:
        for name in WORKLOADS:
            for epsilon in EPSILONS:
                print(row(name, n, epsilon, arguments.time_limit), flush=True)


if __name__ == "__main__":
    main()
