"""The collection protocol: publish a strategy file, randomize on the client, count reports on the server.

1. The server publishes a strategy file (``publish`` + ``save``): JSON with the format name and
   version, ε, the mechanism's name, the cell layout (public domains; null for a plain cell index
   0..n−1), optionally the schema table it was designed from, and the integer weights K (m × n,
   columns summing to T = 2^52, ``dpsql.local.quantize``) as base64 little-endian int64, row-major.
   ``sha256`` is the SHA-256 of the canonical JSON (sorted keys, no spaces) of all other fields.
2. Every client downloads the whole file (asking for one column would reveal its cell), checks it
   (``load``), maps its record to its cell u and calls ``randomize``: one report (strategy hash,
   output o) with o ~ K[:, u] / T, drawn exactly from OS randomness.
3. The server checks that every report carries the strategy's hash and counts them into y
   (``report_counts``); N = 1ᵀy is public. Estimation is in ``dpsql.local.answers``.

Privacy:
    Each report is ε-LDP for the person who sent it: the published weights satisfy
    K[o, u] ≤ e^ε K[o, u'] exactly (checked in integers on publish and on load), and the output
    is sampled exactly from K[:, u] / T (a uniform integer r < T from ``dpsql.noise``'s
    ``SystemRandomSource``, os.urandom with rejection; o is the row whose cumulative-weight
    interval holds r). A person who sends k reports (k rows, or k collection rounds) loses
    k·ε (sequential composition): the guarantee is per report.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dpsql.errors import DataError, InterfaceError, PrivacyParameterError, ShapeError
from dpsql.local.layout import Layout
from dpsql.local.quantize import TOTAL, exactly_ldp, integer_weights
from dpsql.local.strategy import LocalStrategy, check_epsilon
from dpsql.noise import RandomSource, resolve_rng

IntArray = npt.NDArray[np.int64]

FORMAT = "dpsql-local-strategy"
VERSION = 1

#: The largest per-report ε a client accepts unless its user raises the limit. At ε = 5 a report
#: may be e^5 ≈ 148 times likelier for one value than another (randomized response over two
#: values tells the truth 99.3% of the time); above it a report all but discloses the record.
#: The client applies its own limit because the strategy file's ε is chosen by the server.
DEFAULT_MAX_EPSILON = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategyFile:
    """A published strategy: exactly ε-LDP integer weights, the cell layout and the content hash.

    Attributes:
        epsilon: the per-report privacy loss.
        name: the mechanism that was chosen.
        weights: K (m × n, int64, read-only), every column summing to ``quantize.TOTAL``.
        layout: how records map to cells (None: the client's value is the cell index itself).
        schema: the schema table the batch was designed on, as TOML data ({"tables": {...}}), or None.
        sha256: hex SHA-256 of the canonical content; every report carries it.
    """

    epsilon: float
    name: str
    weights: IntArray
    layout: Layout | None = None
    schema: Mapping[str, Any] | None = None
    sha256: str = field(default="")

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        K = np.array(self.weights, dtype=np.int64)
        if K.ndim != 2 or K.size == 0 or np.any(K.sum(axis=0) != TOTAL):
            raise ShapeError(f"strategy weights must be an m × n integer matrix whose columns sum to {TOTAL}.")
        if not exactly_ldp(K, self.epsilon):
            raise PrivacyParameterError("the strategy weights are not exactly "
                                        f"{self.epsilon:g}-LDP: some output is more "
                                        "than e^ε times likelier for one cell than for another. Re-publish it.")
        if self.layout is not None and self.layout.cells != K.shape[1]:
            raise ShapeError(f"the layout has {self.layout.cells} cells but the weights have {K.shape[1]} columns.")
        K.setflags(write=False)
        object.__setattr__(self, "weights", K)
        if self.schema is not None:  # as JSON will hold it (TOML dates become ISO text, which Schema.load reads)
            object.__setattr__(self, "schema", json.loads(json.dumps(self.schema, default=str)))
        object.__setattr__(self, "sha256", hashlib.sha256(_canonical(self._content())).hexdigest())

    @property
    def n(self) -> int:
        return int(self.weights.shape[1])

    @property
    def m(self) -> int:
        return int(self.weights.shape[0])

    @property
    def strategy(self) -> LocalStrategy:
        """The exact distribution clients sample, Q = K / T (exact in floating point)."""
        return LocalStrategy(Q=self.weights / TOTAL, epsilon=self.epsilon, name=self.name)

    def _content(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "epsilon": self.epsilon, "mechanism": self.name,
            "cells": self.n, "outputs": self.m, "total": TOTAL,
            "layout": None if self.layout is None else self.layout.to_json(),
            "schema": self.schema,
            "weights": base64.b64encode(self.weights.astype("<i8").tobytes()).decode("ascii"),
        }

    def to_json(self) -> str:
        """The file's text: the canonical content plus ``sha256``."""
        return json.dumps({**self._content(), "sha256": self.sha256}, sort_keys=True, indent=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """What one client sends: the hash of the strategy it used and its randomized output."""

    strategy: str
    output: int


def publish(strategy: LocalStrategy, *, layout: Layout | None = None,
            schema: Mapping[str, Any] | None = None) -> StrategyFile:
    """The strategy in its exactly ε-LDP integer form (``quantize.integer_weights``), ready to save."""
    return StrategyFile(epsilon=strategy.epsilon, name=strategy.name, weights=integer_weights(strategy),
                        layout=layout, schema=schema)


def save(published: StrategyFile, path: str | Path) -> None:
    """Write the strategy file (JSON).

    Raises:
        InterfaceError: the file cannot be written.
    """
    try:
        Path(path).write_text(published.to_json())
    except OSError as err:
        raise InterfaceError(f"cannot write the strategy file '{path}': {err.strerror or err}.") from err


def load(path: str | Path) -> StrategyFile:
    """Read and check a strategy file: format, version, hash, shape and exact ε-LDP.

    Raises:
        InterfaceError: the file cannot be read or is not a dpsql strategy file of this version.
        DataError: its content does not match its hash (it was altered or damaged).
    """
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise InterfaceError(f"cannot read the strategy file '{path}': {err.strerror or err}.") from err
    except json.JSONDecodeError as err:
        raise InterfaceError(f"'{path}' is not a strategy file (not JSON: {err.msg}).") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InterfaceError(f"'{path}' is not a dpsql local strategy file (no \"format\": \"{FORMAT}\").")
    if data.get("version") != VERSION:
        raise InterfaceError(f"'{path}' has strategy file version {data.get('version')!r}; this dpsql reads version "
                             f"{VERSION}. Re-design the strategy with this version.")
    try:
        m, n = int(data["outputs"]), int(data["cells"])
        weights = np.frombuffer(base64.b64decode(data["weights"], validate=True), dtype="<i8").reshape(m, n)
        published = StrategyFile(epsilon=float(data["epsilon"]), name=str(data["mechanism"]), weights=weights,
                                 layout=None if data["layout"] is None else Layout.from_json(data["layout"]),
                                 schema=data["schema"])
    except (KeyError, TypeError, ValueError) as err:
        raise InterfaceError(f"'{path}' is a damaged strategy file ({type(err).__name__}: {err}).") from err
    if published.sha256 != data.get("sha256"):
        raise DataError(f"the strategy file '{path}' does not match its sha256: it was altered or damaged. "
                        "Download it again from the server.")
    return published


def check_max_epsilon(published: StrategyFile, max_epsilon: float, *, option: str = "max_epsilon") -> None:
    """Refuse a strategy whose per-report ε is above the client's limit ``max_epsilon``.

    Raises:
        PrivacyParameterError: ``max_epsilon`` is not a finite number > 0, or the file's ε exceeds it
            (the message names ``option``, the setting that raises the limit).
    """
    if isinstance(max_epsilon, bool) or not isinstance(max_epsilon, (int, float)) or not math.isfinite(max_epsilon) \
            or max_epsilon <= 0:
        raise PrivacyParameterError(f"{option} must be a finite number > 0; got {max_epsilon!r}.")
    if published.epsilon > max_epsilon:
        raise PrivacyParameterError(
            f"the strategy file asks for ε = {published.epsilon:g} per report ({published.name}), above this client's "
            f"limit {option} = {max_epsilon:g}: its reports would reveal too much of each record. Nothing was "
            f"randomized. Ask the server for a strategy at ε ≤ {max_epsilon:g}, or raise {option} only if every "
            "person reporting accepts that privacy loss.")


def randomize(published: StrategyFile, value: int | Mapping[str, object], *, rng: RandomSource | None = None,
              max_epsilon: float = DEFAULT_MAX_EPSILON) -> Report:
    """The client's step: map ``value`` to its cell and return one randomized report.

    Args:
        published: the strategy file, downloaded whole.
        value: the cell index (when the strategy has no layout) or the record, a mapping from
            column name to value (see ``dpsql.local.layout``).
        rng: tests only; production draws from the operating system (SystemRandomSource).
        max_epsilon: the client's own limit on the file's ε (``DEFAULT_MAX_EPSILON``).
    Privacy:
        ε-LDP for this report (module docstring): the output is an exact draw from K[:, u] / T,
        with ε ≤ ``max_epsilon`` whatever the server chose.
    Raises:
        PrivacyParameterError: the file's ε is above ``max_epsilon``.
        DataError: the value is not a cell index of the strategy, or the record does not fit its layout.
    """
    check_max_epsilon(published, max_epsilon)
    if published.layout is not None:
        if not isinstance(value, Mapping):
            columns = ", ".join(a.column for a in published.layout.axes)
            raise DataError(f"this strategy maps records over columns {columns}; "
                            "pass the record as a mapping from column name to value.")
        cell = published.layout.cell_of(value)
    else:
        cell = _cell_index(value, published.n)
    output = int(randomize_cells(published, np.array([cell], dtype=np.int64), rng=rng, max_epsilon=max_epsilon)[0])
    return Report(strategy=published.sha256, output=output)


def randomize_cells(published: StrategyFile, cells: npt.ArrayLike, *, rng: RandomSource | None = None,
                    max_epsilon: float = DEFAULT_MAX_EPSILON) -> IntArray:
    """One exact draw o ~ K[:, u] / T per cell index u (many clients at once: simulation or a Python client).

    Raises:
        PrivacyParameterError: the file's ε is above ``max_epsilon`` (``check_max_epsilon``).
        DataError: a cell index is outside [0, n).
    """
    check_max_epsilon(published, max_epsilon)
    cells = np.asarray(cells)
    if cells.ndim != 1 or (cells.size and (not np.issubdtype(cells.dtype, np.integer) or cells.min() < 0
                                           or cells.max() >= published.n)):
        raise DataError(f"cell indices must be integers in [0, {published.n}); some are not. Map each record to its "
                        "cell with the strategy's layout first.")
    source = resolve_rng(rng)
    draws = source.integers(np.full(cells.size, TOTAL, dtype=np.int64))
    cumulative = np.cumsum(published.weights, axis=0)
    outputs = np.empty(cells.size, dtype=np.int64)
    for cell in np.unique(cells):
        mine = cells == cell
        outputs[mine] = np.searchsorted(cumulative[:, cell], draws[mine], side="right")
    return outputs


def report_counts(published: StrategyFile, strategies: Sequence[str] | npt.ArrayLike, outputs: npt.ArrayLike,
                  counts: npt.ArrayLike | None = None) -> IntArray:
    """y: how many reports chose each output, after checking that every report used this strategy.

    Args:
        strategies, outputs: one entry per report (or per row of aggregated reports).
        counts: for aggregated reports, how many reports each row stands for (default 1 each).
    Raises:
        DataError: a report carries another strategy's hash, an output outside [0, m), or a
            negative count.
    """
    hashes = np.asarray(strategies, dtype=object)
    chosen = np.asarray(outputs)
    weights = np.ones(chosen.shape, dtype=np.int64) if counts is None else np.asarray(counts)
    if hashes.shape != chosen.shape or weights.shape != chosen.shape or chosen.ndim != 1:
        raise DataError("reports need one strategy hash, one output (and one count) per row.")
    foreign = hashes != published.sha256
    if np.any(foreign):
        other = str(hashes[np.argmax(foreign)])
        raise DataError(f"{int(foreign.sum())} report(s) were made with another strategy (sha256 {other[:12]}…), not "
                        f"with this one ({published.sha256[:12]}…). Answer them with the strategy file they were "
                        "randomized with.")
    if chosen.size and (not np.issubdtype(chosen.dtype, np.integer) or chosen.min() < 0 or chosen.max() >= published.m):
        raise DataError(f"report outputs must be integers in [0, {published.m}) for this strategy; some are not.")
    if weights.size and (not np.issubdtype(weights.dtype, np.integer) or weights.min() < 0):
        raise DataError("report counts must be non-negative integers.")
    return np.bincount(chosen.astype(np.int64), weights=weights, minlength=published.m).round().astype(np.int64)


def _cell_index(value: object, n: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < n:
        raise DataError(f"the value must be a cell index, an integer in [0, {n}); got a {type(value).__name__} "
                        "outside that range. Map the record to its cell first.")
    return int(value)


def _canonical(content: Mapping[str, Any]) -> bytes:
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")

