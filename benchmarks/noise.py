"""Throughput of dpsql's exact integer noise samplers (samples per second).

Run with ``python benchmarks/noise.py`` (``--quick`` skips the 10^7-sample calls). For the
discrete Gaussian and the discrete Laplace at several parameters it times one call of the
vectorised sampler at 10^4, 10^6 and 10^7 samples with the production source (os.urandom,
:class:`SystemRandomSource`) and the seeded test source (:class:`SeededRandomSource`), and
prints:

- wall-clock samples/s (best of several calls for the small sizes, one call for 10^7);
- CPU samples/s of the same call (user + system time of this process, which includes the
  kernel's work in os.urandom): the per-core rate, less disturbed by other processes;
- the random bits the sampler consumes per sample (words taken from the seeded source).

It then times the pure-Python reference samplers, and, when the optional ``opendp`` package is
installed, OpenDP's vetted integer Laplace and Gaussian measurements on a vector of 10^6
integers (OpenDP is not a dpsql dependency).

First, the target table (issue 32): CPU draws/s of 10^7 draws (one call, os.urandom) of the
discrete Laplace at scale 1, 100, 10^6 and the discrete Gaussian at σ 1, 100, 10^6, beside
numpy's inexact floating-point Laplace (``Generator.laplace``) timed in the same run, the
physical reference; the target is >= 20 M/s and >= 1/2 of numpy's rate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpsql import noise

SIZES = (10**4, 10**6, 10**7)
REPEATS = {10**4: 20, 10**6: 3, 10**7: 1}
SCALAR_SIZE = 20_000
LAPLACE_SCALES = (Fraction(1, 2), Fraction(3), Fraction(100), Fraction(10**4))
GAUSSIAN_SIGMA2S = (
    Fraction(1, 4),
    Fraction(1),
    Fraction(100),
    Fraction(12345, 7),
    noise.fraction_at_least(1234.5678),  # a float rounded up: denominator near 2^20
    Fraction(10**6),
)

Sampler = Callable[..., npt.NDArray[np.int64]]


class _CountingSource(noise.SeededRandomSource):
    """The seeded source, counting the 64-bit words the vectorised samplers take."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.words = 0

    def raw_words(self, count: int) -> npt.NDArray[np.uint64]:
        self.words += count
        return super().raw_words(count)


def rates(draw: Callable[[], object], count: int, repeats: int) -> tuple[float, float]:
    """(wall-clock, CPU) samples per second of the fastest of ``repeats`` calls of ``draw``."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        draw()
        wall = min(wall, time.perf_counter() - start_wall)
        cpu = min(cpu, max(time.process_time() - start_cpu, 1e-9))
    return count / wall, count / cpu


def bits_per_sample(sampler: Sampler, value: Fraction) -> float:
    """Random bits one sample costs, over 10^6 samples from the seeded source."""
    source = _CountingSource(0)
    sampler(value, 10**6, rng=source)
    return 64 * source.words / 10**6


TARGET_SIZE = 10**7
TARGET_SCALES = (1, 100, 10**6)


def bench_target(size: int) -> None:
    """CPU draws/s of both exact samplers at the issue's scales against numpy's inexact Laplace."""
    generator = np.random.default_rng()
    source = noise.SystemRandomSource()
    _, reference = rates(lambda: generator.laplace(0.0, 1.0, size), size, 3)
    print(f"numpy Generator.laplace (inexact floats): {reference / 1e6:6.1f} M/s CPU; target >= "
          f"{max(20.0, reference / 2e6):.1f} M/s")
    for name, sampler, label, value in (
        [("discrete_laplace", noise.discrete_laplace, f"scale={s}", Fraction(s)) for s in TARGET_SCALES]
        + [("discrete_gaussian", noise.discrete_gaussian, f"sigma={s}", Fraction(s * s)) for s in TARGET_SCALES]
    ):
        sampler(value, 1000, rng=source)  # build the tables: once per parameter
        # B023 does not apply: rates() calls the closure within this iteration
        _, cpu = rates(lambda: sampler(value, size, rng=source), size, 2)  # noqa: B023
        print(f"{name:17s} {label:12s} {cpu / 1e6:6.1f} M/s CPU  {cpu / reference:5.2f} x numpy", flush=True)
    print()


def bench_vectorised(sizes: tuple[int, ...]) -> None:
    print(f"{'sampler':17s} {'parameter':28s} {'bits':>5s} {'size':>6s}   "
          f"{'system wall / cpu M/s':>21s}   {'seeded wall / cpu M/s':>21s}")
    cases: list[tuple[str, str, Sampler, tuple[Fraction, ...]]] = [
        ("discrete_gaussian", "sigma2=", noise.discrete_gaussian, GAUSSIAN_SIGMA2S),
        ("discrete_laplace", "scale=", noise.discrete_laplace, LAPLACE_SCALES),
    ]
    for name, label, sampler, values in cases:
        for value in values:
            bits = bits_per_sample(sampler, value)
            system, seeded = noise.SystemRandomSource(), noise.SeededRandomSource(1)
            for size in sizes:
                cells = []
                for source in (system, seeded):
                    # B023 does not apply: rates() calls the closure within this iteration
                    wall, cpu = rates(lambda: sampler(value, size, rng=source), size,  # noqa: B023
                                      REPEATS[size])
                    cells.append(f"{wall / 1e6:9.2f} / {cpu / 1e6:<9.2f}")
                print(f"{name:17s} {label + str(value):28s} {bits:5.0f} {size:6.0e}   "
                      f"{cells[0]:>21s}   {cells[1]:>21s}", flush=True)


def bench_reference() -> None:
    cases: list[tuple[str, Callable[..., int], Fraction]] = [
        ("discrete_laplace_scalar", noise.discrete_laplace_scalar, Fraction(3)),
        ("discrete_gaussian_scalar", noise.discrete_gaussian_scalar, Fraction(100)),
    ]
    for name, scalar, value in cases:
        for source_name, source in (("system", noise.SystemRandomSource()),
                                    ("seeded", noise.SeededRandomSource(1))):
            # B023 does not apply: rates() calls the closure within this iteration
            wall, _ = rates(lambda: [scalar(value, rng=source) for _ in range(SCALAR_SIZE)],  # noqa: B023
                            SCALAR_SIZE, 1)
            print(f"{name:25s} {value!s:6s} {source_name:6s} {wall:12,.0f}/s (pure Python)")


def bench_opendp() -> None:
    try:
        import opendp.prelude as dp
    except ImportError:
        print("opendp is not installed; skipping the OpenDP comparison")
        return
    dp.enable_features("contrib")
    data = [0] * 10**6
    domain = dp.vector_domain(dp.atom_domain(T=int))
    cases = [("make_laplace scale=3", dp.m.make_laplace(domain, dp.l1_distance(T=int), 3.0)),
             ("make_gaussian scale=10", dp.m.make_gaussian(domain, dp.l2_distance(T=int), 10.0))]
    for name, measurement in cases:
        wall, _ = rates(lambda: measurement(data), len(data), 1)  # noqa: B023 - called within this iteration
        print(f"opendp {dp.__version__} {name:24s} {wall:12,.0f}/s (list in, list out)")


if __name__ == "__main__":
    bench_target(10**6 if "--quick" in sys.argv else TARGET_SIZE)
    bench_vectorised(SIZES[:-1] if "--quick" in sys.argv else SIZES)
    bench_reference()
    bench_opendp()
