"""Planning decisions cached by the workload's exact structure (and statement groupings by the
batch's statements), in memory and on disk.

Scoring every candidate strategy of a workload (exact expected errors, optimized templates) is
the planner's cost; an analyst who runs a batch again, or a batch sharing statement groups with
an earlier one, asks for the same workloads. A decision is what the planner concluded about
one workload: the winning candidate's name, every candidate's expected error at unit privacy and
the planner's notes. The strategy itself is rebuilt from the name (standard strategies by
construction, optimized ones from :mod:`dpsql.planning.strategy_cache`).

The key is a SHA-256 of the workload's structure (every block, weight and Kronecker factor,
exactly), the noise family, the candidate set asked for and DECISION_FORMAT. Decisions depend on
the queries only (never on data), so caching them leaks nothing; and they steer accuracy, never
privacy: the noise is always calibrated from the strategy actually measured and the sensitivity
from the schema. Entries are small JSON files under ``$DPSQL_CACHE_DIR/plans`` (default
``~/.cache/dpsql/plans``); a damaged or unreadable entry is ignored and rewritten, and a
read-only cache folder only means nothing is stored.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import tempfile
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.matrix.workloads import Workload
from dpsql.planning.strategy_cache import cache_dir
from dpsql.planning.structure import structure_digest

#: Bump when the candidates, their scoring, the planner's work budgets or the keys change: decisions
#: made under other rules are not reused. 2: domains keyed by their declaration (``declaration()``).
#: 3: statement groups' candidate scores keyed by the group's statements (``load_scores``).
#: 4: a batch's partition keyed by its statements' digests (what they ask, not where they are);
#: workloads fed by their parts' digests (``structure_digest``). 5: notes on strategies left out are sentences.
#: 6: a workload reading an attribute only through totals is planned on the others (``summed_axes``).
DECISION_FORMAT = "6"
#: Decisions kept in memory per process.
MEMORY_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class Decision:
    """What the planner concluded about one workload."""

    name: str
    candidates: dict[str, float]
    notes: tuple[str, ...]


_memory: OrderedDict[str, Any] = OrderedDict()


def decision_key(W: Workload, *, noise: str, options: Iterable[str], extra: Mapping[str, Workload]) -> str:
    """SHA-256 of (DECISION_FORMAT, noise, the candidate options asked for, the caller's extra
    strategies and W, each by its exact structure)."""
    digest = hashlib.sha256(f"decision|{DECISION_FORMAT}|{noise}|{'|'.join(options)}|".encode())
    for name in sorted(extra):
        digest.update(f"extra|{name}|".encode())
        _update(digest, extra[name])
    _update(digest, W)
    return digest.hexdigest()


def _update(digest: hashlib._Hash, W: Workload) -> None:
    """Feed W's structure into ``digest``: its :func:`structure_digest`."""
    digest.update(structure_digest(W))


def load(key: str) -> Decision | None:
    """The decision stored under ``key`` (memory first, then disk), or None."""
    stored = _load(key)
    try:
        decision = Decision(name=str(stored["name"]),
                            candidates={str(k): float(v) for k, v in stored["candidates"].items()},
                            notes=tuple(str(n) for n in stored["notes"]))
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    if decision.name not in decision.candidates or not all(math.isfinite(v) and v >= 0
                                                           for v in decision.candidates.values()):
        return None
    return decision


def store(key: str, decision: Decision) -> None:
    """Keep ``decision`` under ``key``."""
    _store(key, {"name": decision.name, "candidates": decision.candidates, "notes": list(decision.notes)})


def load_partition(key: str, statements: int) -> list[list[int]] | None:
    """A partition of statements 0..statements−1 stored under ``key``, or None."""
    stored = _load(key)
    try:
        groups = [[int(i) for i in group] for group in stored["groups"]]
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    if sorted(i for group in groups for i in group) != list(range(statements)) or not all(groups):
        return None
    return groups


def store_partition(key: str, groups: list[list[int]]) -> None:
    """Keep a partition (lists of statement indices) under ``key``."""
    _store(key, {"groups": groups})


def load_numbers(key: str, count: int) -> tuple[float, ...] | None:
    """``count`` finite non-negative numbers stored under ``key`` (e.g. a plan's error per block), or None."""
    stored = _load(key)
    try:
        numbers = tuple(float(v) for v in stored["numbers"])
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    return numbers if len(numbers) == count and all(math.isfinite(v) and v >= 0 for v in numbers) else None


def store_numbers(key: str, numbers: Sequence[float]) -> None:
    """Keep ``numbers`` under ``key``."""
    _store(key, {"numbers": [float(v) for v in numbers]})


def load_scores(key: str) -> tuple[tuple[float, ...], tuple[tuple[int, ...], ...]] | None:
    """(errors, sizes) stored under ``key`` by :func:`store_scores`, or None: a candidate statement
    group's weighted unit errors (non-negative, ∞ for a group refused) and the axis sizes of each of
    its densely planned data vectors."""
    stored = _load(key)
    try:
        errors = tuple(float(v) for v in stored["errors"])
        sizes = tuple(tuple(int(n) for n in vector) for vector in stored["sizes"])
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    if not errors or not all(v >= 0 for v in errors) or not all(n > 0 for vector in sizes for n in vector):
        return None  # NaN fails v >= 0
    return errors, sizes


