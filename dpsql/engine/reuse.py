"""Answers from earlier releases: which statements they already determine, and the generalized
least-squares answer of every statement over all kept measurements.

A statement group's block W over data vector v (its cells: the group's axes) is lifted onto the
joint cells of the group and the kept measurements of v (:mod:`dpsql.releases.joint`); where every
row lies in the span of those measurements, W x̂ with x̂ their GLS estimate is its answer, with
exact variance W M⁺ Wᵀ (:mod:`dpsql.releases.gls`). A statement all of whose blocks are answerable
is *free*: no new measurement, no charge. After a batch is measured, its own measurements join the
kept ones and every statement is answered over all of them, so an old question's error shrinks as
more is measured. Post-processing of released values: free, and nothing here reads data.

Kept: measurements of tables where each row is the privacy unit (a per-unit cap keeps rows by a
hash of the values each scan reads, so capped vectors are not marginals of each other), over at
most REUSE_CELLS cells. A group pools the kept measurements over a subset or a superset of its
columns (a marginal of its data, or data it is a marginal of) while their joint cells number at
most REUSE_CELLS, and at most POOL_MEMBERS of them, at most SAME_CELLS over the same cells, so a
pool's work does not grow with the number of releases a dataset holds. They join in this order:
the batch's own (once measured, or as planned); then those that refine the group's cells least
and, among those, have the most cells of their own, so one over exactly the group's cells comes
first and a repeated question finds its earlier answer however many releases came after it;
newest first among equals. A measurement over other columns says little about the group's cells
and would multiply the joint cells. Order statistics are always measured afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dpsql import mechanism
from dpsql.accounting import PrivacyBudget
from dpsql.engine.measure import MeasuredVector
from dpsql.engine.measurements import PlannedVector
from dpsql.engine.release_store import ReleaseStore
from dpsql.releases.gls import Pool, pool
from dpsql.releases.joint import Axes, joint_cells, joint_domain
from dpsql.releases.kept import KeptMeasurement
from dpsql.releases.recipes import NotKeptError, to_recipe
from dpsql.results import AnswerKey, AnswerSet
from dpsql.schema import Table, measure_quantum
from dpsql.sql.compile import Axis, CompiledBatch, CompiledGroup
from dpsql.sql.vectors import DataVector

FloatArray = npt.NDArray[np.float64]

#: The release number a planned, not yet measured, measurement goes by (the newest of all).
NEW_RELEASE = 2**62
#: Measurements with less noise variance than this (ε of about 20 and above) are nearly exact and
#: not kept: beside ordinary ones their information matrix would be too ill-conditioned to invert.
MIN_NOISE_VARIANCE = 1e-6
#: The most joint cells a reuse may span (its information matrix is dense: REUSE_CELLS² numbers).
REUSE_CELLS = 1024
#: The most kept measurements one pool combines (the batch's own and those nearest the group's cells).
POOL_MEMBERS = 32
#: The most of them over the same cells (more of those only shrink a variance; other cells may answer more).
SAME_CELLS = 4


def not_kept_reason(table: Table) -> str | None:
    """Why a table's measurements are not kept for reuse (None: they are)."""
    if table.privacy_unit.column is not None:
        return (f"'{table.name}' caps each privacy unit's rows, chosen per scan, so its measurements are not "
                "marginals of each other and are not kept for reuse")
    return None


def axis_key(axis: Axis, table: Table) -> str:
    """An axis's identity across batches: its column, and ':values' for a value-cell axis (clamped values)."""
    declared = table.columns.get(axis.column.name)
    return axis.column.name if axis.column == declared else f"{axis.column.name}:values"


def vector_key(vector: DataVector, bounds: tuple[float, float] | None, quantum: float) -> str:
    """A data vector's identity across batches: kind, column, and a sum's clamp bounds and quantum."""
    if vector.is_sum:
        assert bounds is not None
        return f"{vector.label}[{bounds[0]!r},{bounds[1]!r}]/{quantum!r}"
    return vector.label


def group_axes(group: CompiledGroup, table: Table) -> tuple[tuple[str, npt.NDArray[np.int64]], ...]:
    return tuple((axis_key(axis, table), np.asarray(axis.cell_of_base, dtype=np.int64)) for axis in group.axes)


