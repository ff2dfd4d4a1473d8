"""An on-disk cache of optimized strategies, keyed by the workload's Gram matrix and noise family.

Optimizing a strategy (HDMM, Eigen-Design) costs real work; a repeated batch has the same Gram
matrix, so its strategy is read back instead. An entry is an ``.npz`` file: a JSON manifest of the
strategy's structure (a stack of weighted Kronecker products; Identity and Total factors by size)
plus its other factors as dense arrays, so that a marginals strategy over a large domain stays
small and keeps its structure. The folder is ``$DPSQL_CACHE_DIR`` or ``~/.cache/dpsql``.
Strategies are public (they depend on the queries only), so caching them leaks nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dpsql.matrix.linalg import gram_terms
from dpsql.matrix.workloads import Explicit, Identity, Kron, Total, VStack, Weighted, Workload, kron_factors

#: Bumped to 4 when optimizers moved from wall-clock deadlines to work budgets:
#: strategies cut short by a time limit are not reused.
FORMAT_VERSION = "4"


def cache_dir() -> Path:
    """Where cached strategies live."""
    return Path(os.environ.get("DPSQL_CACHE_DIR") or Path.home() / ".cache" / "dpsql") / "strategies"


def gram_key(W: Workload, *, noise: str, template: str) -> str:
    """A hash of WᵀW's structured form (every term's factors), the noise family and the template."""
    digest = hashlib.sha256(f"{FORMAT_VERSION}|{noise}|{template}|".encode())
    for weight, factors in gram_terms(W.gram()):
        digest.update(np.float64(weight).tobytes())
        for factor in factors:  # an explicit dense factor is read in place (``dense()`` would copy it)
            held = factor.matrix if isinstance(factor, Explicit) and isinstance(factor.matrix, np.ndarray) else None
            dense = np.ascontiguousarray(factor.dense() if held is None else held)
            digest.update(repr(dense.shape).encode())
            digest.update(dense.data if dense.size else b"")
    return digest.hexdigest()


def cached(W: Workload, *, noise: str, template: str, build: Callable[[], Workload],
           on_build: Callable[[], None] | None = None) -> Workload:
    """The cached strategy for (W, noise, template), building and storing it on a miss (after
    calling ``on_build``, e.g. to report progress)."""
    path = cache_dir() / f"{gram_key(W, noise=noise, template=template)}.npz"
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as stored:
                return _decode(stored)
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # a damaged entry is rebuilt
    if on_build is not None:
        on_build()
    strategy = build()
    _store(path, strategy)
    return strategy


def _encode(A: Workload) -> tuple[list[dict[str, object]], dict[str, np.ndarray]]:
    """(manifest, arrays): each block's weight and factors, Identity/Total by size, others dense."""
    manifest: list[dict[str, object]] = []
    arrays: dict[str, np.ndarray] = {}
    for block in A.blocks if isinstance(A, VStack) else (A,):
        weight = block.weight if isinstance(block, Weighted) else 1.0
        base = block.base if isinstance(block, Weighted) else block
        factors: list[list[object]] = []
        for factor in kron_factors(base):
            if type(factor) in (Identity, Total):
                factors.append([type(factor).__name__, factor.shape[1]])
            else:
                key = f"f{len(arrays)}"
                arrays[key] = np.asarray(factor.dense(), dtype=np.float64)
                factors.append(["dense", key])
        manifest.append({"weight": float(weight), "factors": factors})
    return manifest, arrays


def _decode(stored: np.lib.npyio.NpzFile) -> Workload:
    """The strategy written by :func:`_encode`."""
    blocks: list[Workload] = []
    for entry in json.loads(bytes(stored["manifest"]).decode()):
        factors = [Identity(int(size)) if kind == "Identity" else Total(int(size)) if kind == "Total"
                   else Explicit(stored[str(size)]) for kind, size in entry["factors"]]
        base = factors[0] if len(factors) == 1 else Kron(factors)
        blocks.append(base if entry["weight"] == 1.0 else Weighted(float(entry["weight"]), base))
    return blocks[0] if len(blocks) == 1 else VStack(blocks)


def _store(path: Path, strategy: Workload) -> None:
    """Write atomically: a temporary file in the same folder, then rename."""
    manifest, arrays = _encode(strategy)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".npz")
        with os.fdopen(handle, "wb") as stream:
            arrays["manifest"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
            np.savez(stream, **arrays)  # type: ignore[arg-type]
        os.replace(temporary, path)
    except OSError:
        return  # a read-only home is not an error: the strategy is simply not cached
