"""Seed 003's experiment: 1,000 prefix sums over a heavy-tailed income column, with and without
private truncation, answered by Identity, TaMM and TiMM.

Data: 40,000 synthetic incomes (log-normal body, Pareto(1.2) tail, whole dollars, capped at the
public outer bound U = 10⁷). Queries: q_i = Σ_{t ≤ 800·i} t for i = 1…1000. Buckets (l, u] of
width 800 up to 800,000; incomes above it are in no query and are left out of the vectors.

Budget ε = 0.01 in total (--epsilon): thresholds take 10 % (ε₁ = 0.001), the measurement ε₂ = 0.009.
    NoTrunc    θ = 800,000 (the largest value any query includes);
    SVT        dpsql.planning.sum_truncation.svt_threshold on |v| over dpsql.engine.plan.thresholds' grid
               (r = 0.998, c = 1.2, 64 points up to U), as ``truncate = "svt"`` runs it;
    recursive  dpsql.planning.sum_truncation.r2t_threshold over dpsql.engine.plan.thresholds' levels U/2^j (β = 0.1).
Mechanisms (exact discrete Laplace noise via dpsql.planning.mechanism.measure):
    Identity   counts x + noise, answers W T x̂;
    TaMM       strategy = the planner's best standard strategy for W T, measured on the counts;
    TiMM       strategy = the planner's best standard strategy for W, measured on the exact
               truncated sums per bucket (sensitivity ‖A‖₁·θ), answers W ŝ.
Error per query: |ŷ − y| / max(y, 100) against the exact prefix sums (seed 003's metric).

Prints the median relative error over trials at queries i = 1, 10, 100, 500, 1000 and over all
queries, the median θ of each selector, and writes sum_queries.png (median error per query, log
scale) when matplotlib is installed (pip install "dpsql[plots]").

Run: python benchmarks/sum_queries.py [--trials 20] [--rows 40000] [--seed 0] [--epsilon 0.01]
"""

from __future__ import annotations

import argparse
import math
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
from _machine import header

from dpsql.engine.plan import thresholds as dpsql_thresholds
from dpsql.matrix.workloads import Identity, Prefix, Workload
from dpsql.noise import SeededRandomSource
from dpsql.planning import mechanism, planner, sum_truncation

WIDTH, BUCKETS, CAP = 800, 1000, 10_000_000
SHARE = 0.1
SHOWN = [1, 10, 100, 500, 1000]


def incomes(rows: int, rng: np.random.Generator) -> np.ndarray:
    body = rng.lognormal(math.log(35_000), 0.9, rows)
    tail = (rng.pareto(1.2, rows) + 1) * 60_000
    values = np.where(rng.random(rows) < 0.1, tail, body)
    return np.minimum(np.round(values), CAP)


def thresholds(values: np.ndarray, method: str, source: SeededRandomSource, total: float) -> float:
    epsilon = SHARE * total
    if method == "NoTrunc":
        return float(WIDTH * BUCKETS)
    if method == "SVT":
        grid = sum_truncation.geometric_grid(CAP, dpsql_thresholds.SVT_RATIO, dpsql_thresholds.SVT_POINTS).tolist()
        below = np.searchsorted(np.sort(values), grid, side="right")
        return sum_truncation.svt_threshold(below, values.size, grid, fraction=dpsql_thresholds.SVT_FRACTION,
                                            epsilon=epsilon, rng=source).theta
    # whole dollars: the quantum of an integer column is 1
    taus = sum_truncation.halving_grid(CAP, dpsql_thresholds.R2T_POINTS)
    sums = [int(np.minimum(values, t).sum()) for t in taus]
    return sum_truncation.r2t_threshold(sums, taus, epsilon=epsilon, beta=dpsql_thresholds.R2T_BETA,
                                        rng=source).theta


def best_strategy(W: Workload) -> Workload:
    return planner.plan(W, noise="laplace", optimize=False).strategy


