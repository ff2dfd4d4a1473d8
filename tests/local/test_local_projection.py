"""The projection onto the ε-LDP polytope with row floors (corrected Algorithm 1 of McKenna et al.)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import brentq

from dpsql.local.projection import InfeasibleFloorError, project


def bisection(r: np.ndarray, z: np.ndarray, epsilon: float) -> np.ndarray:
    """The reference: clip(r + λ, z, e^ε z) with λ found by root finding on the column sum."""
    upper = math.exp(epsilon) * z
    total = lambda lam: float(np.clip(r + lam, z, upper).sum()) - 1.0  # noqa: E731
    lam = brentq(total, -2.0 - np.abs(r).max(), 2.0 + np.abs(r).max(), xtol=1e-16, rtol=1e-15)
    return np.clip(r + lam, z, upper)


def test_digest_oracles() -> None:
    # §4.1: bounds [0.1, 0.3] (e^ε = 3)
    z, epsilon = np.full(4, 0.1), math.log(3.0)
    first = project(np.array([[1.0], [0.0], [0.0], [0.0]]), z, epsilon=epsilon)[:, 0]
    np.testing.assert_allclose(first, [0.3, 0.7 / 3, 0.7 / 3, 0.7 / 3], rtol=0, atol=1e-15)
    second = project(np.full((4, 1), 0.5), z, epsilon=epsilon)[:, 0]
    np.testing.assert_allclose(second, [0.25] * 4, rtol=0, atol=1e-15)


@given(m=st.integers(2, 30), n=st.integers(1, 6), epsilon=st.floats(0.05, 6.0), seed=st.integers(0, 2**32 - 1),
       position=st.floats(1e-9, 1 - 1e-9), scale=st.floats(1e-3, 10.0))
def test_projection_meets_the_constraints_and_matches_bisection(m: int, n: int, epsilon: float, seed: int,
                                                                 position: float, scale: float) -> None:
    rng = np.random.default_rng(seed)
    floors = rng.random(m) + 0.01
    # scale the floors so that 1ᵀz lies anywhere in the feasible range [e^-ε, 1]
    z = floors / floors.sum() * (math.exp(-epsilon) + position * (1 - math.exp(-epsilon)))
    R = rng.normal(scale=scale, size=(m, n))
    Q = project(R, z, epsilon=epsilon)
    upper = math.exp(epsilon) * z
    assert np.all(Q >= z[:, None]) and np.all(Q <= upper[:, None])
    np.testing.assert_allclose(Q.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    for u in range(n):
        np.testing.assert_allclose(Q[:, u], bisection(R[:, u], z, epsilon), rtol=0, atol=1e-12)


def test_active_bounds_are_exact_so_they_can_be_detected() -> None:
    z = np.full(5, 0.1)
    Q = project(np.array([[3.0], [0.0], [0.0], [-3.0], [0.2]]), z, epsilon=1.0)
    assert Q[0, 0] == math.exp(1.0) * 0.1 and Q[3, 0] == 0.1


@pytest.mark.parametrize("total", [1.2, 0.2])
def test_infeasible_floors_are_refused(total: float) -> None:
    with pytest.raises(InfeasibleFloorError, match="bracket 1"):
        project(np.ones((4, 2)), np.full(4, total / 4), epsilon=1.0)
