"""Throughput of dpsql's exact integer noise samplers (samples per second).

Run with ``python benchmarks/noise.py``. It times the vectorised numpy samplers and the pure-Python
reference samplers with the production source (os.urandom) and the seeded test source, and, when
the optional ``opendp`` package is installed, OpenDP's vetted integer Laplace and Gaussian
measurements on a vector of 10^6 integers (OpenDP is not a dpsql dependency).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from fractions import Fraction

from dpsql import noise

VECTOR_SIZE = 10**6
SCALAR_SIZE = 20_000
LAPLACE_SCALES = (Fraction(1, 2), Fraction(3), Fraction(100))
GAUSSIAN_SIGMA2S = (Fraction(1, 4), Fraction(100), Fraction(12345, 7), Fraction(10**8))


def rate(draw: Callable[[], object], count: int) -> float:
    """Samples per second of one call of ``draw`` producing ``count`` samples."""
    start = time.perf_counter()
    draw()
    return count / (time.perf_counter() - start)


def sources() -> list[tuple[str, Callable[[], noise.RandomSource]]]:
    return [("system", noise.SystemRandomSource), ("seeded", lambda: noise.SeededRandomSource(1))]


def bench_dpsql() -> None:
    cases = [("discrete_laplace", "scale", noise.discrete_laplace, noise.discrete_laplace_scalar,
              LAPLACE_SCALES),
             ("discrete_gaussian", "sigma2", noise.discrete_gaussian,
              noise.discrete_gaussian_scalar, GAUSSIAN_SIGMA2S)]
    for name, param, vector, scalar, values in cases:
        for value in values:
            for source_name, make in sources():
                fast = rate(lambda: vector(value, VECTOR_SIZE, rng=make()), VECTOR_SIZE)
                rng = make()
                slow = rate(lambda: [scalar(value, rng=rng) for _ in range(SCALAR_SIZE)],
                            SCALAR_SIZE)
                print(f"{name:18s} {param}={str(value):9s} {source_name:6s} "
                      f"numpy {fast:12,.0f}/s   python {slow:10,.0f}/s")


def bench_opendp() -> None:
    try:
        import opendp.prelude as dp
    except ImportError:
        print("opendp is not installed; skipping the OpenDP comparison")
        return
    dp.enable_features("contrib")
    data = [0] * VECTOR_SIZE
    domain = dp.vector_domain(dp.atom_domain(T=int))
    cases = [("make_laplace scale=3", dp.m.make_laplace(domain, dp.l1_distance(T=int), 3.0)),
             ("make_gaussian scale=10", dp.m.make_gaussian(domain, dp.l2_distance(T=int), 10.0))]
    for name, measurement in cases:
        speed = rate(lambda: measurement(data), VECTOR_SIZE)
        print(f"opendp {dp.__version__} {name:24s} {speed:12,.0f}/s (list in, list out)")


if __name__ == "__main__":
    bench_dpsql()
    bench_opendp()