def run(args: argparse.Namespace) -> dict[tuple[str, str], np.ndarray]:
    rng = np.random.default_rng(args.seed)
    values = incomes(args.rows, rng)
    inside = values[values <= WIDTH * BUCKETS]
    bucket = np.maximum(np.ceil(inside / WIDTH).astype(np.int64) - 1, 0)  # (800(j), 800(j+1)]; 0 joins the first
    counts = np.bincount(bucket, minlength=BUCKETS)
    upper = WIDTH * np.arange(1, BUCKETS + 1, dtype=np.float64)
    W = Prefix(BUCKETS)
    truth = np.cumsum(np.bincount(bucket, weights=inside, minlength=BUCKETS))
    A_timm = best_strategy(W)
    errors: dict[tuple[str, str], list[np.ndarray]] = {}
    chosen: dict[str, list[float]] = {}
    eps2 = Fraction(args.epsilon * (1 - SHARE)).limit_denominator(10**9)
    started = time.perf_counter()
    for trial in range(args.trials):
        source = SeededRandomSource(1000 + trial)
        for method in ("NoTrunc", "SVT", "recursive"):
            theta = thresholds(values, method, source, args.epsilon)
            chosen.setdefault(method, []).append(theta)
            t = sum_truncation.clipped(upper, theta)
            WT = sum_truncation.weighted(W, t)
            sums = np.round(np.bincount(bucket, weights=np.minimum(inside, theta), minlength=BUCKETS)).astype(np.int64)
            for name, A, data, scale, answers in (
                ("Identity", Identity(BUCKETS), counts, 1, WT),
                ("TaMM", best_strategy(WT), counts, 1, WT),
                ("TiMM", A_timm, sums, math.ceil(theta), W),
            ):
                release = mechanism.measure(A, data, epsilon=eps2, max_contribution=scale, rng=source)
                estimate = mechanism.answer(answers, release).values
                errors.setdefault((method, name), []).append(np.abs(estimate - truth) / np.maximum(truth, 100.0))
    print(f"{args.trials} trials in {time.perf_counter() - started:.1f} s; strategies: TiMM {type(A_timm).__name__}")
    for method, thetas in chosen.items():
        print(f"  θ by {method:<9}: median {np.median(thetas):,.0f} (range {min(thetas):,.0f} – {max(thetas):,.0f})")
    return {key: np.median(np.array(found), axis=0) for key, found in errors.items()}


def report(medians: dict[tuple[str, str], np.ndarray]) -> None:
    print("\nmedian relative error |ŷ − y| / max(y, 100) over trials")
    print(f"{'threshold':<10} {'mechanism':<9} " + " ".join(f"{'q' + str(i):>9}" for i in SHOWN) + f" {'all':>9}")
    for (method, name), median in medians.items():
        print(f"{method:<10} {name:<9} " + " ".join(f"{median[i - 1]:9.4f}"
                                                    for i in SHOWN) + f" {np.median(median):9.4f}")
    wins = {key: 0 for key in medians}
    stacked = np.array(list(medians.values()))
    for winner in np.argmin(stacked, axis=0):
        wins[list(medians)[winner]] += 1
    print("\nqueries on which each configuration has the lowest median error:")
    for (method, name), count in sorted(wins.items(), key=lambda item: -item[1]):
        if count:
            print(f"  {method} {name}: {count}")


def plot(medians: dict[tuple[str, str], np.ndarray], path: Path, epsilon: float) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(matplotlib not installed: no plot; pip install \"dpsql[plots]\")")
        return
    figure, axis = plt.subplots(figsize=(9, 5))
    for (method, name), median in medians.items():
        axis.plot(WIDTH * np.arange(1, BUCKETS + 1), median, label=f"{method} {name}",
                  linestyle={"NoTrunc": ":", "SVT": "-", "recursive": "--"}[method])
    axis.set(xscale="log", yscale="log", xlabel="prefix threshold (income ≤ x)", ylabel="median relative error",
             title=f"1,000 prefix sums, ε = {epsilon:g} (10 % for θ)")
    axis.legend(ncol=3, fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"\nplot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=float, default=0.01, help="the batch's total ε (the paper's 0.01)")
    parser.add_argument("--plot", type=Path, default=Path("sum_queries.png"))
    args = parser.parse_args()
    print(header("sum_queries"))
    medians = run(args)
    report(medians)
    plot(medians, args.plot, args.epsilon)


if __name__ == "__main__":
    main()
