"""An on-disk cache of optimized strategies, keyed by the workload's Gram matrix and noise family.

Optimizing a strategy (HDMM, Eigen-Design) takes seconds; a repeated batch has the same Gram
matrix, so its strategy is read back instead. Entries are ``.npz`` files holding the strategy's
Kronecker factors as dense arrays. The folder is ``$DPSQL_CACHE_DIR`` or ``~/.cache/dpsql``.
Strategies are public (they depend on the queries only), so caching them leaks nothing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dpsql.linalg import gram_terms
from dpsql.workloads import Explicit, Kron, Workload, kron_factors

FORMAT_VERSION = "1"


def cache_dir() -> Path:
    """Where cached strategies live."""
    return Path(os.environ.get("DPSQL_CACHE_DIR") or Path.home() / ".cache" / "dpsql") / "strategies"


def gram_key(W: Workload, *, noise: str, template: str) -> str:
    """A hash of WᵀW's structured form (every term's factors), the noise family and the template."""
    digest = hashlib.sha256(f"{FORMAT_VERSION}|{noise}|{template}|".encode())
    for weight, factors in gram_terms(W.gram()):
        digest.update(np.float64(weight).tobytes())
        for factor in factors:
            dense = np.ascontiguousarray(factor.dense())
            digest.update(repr(dense.shape).encode())
            digest.update(dense.tobytes())
    return digest.hexdigest()


def cached(W: Workload, *, noise: str, template: str, build: Callable[[], Workload]) -> Workload:
    """The cached strategy for (W, noise, template), building and storing it on a miss."""
    path = cache_dir() / f"{gram_key(W, noise=noise, template=template)}.npz"
    if path.exists():
        try:
            with np.load(path) as stored:
                factors = [Explicit(stored[f"arr_{i}"]) for i in range(len(stored.files))]
            return factors[0] if len(factors) == 1 else Kron(factors)
        except (OSError, ValueError, KeyError):
            path.unlink(missing_ok=True)  # a damaged entry is rebuilt
    strategy = build()
    _store(path, [np.asarray(f.dense(), dtype=np.float64) for f in kron_factors(strategy)])
    return strategy


def _store(path: Path, factors: list[np.ndarray]) -> None:
    """Write atomically: a temporary file in the same folder, then rename."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".npz")
        with os.fdopen(handle, "wb") as stream:
            np.savez(stream, *factors)
        os.replace(temporary, path)
    except OSError:
        return  # a read-only home is not an error: the strategy is simply not cached