def kept_measurements(compiled: CompiledBatch,
                      measured: Sequence[MeasuredVector]) -> tuple[list[KeptMeasurement], list[str]]:
    """The measurements of a release to keep, and why the others are not kept."""
    table = compiled.table
    if (reason := not_kept_reason(table)) is not None:
        return [], [reason] if measured else []
    kept, skipped = [], []
    for item in measured:
        group = compiled.groups[item.group]
        axes = group.axes if item.axes is None else tuple(group.axes[i] for i in item.axes)
        cells = int(np.prod([axis.size for axis in axes], dtype=np.int64))
        label = f"{item.vector.label} over {', '.join(f'{a.column.name}({a.size})' for a in axes) or 'all rows'}"
        if cells > REUSE_CELLS:
            skipped.append(f"{label}: {cells:,} cells (more than {REUSE_CELLS:,}) not kept for reuse")
            continue
        release = item.measurement
        if not release.noise_variance >= MIN_NOISE_VARIANCE:
            skipped.append(f"{label}: noise variance {release.noise_variance:.3g} is nearly exact, not kept for reuse")
            continue
        try:
            to_recipe(release.strategy)
        except NotKeptError as err:
            skipped.append(f"{label}: {err}")
            continue
        kept.append(KeptMeasurement(table=table.name, vector=vector_key(item.vector, item.bounds, item.quantum),
                                    axes=tuple((axis_key(a, table), np.asarray(a.cell_of_base, dtype=np.int64))
                                               for a in axes),
                                    strategy=release.strategy, y=np.asarray(release.y, dtype=np.float64),
                                    noise_variance=float(release.noise_variance), label=label, unit=item.quantum))
    return kept, skipped


@dataclass(slots=True, kw_only=True)
class Reuse:
    """Answering statements of one compiled batch from kept measurements (pools built once per
    group and data vector)."""

    compiled: CompiledBatch
    kept: Sequence[KeptMeasurement]
    #: (group, vector) → (vector key, value of one integer unit) where a vector is measured with
    #: other bounds than declared (truncated sums); see :func:`measured_keys`.
    keys: Mapping[tuple[int, DataVector], tuple[str, float]] = field(default_factory=dict)
    #: The release whose measurements join every pool first: the batch's own (measured, or planned).
    first: int | None = None
    _pools: dict[tuple[int, str], Pool | None] = field(default_factory=dict)

    def unit_key(self, index: int, vector: DataVector) -> tuple[str, float]:
        """(vector key, value of one integer unit of the vector) of a group's vector: as measured,
        else with the declared bounds."""
        if (index, vector) in self.keys:
            return self.keys[(index, vector)]
        if not vector.is_sum:
            return vector_key(vector, None, 1.0), 1.0
        column = self.compiled.table.columns[vector.summed]
        quantum = measure_quantum(column)
        return vector_key(vector, column.measure_bounds, quantum), quantum

    def pool_of(self, index: int, vector: DataVector) -> Pool | None:
        """The GLS pool of one group's data vector (None: nothing kept fits)."""
        key = (index, self.unit_key(index, vector)[0])
        if key not in self._pools:
            self._pools[key] = self._build(self.compiled.groups[index], key[1])
        return self._pools[key]

    def _build(self, group: CompiledGroup, key: str) -> Pool | None:
        table = self.compiled.table
        if not_kept_reason(table) is not None:
            return None
        participants: list[Axes] = [group_axes(group, table)]
        columns = {name for name, _ in participants[0]}
        candidates = [k for k in self.kept if k.table == table.name and k.vector == key
                      and ({n for n, _ in k.axes} <= columns or columns <= {n for n, _ in k.axes})]
        ranked = sorted(candidates, key=lambda k: (k.release != self.first, joint_cells([participants[0], k.axes]),
                                                   -joint_cells([k.axes]), -k.release))
        members: list[KeptMeasurement] = []
        alike: dict[tuple[tuple[str, bytes], ...], int] = {}
        for kept in ranked:
            if len(members) == POOL_MEMBERS:
                break
            cells = tuple((name, axis.tobytes()) for name, axis in kept.axes)
            if alike.get(cells, 0) == SAME_CELLS or joint_cells([*participants, kept.axes]) > REUSE_CELLS:
                continue
            alike[cells] = alike.get(cells, 0) + 1
            participants.append(kept.axes)
            members.append(kept)
        if not members:
            return None
        return pool(joint_domain(participants), members)

    def statement_answers(self, statement: int) -> dict[AnswerKey, mechanism.Answers] | None:
        """Every block of a statement answered from the pools, with covariances between blocks that
        share one; None if some block is not determined by kept measurements."""
        compiled = self.compiled.statements[statement]
        group = self.compiled.groups[compiled.group]
        positions = sorted({p for output in compiled.aggregates for p in output.blocks})
        if any(group.blocks[p].total is not None for p in positions) or group.cells > REUSE_CELLS:
            return None
        axes = group_axes(group, self.compiled.table)
        rows: dict[int, tuple[Pool, FloatArray, float]] = {}
        for p in positions:
            block = group.blocks[p]
            found = self.pool_of(compiled.group, block.data)
            if found is None:
                return None
            lifted = np.asarray(block.workload.dense(), dtype=np.float64)[:, found.domain.index(axes)]
            if not np.all(found.answerable(lifted)):
                return None
            rows[p] = (found, lifted, block.scale * self.unit_key(compiled.group, block.data)[1])
        answers: dict[AnswerKey, mechanism.Answers] = {}
        for p, (found, lifted, unit) in rows.items():
            covariances = {q: found.covariances(lifted, other) * unit * other_unit
                           for q, (other_pool, other, other_unit) in rows.items() if q > p and other_pool is found}
            answers[AnswerKey(compiled.group, p)] = mechanism.Answers(
                values=found.values(lifted) * unit, variances=found.covariances(lifted, lifted) * unit**2,
                covariances=covariances)
        return answers

    def releases_of(self, statement: int) -> tuple[int, ...]:
        """The releases whose measurements answer a statement (after ``statement_answers`` found it answerable)."""
        compiled = self.compiled.statements[statement]
        group = self.compiled.groups[compiled.group]
        vectors = {group.blocks[p].data for output in compiled.aggregates for p in output.blocks}
        found = [self.pool_of(compiled.group, v) for v in vectors]
        return tuple(sorted({r for f in found if f is not None for r in f.releases}))


