"""``dpsql.answers.tail_bounds``: P(a·z ≥ κ·sd(a·z)) ≤ level for every coefficient vector a, checked exactly.

The law of a·z for small integer vectors a is computed exactly by convolving the pmfs of the
discrete Laplace and discrete Gaussian (``dpsql.noise.distributions``) over a support wide enough
that the mass left out is below 1e-15, far below every level tested. A single draw (a = (1,)) is
the hardest case for the Laplace bound; a κ from the normal approximation fails it there, which
shows the check can fail. The bound is also not vacuous: within a factor 100 of the level for one
draw of discrete Laplace noise (its Chernoff slack is about κ·√2·e ≈ 28 at level 0.05/100).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import numpy.typing as npt
import pytest

from dpsql.answers.tail_bounds import NoiseLaw, tail_multiplier
from dpsql.noise import (
    discrete_gaussian_pmf,
    discrete_gaussian_variance,
    discrete_laplace_pmf,
    discrete_laplace_variance,
)

LEVELS = [0.05 / 512, 0.05 / 100, 0.01, 0.2]
VECTORS = [(1,), (1, 1), (2, 1), (1, 1, 1, 1), (3, 1, 1), (1,) * 9]


def laplace(t: float) -> tuple[NoiseLaw, npt.NDArray[np.float64]]:
    """The law of Lap_ℤ(t) and its pmf on −M..M (the mass beyond is 2e^{−M/t}/(1 + e^{−1/t}) < 1e-15)."""
    support = np.arange(-math.ceil(36 * t) - 1, math.ceil(36 * t) + 2)
    return NoiseLaw(kind="laplace", scale=t, variance=discrete_laplace_variance(t)), discrete_laplace_pmf(support, t)


def gaussian(sigma2: float) -> tuple[NoiseLaw, npt.NDArray[np.float64]]:
    """The law of N_ℤ(0, σ²) and its pmf on −M..M, M = 9σ + 2 (mass beyond < 1e-18)."""
    half = math.ceil(9 * math.sqrt(sigma2)) + 2
    return (NoiseLaw(kind="gaussian", scale=sigma2, variance=discrete_gaussian_variance(sigma2)),
            discrete_gaussian_pmf(np.arange(-half, half + 1), sigma2))


def exact_tail(pmf: npt.NDArray[np.float64], a: tuple[int, ...], q: float) -> float:
    """P(Σ a_i z_i ≥ q) for z_i iid with ``pmf`` on a symmetric support −M..M."""
    half = (len(pmf) - 1) // 2
    law, low = np.array([1.0]), 0
    for coefficient in a:
        spread = np.zeros(coefficient * (len(pmf) - 1) + 1)
        spread[::coefficient] = pmf
        law, low = np.convolve(law, spread), low - coefficient * half
    values = np.arange(low, low + len(law))
    return float(law[values >= q - 1e-9].sum())


@pytest.mark.parametrize("law_and_pmf", [laplace(t) for t in (0.3, 1.0, 3.0, 20.0)]
                         + [gaussian(s) for s in (0.3, 1.0, 4.0, 50.0)], ids=lambda found: found[0].kind)
def test_every_combination_stays_below_the_level(law_and_pmf: tuple[NoiseLaw, npt.NDArray[np.float64]]) -> None:
    law, pmf = law_and_pmf
    for level in LEVELS:
        kappa = tail_multiplier(law, level)
        for a in VECTORS:
            sd = math.sqrt(law.variance * sum(c * c for c in a))
            assert exact_tail(pmf, a, kappa * sd) <= level, (law, level, a)


def test_a_normal_quantile_fails_for_one_laplace_draw_and_the_bound_is_not_vacuous() -> None:
    law, pmf = laplace(20.0)
    sd = math.sqrt(law.variance)
    for level in LEVELS[:3]:
        assert exact_tail(pmf, (1,), NormalDist().inv_cdf(1 - level) * sd) > level
        assert exact_tail(pmf, (1,), tail_multiplier(law, level) * sd) > level / 100


def test_gaussian_multiplier_is_the_sub_gaussian_one_and_zero_noise_needs_none() -> None:
    law = NoiseLaw(kind="gaussian", scale=2.0, variance=discrete_gaussian_variance(2.0))
    assert tail_multiplier(law, 0.01) == pytest.approx(math.sqrt(2.0 / law.variance) * math.sqrt(2 * math.log(100)))
    assert tail_multiplier(NoiseLaw(kind="laplace", scale=1e-4, variance=0.0), 0.01) == 0.0
    with pytest.raises(ValueError, match="level"):
        tail_multiplier(law, 1.0)
