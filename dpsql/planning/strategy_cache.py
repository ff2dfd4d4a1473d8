"""An on-disk cache of optimized strategies, keyed by the workload's exact structure and the noise family.

Optimizing a strategy (HDMM, Eigen-Design) costs real work; a repeated batch, or one sharing a statement
group, has the same workload, so its strategy is read back instead. An entry is an ``.npz`` file: a JSON manifest of the
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

from dpsql.matrix.workloads import Explicit, Identity, Kron, Total, VStack, Weighted, Workload, kron_factors
from dpsql.planning.structure import structure_digest

#: Bumped to 4 when optimizers moved from wall-clock deadlines to work budgets: strategies cut short by a
#: time limit are not reused. 5: keyed by the workload's structure digest (memoised per object, shared with
#: the plan cache's keys) instead of the bytes of its Gram's dense factors (hundreds of MB on a
#: 1,000-statement batch).
FORMAT_VERSION = "5"


def cache_dir() -> Path:
    """Where cached strategies live."""
    return Path(os.environ.get("DPSQL_CACHE_DIR") or Path.home() / ".cache" / "dpsql") / "strategies"


def strategy_key(W: Workload, *, noise: str, template: str) -> str:
    """A hash of FORMAT_VERSION, the noise family, the template and W's exact structure
    (``structure.structure_digest``)."""
    digest = hashlib.sha256(f"{FORMAT_VERSION}|{noise}|{template}|".encode())
    digest.update(structure_digest(W))
    return digest.hexdigest()


def cached(W: Workload, *, noise: str, template: str, build: Callable[[], Workload],
           on_build: Callable[[], None] | None = None) -> Workload:
    """The cached strategy for (W, noise, template), building and storing it on a miss (after
    calling ``on_build``, e.g. to report progress)."""
    path = cache_dir() / f"{strategy_key(W, noise=noise, template=template)}.npz"
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