def answer_all(reuse: Reuse, answers: AnswerSet, statements: Iterable[int],
               own: int | None = None) -> tuple[AnswerSet, dict[int, tuple[int, ...]]]:
    """``answers`` with each listed statement's blocks replaced by their GLS answers where kept
    measurements determine them; also which releases answered each statement. A statement only
    release ``own`` answers keeps its answers as they are (the same, but for float rounding)."""
    found = dict(answers)
    used: dict[int, tuple[int, ...]] = {}
    for statement in statements:
        mine = reuse.statement_answers(statement)
        releases = reuse.releases_of(statement) if mine is not None else ()
        if mine is not None and set(releases) - {own}:
            found.update(mine)
            used[statement] = releases
    return AnswerSet(found), used


def measured_keys(measured: Sequence[MeasuredVector]) -> dict[tuple[int, DataVector], tuple[str, float]]:
    """Each measured vector's key and unit, from the bounds and quantum it was measured with."""
    return {(m.group, m.vector): (vector_key(m.vector, m.bounds, m.quantum), m.quantum) for m in measured}


def planned_answers(compiled: CompiledBatch, measurements: Sequence[PlannedVector], kept: Sequence[KeptMeasurement],
                    alone: Mapping[AnswerKey, mechanism.Answers]) -> dict[AnswerKey, mechanism.Answers]:
    """Each block's variances (and covariances) once the planned measurements join the kept ones
    (GLS over all of them; no data: the new measurements' strategies and calibrated noise variances
    are public, the values are zeros). ``alone``: the blocks under the plan by itself, kept where
    no pool applies."""
    result = dict(alone)
    if not kept or not_kept_reason(compiled.table) is not None:
        return result
    table = compiled.table
    hypothetical: list[KeptMeasurement] = []
    for m in measurements:
        group = compiled.groups[m.group]
        if m.share == 0 or group.cells > REUSE_CELLS:
            continue
        calibration = m.calibration()
        if not calibration.variance >= MIN_NOISE_VARIANCE:
            continue
        hypothetical.append(KeptMeasurement(
            table=table.name, vector=Reuse(compiled=compiled, kept=()).unit_key(m.group, m.vector)[0],
            axes=group_axes(group, table), strategy=calibration.strategy, y=np.zeros(calibration.strategy.shape[0]),
            noise_variance=calibration.variance, release=NEW_RELEASE))
    reuse = Reuse(compiled=compiled, kept=[*kept, *hypothetical], first=NEW_RELEASE)
    for s in range(len(compiled.statements)):
        found = reuse.statement_answers(s)
        if found is not None:
            result.update(found)
    return result


def summary(measurements: Sequence[KeptMeasurement]) -> list[str]:
    """What a release can answer, one line per measurement (``dpsql budget show`` lists them)."""
    lines = []
    for m in measurements:
        stddev = m.cell_stddev()
        each = (f"each cell's estimate within a stddev of {stddev:.4g}" if stddev is not None
                else "its cells are determined together with other measurements (a residual)")
        lines.append(f"{m.label} on '{m.table}': {m.y.shape[0]:,} noisy values, {each}; answers any linear query over "
                     "these cells")
    return lines


def keep_and_answer(compiled: CompiledBatch, measured: Sequence[MeasuredVector], answers: AnswerSet,
                    store: ReleaseStore, budget: PrivacyBudget,
                    combine: bool = True) -> tuple[AnswerSet, dict[int, tuple[int, ...]]]:
    """Keep a charged release's measurements, then (``combine``) answer every statement over all kept ones."""
    kept, _ = kept_measurements(compiled, measured)
    own = store.keep(kept, summary(kept), budget) if kept else None
    if not combine or not_kept_reason(compiled.table) is not None:
        return answers, {}
    reuse = Reuse(compiled=compiled, kept=store.kept(), keys=measured_keys(measured), first=own)
    return answer_all(reuse, answers, range(len(compiled.statements)), own)


def reuse_entry(releases: tuple[int, ...] | None) -> dict[str, object]:
    """A statement's ``reuse`` metadata: the releases whose measurements answered it."""
    if not releases:
        return {}
    return {"reuse": {"answered_by_releases": list(releases),
                      "method": "generalized least squares over every kept measurement of its cells"}}
