"""``dpsql demo``: the matrix mechanism end to end on a generated population.

A batch asks for the number of people in every age range, by sex and in total (15,150 range
queries over 200 cells). The demo scores the standard strategies by their exact expected error,
measures the best one once with exact discrete Gaussian noise, and prints answers with their
standard errors next to the true values, and the gain over answering each query on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpsql import error, mechanism, strategies, workloads
from dpsql.noise import RandomSource

AGES, SEXES = 100, 2
RHO = Fraction(1, 2)


def population(people: int = 1_000_000, seed: int = 20261121) -> np.ndarray:
    """Counts per (age, sex) cell of a synthetic population (public, generated data)."""
    generator = np.random.default_rng(seed)
    age = np.clip(generator.gamma(4.0, 10.0, size=people).astype(int), 0, AGES - 1)
    sex = generator.integers(0, SEXES, size=people)
    return np.bincount(age * SEXES + sex, minlength=AGES * SEXES)


def workload() -> workloads.Workload:
    """Every age range, split by sex and in total."""
    return workloads.VStack([
        workloads.Kron([workloads.AllRange(AGES), workloads.Identity(SEXES)]),
        workloads.Kron([workloads.AllRange(AGES), workloads.Total(SEXES)]),
    ])


def candidates() -> dict[str, workloads.Workload]:
    """Standard strategies over the age × sex domain."""
    return {
        "identity": strategies.identity(AGES * SEXES),
        "hierarchical b=2 ⊗ identity": strategies.kron([strategies.hierarchical(AGES, 2), strategies.identity(SEXES)]),
        "hierarchical b=4 ⊗ identity": strategies.kron([strategies.hierarchical(AGES, 4), strategies.identity(SEXES)]),
        "wavelet ⊗ identity": strategies.kron([strategies.wavelet(AGES), strategies.identity(SEXES)]),
    }


def run(echo: Callable[[str], None] = print, rng: RandomSource | None = None) -> float:
    """Run the demo; returns the chosen strategy's RMSE gain over answering queries one by one."""
    started = time.perf_counter()
    x, W = population(), workload()
    echo(f"Population: {int(x.sum()):,} people in {AGES} ages × {SEXES} sexes; batch of {W.shape[0]:,} range queries.")
    bound = error.svd_bound(W)
    scale = 1 / (2 * float(RHO))  # expected_error is at ρ = 1/2; σ² scales by 1/(2ρ)
    scores = {name: error.expected_error(W, A) * scale for name, A in candidates().items()}
    separately = error.expected_error(W, strategies.workload(W)) * scale
    echo(f"\nExpected RMSE per query at ρ = {RHO} (lower bound: {np.sqrt(bound * scale / W.shape[0]):.2f})")
    for name, total in sorted(scores.items(), key=lambda item: item[1]):
        echo(f"  {name:<30} {np.sqrt(total / W.shape[0]):8.2f}")
    echo(f"  {'the queries as asked (A = W)':<30} {np.sqrt(separately / W.shape[0]):8.2f}")
    best = min(scores, key=scores.__getitem__)
    release = mechanism.measure(candidates()[best], x, rho=RHO, rng=rng)
    answers = mechanism.answer(W, release)
    truth = W @ x
    echo(f"\nOne release with '{best}' (ρ = {release.rho}, exact discrete Gaussian noise, σ² = {release.noise_scale}):")
    echo(f"  {'query':<28} {'private':>12} {'± stderr':>10} {'true':>10}")
    for label, row in _examples():
        echo(f"  {label:<28} {answers.values[row]:12.1f} {answers.stddevs[row]:10.2f} {truth[row]:10d}")
    empirical = np.sqrt(np.mean((answers.values - truth) ** 2))
    gain = float(np.sqrt(separately / scores[best]))
    echo(f"\nEmpirical RMSE of this release: {empirical:.2f}; predicted {np.sqrt(scores[best] / W.shape[0]):.2f}.")
    echo(f"The chosen strategy is {gain:.1f}× more accurate (RMSE) than measuring the queries as asked.")
    echo(f"Done in {time.perf_counter() - started:.1f} s.")
    return gain


def _examples() -> list[tuple[str, int]]:
    """(label, row of W) for a few readable queries."""
    def range_row(lo: int, hi: int) -> int:  # row of [lo, hi] in AllRange's (i, then j) order
        return lo * AGES - lo * (lo - 1) // 2 + (hi - lo)
    by_sex = AGES * (AGES + 1) // 2 * SEXES
    return [
        ("age 18-64, female", range_row(18, 64) * SEXES),
        ("age 18-64, male", range_row(18, 64) * SEXES + 1),
        ("age 18-64, all", by_sex + range_row(18, 64)),
        ("age 65-99, all", by_sex + range_row(65, 99)),
        ("age 30-30, all", by_sex + range_row(30, 30)),
        ("age 0-99, all", by_sex + range_row(0, 99)),
    ]
