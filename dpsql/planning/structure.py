"""Exact digests of workloads' structure, the keys of the planning caches (``plan_cache``, ``strategy_cache``).

A workload is hashed by its type and shape, then combinators (stacks, Kronecker products, sums, weights)
by their parts' digests and leaves by their entries; each object's digest is memoised while it lives, so
the blocks a statement compiles to, recurring in every candidate group holding it, are hashed once.
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

from dpsql.matrix.workloads import Explicit, Identity, Kron, Ranges, Sum, VStack, Weighted, Workload

#: Leaves with at most this many entries are hashed row by row; larger ones by their Gram
#: (the only candidate that reads rows, the workload's own, is limited to far smaller ones).
ROW_HASH_ENTRIES = 2**22

#: structure_digest's results by workload object (workloads are immutable once built): the blocks a
#: statement compiles to recur in every candidate group holding it, each hashed once.
_structures: weakref.WeakKeyDictionary[Workload, bytes] = weakref.WeakKeyDictionary()


def structure_digest(W: Workload) -> bytes:
    """SHA-256 of W's exact structure: its type and shape, then combinators by their parts' digests
    (and a weight's bytes), leaves by their entries (:func:`_leaf_bytes`); memoised per object."""
    known = _structures.get(W)
    if known is None:
        digest = hashlib.sha256()
        _feed_structure(digest, W)
        known = _structures[W] = digest.digest()
    return known


def _feed_structure(digest: hashlib._Hash, W: Workload) -> None:
    """Feed W's type, shape and parts' digests (or a leaf's entries) into ``digest``."""
    digest.update(f"{type(W).__name__}{W.shape}".encode())
    if isinstance(W, VStack):
        parts: tuple[Workload, ...] = W.blocks
    elif isinstance(W, Kron):
        parts = W.factors
    elif isinstance(W, Sum):
        parts = W.terms
    elif isinstance(W, Weighted):
        digest.update(np.float64(W.weight).tobytes())
        parts = (W.base,)
    else:
        digest.update(_leaf_bytes(W))
        return
    digest.update(str(len(parts)).encode())
    for part in parts:
        digest.update(structure_digest(part))


def _leaf_bytes(W: Workload) -> bytes:
    """A leaf's exact content: Identity by size, ranges by their intervals, others by entries
    (or by their Gram when too large to list)."""
    if isinstance(W, Identity):
        return b""
    if isinstance(W, Ranges):
        return np.stack([W.lo, W.hi]).tobytes()
    if isinstance(W, Explicit):
        matrix = W.matrix
        if isinstance(matrix, np.ndarray):
            return np.ascontiguousarray(matrix).tobytes()
        return b"".join(np.ascontiguousarray(a).tobytes() for a in (matrix.data, matrix.indices, matrix.indptr))
    rows, cols = W.shape
    if rows * cols <= ROW_HASH_ENTRIES:
        return np.ascontiguousarray(W.dense()).tobytes()
    return b"gram" + np.ascontiguousarray(W.gram().dense()).tobytes()
