"""One kept measurement: y = Ã x + z over cells the schema defines, with everything needed to reuse it.

x is a data vector (``vector``: row counts, non-NULL counts or clamped sums of one column, in
integer units) over the product of ``axes``: per axis, its key (the column, and how its values map
to base cells) and the map from the column's base cells (outside last) to the measurement's cells
(-1: rows never read). Ã is the integer strategy actually measured and z i.i.d. noise of variance
``noise_variance``. Its information about x is the Fisher information of a Gaussian model with
that variance, Ãᵀ Ã / σ², and Ãᵀ y / σ²: exactly what generalized least squares needs
(:mod:`dpsql.releases.gls`). x over fewer axes is the marginal of x over more only where each row
is the privacy unit (a per-unit cap keeps rows by a hash of the values a scan reads), so only such
tables' measurements are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dpsql.matrix.workloads import Kron, Weighted, Workload, rank_bound
from dpsql.releases.recipes import decode_array, encode_array, from_recipe, to_recipe
from dpsql.releases.whitening import above_cutoff, whitening

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Axes = tuple[tuple[str, IntArray], ...]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class KeptMeasurement:
    """A measurement kept for reuse (``release``: the id of the release that holds it, 0 before it is
    kept; ``index``: its place in that release; ``shared``: a release another analyst's charge paid
    for, which the data owner lets this connection reuse, so its number is not shown)."""

    table: str
    vector: str
    axes: Axes
    strategy: Workload
    y: FloatArray
    noise_variance: float
    label: str = ""
    unit: float = 1.0  # the value of one integer unit of x (a sum's quantum; 1 for counts): for what is shown
    release: int = 0
    index: int = 0
    shared: bool = False
    _information: list[tuple[FloatArray, FloatArray]] = field(default_factory=list, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """Cells per axis, in axis order (the strategy's columns are their row-major product)."""
        return tuple(int(cells.max()) + 1 for _, cells in self.axes)

    @property
    def cells(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def information(self) -> tuple[FloatArray, FloatArray]:
        """(Ãᵀ Ã / σ², Ãᵀ y / σ²) over this measurement's cells (computed once)."""
        if not self._information:
            gram = np.asarray(self.strategy.gram().dense(), dtype=np.float64) / self.noise_variance
            self._information.append((gram, self.strategy.rmatvec(self.y) / self.noise_variance))
        return self._information[0]

    def root(self) -> tuple[FloatArray, FloatArray]:
        """(Ã / σ, y / σ): the whitened measurement, whose Gram and score are :meth:`information`'s."""
        scale = 1.0 / np.sqrt(self.noise_variance)
        return np.asarray(self.strategy.dense(), dtype=np.float64) * scale, self.y * scale

    def cell_stddev(self) -> float | None:
        """The largest standard error of one cell's estimate from this measurement alone, in data
        units (None when some cell is not determined by it alone, e.g. a residual):
        σ · √(max_i [(ÃᵀÃ)⁻¹]_ii) · unit, from the strategy's structure (:func:`largest_cell_variance`)."""
        variance = largest_cell_variance(self.strategy)
        return None if variance is None else float(np.sqrt(variance * self.noise_variance)) * self.unit

    @property
    def identity(self) -> tuple[int, int]:
        """(release, index): which kept measurement this is, within one store."""
        return self.release, self.index

    def with_release(self, release: int, index: int = 0, shared: bool = False) -> KeptMeasurement:
        return KeptMeasurement(table=self.table, vector=self.vector, axes=self.axes,
                               strategy=self.strategy, y=self.y, noise_variance=self.noise_variance, label=self.label,
                               unit=self.unit, release=release, index=index, shared=shared,
                               _information=self._information)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "vector": self.vector,
                "axes": [[key, encode_array(cells)] for key, cells in self.axes],
                "strategy": to_recipe(self.strategy), "y": encode_array(self.y),
                "noise_variance": self.noise_variance, "label": self.label, "unit": self.unit}

    @classmethod
    def from_json(cls, value: dict[str, Any], release: int, index: int = 0) -> KeptMeasurement:
        """The measurement a payload entry describes; ValueError if it is not one (shapes included)."""
        axes = tuple((str(key), np.asarray(decode_array(text), dtype=np.int64)) for key, text in value["axes"])
        kept = cls(table=str(value["table"]), vector=str(value["vector"]), axes=axes,
                   strategy=from_recipe(value["strategy"]),
                   y=np.asarray(decode_array(value["y"]), dtype=np.float64),
                   noise_variance=float(value["noise_variance"]), label=str(value.get("label", "")),
                   unit=float(value.get("unit", 1.0)), release=release, index=index)
        rows, columns = kept.strategy.shape
        if columns != kept.cells or rows != kept.y.shape[0] or not kept.noise_variance > 0:
            raise ValueError(f"a kept measurement of {rows} × {columns} with {kept.y.shape[0]} values over "
                             f"{kept.cells} cells and noise variance {kept.noise_variance}")
        return kept


def payload(measurements: list[KeptMeasurement], summary: list[str], schema: str, data: str = "") -> str:
    """A release's stored text: canonical JSON of its measurements, what they answer, the schema
    version and the data version (e.g. the database file's modification time and size)."""
    return json.dumps({"schema": schema, "data": data, "summary": summary,
                       "measurements": [m.to_json() for m in measurements]}, sort_keys=True, separators=(",", ":"))


def read_payload(text: str, release: int, schema: str, data: str = "") -> list[KeptMeasurement]:
    """The measurements of a stored release made under ``schema`` of the data version ``data``
    (none under another version of either: they describe other data); ValueError for a text that
    is not a release."""
    value = json.loads(text)
    if not isinstance(value, dict) or not isinstance(value.get("measurements"), list):
        raise ValueError("not a dpsql release")
    if value.get("schema") != schema or value.get("data", "") != data:
        return []
    return [KeptMeasurement.from_json(entry, release, index) for index, entry in enumerate(value["measurements"])]


def largest_cell_variance(A: Workload) -> float | None:
    """max_i [(AᵀA)⁻¹]_ii, the largest variance of one cell's least-squares estimate under unit noise,
    or None when some cell is not determined by A (it lies outside A's row space).

    Structure first: rank(A) < cells (bounded without factoring, :func:`rank_bound`) leaves a cell
    undetermined; (w·A) scales it by w⁻²; for A = ⊗Aᵢ, (AᵀA)⁻¹ = ⊗(AᵢᵀAᵢ)⁻¹ and the largest diagonal
    entry of a Kronecker product of non-negative diagonals is the product of the largest. Otherwise
    AᵀA is factored: by Cholesky where its full rank is certain (:mod:`dpsql.releases.whitening`),
    else by one eigendecomposition with eigenvalues below 10⁻¹⁰ of the largest set to zero."""
    if rank_bound(A) < A.shape[1]:
        return None
    if isinstance(A, Weighted):
        inner = largest_cell_variance(A.base)
        return None if inner is None else inner / A.weight**2
    if isinstance(A, Kron):
        product = 1.0
        for factor in A.factors:
            inner = largest_cell_variance(factor)
            if inner is None:
                return None
            product *= inner
        return product
    gram = np.asarray(A.gram().dense(), dtype=np.float64)
    white = whitening(gram, 1e-10)
    if white is not None:  # the cells with a non-zero diagonal entry span the Gram's range
        kept, whitened = white
        return None if kept.size < gram.shape[0] else float(np.max(np.sum(whitened * whitened, axis=1)))
    try:
        eigenvalues, vectors = np.linalg.eigh(gram)
    except np.linalg.LinAlgError:
        return None
    keep = above_cutoff(eigenvalues, 1e-10)
    if not np.any(keep):
        return None
    basis = vectors[:, keep]
    if not np.allclose(np.sum(basis**2, axis=1), 1.0, atol=1e-7):  # some cell outside the range
        return None
    return float(np.max(np.sum(basis**2 / eigenvalues[keep], axis=1)))
