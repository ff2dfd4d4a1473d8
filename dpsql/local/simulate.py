"""Simulation of a collection round: the report counts y drawn from the cell counts x directly.

Math:
    Each user of cell u reports o ~ q_u independently, so the reports of the x_u users of cell u
    are Multinomial(x_u, q_u) and y = Σ_u Multinomial(x_u, q_u): exactly the distribution of
    randomizing every row one by one, at a cost of O(#non-empty cells · m) instead of O(N).
Privacy:
    None: this runs where the true counts x are, so it is for testing a design, benchmarking and
    demonstrations, never for real collection (real clients call ``protocol.randomize``). The
    draws come from a numpy Generator: seeded in tests, else seeded from OS entropy; floating-point
    multinomial sampling is fine here because nothing is protected.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpsql.errors import DataError
from dpsql.local.protocol import StrategyFile
from dpsql.local.quantize import TOTAL

IntArray = npt.NDArray[np.int64]


def simulate(published: StrategyFile, x: npt.ArrayLike, *, rng: np.random.Generator | None = None) -> IntArray:
    """y ~ Σ_u Multinomial(x_u, K[:, u] / T): the report counts of a simulated collection round.

    Raises:
        DataError: x is not one non-negative integer count per cell.
    """
    counts = np.asarray(x)
    if counts.shape != (published.n,) or not np.issubdtype(counts.dtype, np.integer) or counts.min(initial=0) < 0:
        raise DataError(f"x must hold one non-negative integer count per cell ({published.n}); "
                        f"got shape {counts.shape}.")
    generator = rng if rng is not None else np.random.default_rng()
    y = np.zeros(published.m, dtype=np.int64)
    for cell in np.flatnonzero(counts):
        y += generator.multinomial(int(counts[cell]), published.weights[:, cell] / TOTAL)
    return y