def store_scores(key: str, errors: Sequence[float], sizes: Sequence[Sequence[int]]) -> None:
    """Keep a candidate statement group's errors and dense vectors' sizes under ``key``."""
    _store(key, {"errors": [float(v) for v in errors], "sizes": [[int(n) for n in vector] for vector in sizes]})


def object_key(*parts: object, omit: tuple[type, ...] = ()) -> str:
    """SHA-256 of DECISION_FORMAT and ``parts``' exact content (dataclasses field by field, arrays
    by their bytes, mappings, sequences, scalars by repr): for decisions keyed by a batch's parsed
    statements and its table's declaration.

    A value with a ``declaration()`` method that returns something other than None (a domain built
    from a uniform grid, ``dpsql.domains.Ordered``) is fed by that declaration instead of its fields:
    a few scalars that build it exactly, so a 500,001-cell domain costs what a 2-cell one does. The
    declaration is tagged apart from field-by-field content, so the two forms never collide; the
    same domain declared both ways only gets two keys (a missed reuse, never a wrong one).

    Values of the ``omit`` types are fed as their type's name only: e.g. a statement's positions in
    the batch text, which say where it is, not what it asks."""
    digest = hashlib.sha256(f"object|{DECISION_FORMAT}".encode())
    for part in parts:
        _feed(digest, part, omit)
    return digest.hexdigest()


#: Types fed by their repr at once, as the last case of :func:`_feed` feeds them: none has a declaration,
#: fields, entries or items (exact types: a subclass takes the general path).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _feed(digest: hashlib._Hash, value: object, omit: tuple[type, ...] = ()) -> None:
    """Feed one value's exact content into ``digest`` (see :func:`object_key`)."""
    if type(value) in _SCALARS and not (omit and isinstance(value, omit)):
        digest.update(f"<{type(value).__name__}:{value!r}>".encode())
    elif omit and isinstance(value, omit):
        digest.update(f"<omitted {type(value).__qualname__}>".encode())
    elif callable(declared := getattr(value, "declaration", None)) and (parts := declared()) is not None:
        digest.update(f"<declared {type(value).__qualname__}".encode())
        _feed(digest, parts, omit)
        digest.update(b">")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(f"<{type(value).__qualname__}".encode())
        for name in _field_names(type(value)):
            digest.update(f"{name}=".encode())
            _feed(digest, getattr(value, name), omit)
        digest.update(b">")
    elif isinstance(value, np.ndarray):
        digest.update(f"<array{value.dtype}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, Mapping):
        digest.update(f"<map{len(value)}".encode())
        for name in sorted(value, key=repr):
            _feed(digest, name, omit)
            _feed(digest, value[name], omit)
    elif isinstance(value, (list, tuple)) and (numbers := _numbers(value)) is not None:
        digest.update(f"<{numbers.dtype}{type(value).__name__}{len(value)}".encode())  # a domain's boundaries
        digest.update(numbers.tobytes())
    elif isinstance(value, (list, tuple, frozenset, set)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        digest.update(f"<{type(value).__name__}{len(items)}".encode())
        for item in items:
            _feed(digest, item, omit)
    else:
        digest.update(f"<{type(value).__name__}:{value!r}>".encode())


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    """A dataclass's field names in order (``dataclasses.fields``), read once per class."""
    return tuple(item.name for item in dataclasses.fields(kind))


def _numbers(values: Sequence[object]) -> np.ndarray | None:
    """A long sequence of only floats (or only int64-range ints) as one exact array, else None."""
    kind = type(values[0]) if len(values) > 1 else None
    if kind not in (float, int) or not all(type(item) is kind for item in values):
        return None
    try:
        return np.asarray(values, dtype=np.float64 if kind is float else np.int64)
    except OverflowError:
        return None


def _load(key: str) -> Any:
    """The JSON payload stored under ``key`` (memory first, then disk), or None."""
    path = _path(key)
    if str(path) in _memory:
        _memory.move_to_end(str(path))
        return _memory[str(path)]
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    _remember(path, stored)
    return stored


def _store(key: str, payload: dict[str, Any]) -> None:
    """Keep ``payload`` in memory and write it atomically to disk (a read-only folder is not an error)."""
    path = _path(key)
    _remember(path, payload)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(payload, stream)
        os.replace(temporary, path)
    except OSError:
        return


def clear_memory() -> None:
    """Forget the decisions held in memory (the disk entries stay): a cold start in one process."""
    _memory.clear()


def _remember(path: Path, payload: Any) -> None:
    """Keep ``payload`` in memory under its file's path (so another cache folder starts cold)."""
    _memory[str(path)] = payload
    _memory.move_to_end(str(path))
    while len(_memory) > MEMORY_ENTRIES:
        _memory.popitem(last=False)


def _path(key: str) -> Path:
    return cache_dir().parent / "plans" / f"{key}.json"
