"""A strategy matrix as a JSON value and back, keeping its structure (the "recipe").

Identity, Kronecker products, vertical stacks and scalar weights are kept as such; every other
factor is stored as its matrix, sparse (CSR) when most entries are zero. Arrays are NumPy's
``.npy`` bytes in base64, so floats round-trip exactly.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql.matrix.workloads import Explicit, Identity, Kron, VStack, Weighted, Workload

#: The most entries a non-structured factor may have to be kept (larger strategies are not kept).
MAX_FACTOR_ENTRIES = 2**22
#: Below this share of non-zeros a factor is stored sparse.
SPARSE_SHARE = 0.25


class NotKeptError(ValueError):
    """A strategy too large (or of a kind) that is not kept for reuse."""


def encode_array(array: npt.NDArray[Any]) -> str:
    """An array as base64 of its ``.npy`` bytes."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_array(text: str) -> npt.NDArray[Any]:
    """The array :func:`encode_array` wrote (no pickles: object arrays are refused)."""
    return np.load(io.BytesIO(base64.b64decode(text.encode("ascii"), validate=True)), allow_pickle=False)


def to_recipe(A: Workload) -> dict[str, Any]:
    """The JSON value of strategy ``A``; NotKeptError when a factor is too large to store."""
    if isinstance(A, Identity):
        return {"identity": A.n}
    if isinstance(A, Kron):
        return {"kron": [to_recipe(f) for f in A.factors]}
    if isinstance(A, VStack):
        return {"stack": [to_recipe(b) for b in A.blocks]}
    if isinstance(A, Weighted):
        return {"weight": A.weight, "base": to_recipe(A.base)}
    rows, columns = A.shape
    if rows * columns > MAX_FACTOR_ENTRIES:
        raise NotKeptError(f"a {rows:,} × {columns:,} strategy factor is too large to keep")
    matrix = A.matrix if isinstance(A, Explicit) and sp.issparse(A.matrix) else A.dense()
    sparse = sp.csr_array(matrix)
    if sparse.nnz <= SPARSE_SHARE * rows * columns:
        return {"sparse": [rows, columns], "data": encode_array(sparse.data), "indices": encode_array(sparse.indices),
                "indptr": encode_array(sparse.indptr)}
    return {"dense": encode_array(np.asarray(sp.csr_array(matrix).toarray() if sp.issparse(matrix) else matrix))}


def from_recipe(recipe: dict[str, Any]) -> Workload:
    """The strategy a recipe describes (ValueError for anything else)."""
    if "identity" in recipe:
        return Identity(int(recipe["identity"]))
    if "kron" in recipe:
        return Kron([from_recipe(f) for f in recipe["kron"]])
    if "stack" in recipe:
        return VStack([from_recipe(b) for b in recipe["stack"]])
    if "weight" in recipe:
        return Weighted(float(recipe["weight"]), from_recipe(recipe["base"]))
    if "sparse" in recipe:
        rows, columns = (int(v) for v in recipe["sparse"])
        parts = (decode_array(recipe["data"]), decode_array(recipe["indices"]), decode_array(recipe["indptr"]))
        return Explicit(sp.csr_array(parts, shape=(rows, columns)))
    if "dense" in recipe:
        return Explicit(decode_array(recipe["dense"]))
    raise ValueError(f"not a strategy recipe: keys {sorted(recipe)}")
