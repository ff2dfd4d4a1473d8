"""Answers from earlier releases: which statements they already determine, and the generalized
least-squares answer of every statement over all kept measurements.

A statement group's block W over data vector v (its cells: the group's axes) is answered from a
*pool*: every kept measurement of v, each reduced to what it says about the group's cells
(:mod:`dpsql.releases.reduce`: the measurement's information about the cells both can speak of,
with the rest a free nuisance), summed (:mod:`dpsql.releases.gls`). Where every row of W lies in
the span of the pool, W x̂ with x̂ its GLS estimate is its answer, with exact variance W M⁺ Wᵀ.
Post-processing of released values: free, and nothing here reads data.

At release (:func:`keep_and_answer`), every statement is answered over every kept-eligible
measurement that informs it, the batch's own measurements of the other statement groups included
(with reuse off: those alone), so a batch's first answer is what the same batch asked again would
get free; :func:`planned_answers` predicts exactly these variances before the data is read
(EXPLAIN, accuracy targets, the "never worse than paid" comparison).

The contract (each part tested as a property, ``tests/engine/test_reuse_contract.py``):

- **Monotone.** A group's pool takes the kept measurements over the same cells together, in the
  order their cells were first measured, while the pool's work (MAX_POOL_WORK, a count of
  multiply-adds) allows; a batch's own measurements always join. A later release can only add to
  a pool that existed before, and adding information never increases a GLS variance, so no
  answer's variance grows as releases accumulate (unless a new layout is over the work bound:
  then it is left out, EXPLAIN says so, and the statement can be measured).
- **Never worse than paid for** (:mod:`dpsql.engine.reuse.free`): with a cost, a statement is free only
  if the kept answer is at least as accurate as the batch's plan at that cost would make it
  without reuse; otherwise it is measured and combined with the kept measurements, so paying
  always helps. With an accuracy target, it is free exactly when the kept answer meets it.
- **Scoped** (:mod:`dpsql.engine.reuse.release_store`): an analyst reuses the releases her own charges
  paid for, unless the data owner shares them; another analyst's release numbers are never shown.
- **Visible**: EXPLAIN says per statement whether it is free, measured, or measured and combined,
  from which releases and with what stddev on each path; why a measurement is not kept is said in
  EXPLAIN, in the results' metadata and in ``dpsql budget show``.

Kept: measurements of tables where each row is the privacy unit (a per-unit cap keeps rows by a
hash of the values each scan reads, so capped vectors are not marginals of each other), over at
most REUSE_CELLS cells, with noise variance at least MIN_NOISE_VARIANCE. Order statistics are
always measured afresh.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dpsql.answers.tables import AnswerKey, AnswerSet
from dpsql.budget.accounting import PrivacyBudget
from dpsql.engine.measuring.measure import MeasuredVector
from dpsql.engine.measuring.measurements import PlannedVector
from dpsql.engine.reuse.release_store import ReleaseStore
from dpsql.matrix.workloads import Workload
from dpsql.planning import mechanism
from dpsql.planning.noise_forms import WhitenedForm
from dpsql.releases.gls import Part, Pool, Projection
from dpsql.releases.information import KeptInformation, cells_key
from dpsql.releases.kept import KeptMeasurement
from dpsql.releases.recipes import NotKeptError, to_recipe
from dpsql.releases.reduce import Meet, Reduced, lifted, on_classes, on_classes_of_root, psd_root, reduction_work
from dpsql.schema import Table, measure_quantum, square_quantum
from dpsql.sql.axes import Axis
from dpsql.sql.compile import CompiledBatch, CompiledGroup
from dpsql.sql.vectors import DataVector

FloatArray = npt.NDArray[np.float64]

#: The release number a planned, not yet measured, measurement goes by (the newest of all).
NEW_RELEASE = 2**62
#: Measurements with less noise variance than this (ε of about 20 and above) are nearly exact and
#: not kept: beside ordinary ones their information matrix would be too ill-conditioned to invert.
MIN_NOISE_VARIANCE = 1e-6
#: The most cells a kept measurement, and a group answered from a pool, may have (a measurement's
#: information matrix is dense: REUSE_CELLS² numbers).
REUSE_CELLS = 1024
#: The most work (multiply-adds, :func:`dpsql.releases.reduce.reduction_work`: 3n³ + n² for a measurement of n
#: cells, whatever it needs) one pool may take for the releases kept before the batch: 16 reductions of the
#: largest kept size, a few seconds of CPU in all (each is remembered for the connection's later batches).
MAX_POOL_WORK = 16 * reduction_work(REUSE_CELLS)


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
                      measured: Sequence[MeasuredVector]) -> tuple[list[tuple[int, KeptMeasurement]],
                                                                   list[tuple[int, str]]]:
    """The measurements of a release to keep, and why the others are not kept, each with its statement group."""
    table = compiled.table
    if (reason := not_kept_reason(table)) is not None:
        return [], [(item.group, reason) for item in measured[:1]]
    kept, skipped = [], []
    for item in measured:
        group = compiled.groups[item.group]
        axes = group.axes if item.axes is None else tuple(group.axes[i] for i in item.axes)
        label = _label(item.vector, axes)
        release = item.measurement
        why = _why_not_kept(int(np.prod([axis.size for axis in axes], dtype=np.int64)), release.noise_variance,
                            release.strategy)
        if why is not None:
            skipped.append((item.group, f"{label}: {why}"))
            continue
        kept.append((item.group, KeptMeasurement(
            table=table.name, vector=vector_key(item.vector, item.bounds, item.quantum),
            axes=tuple((axis_key(a, table), np.asarray(a.cell_of_base, dtype=np.int64)) for a in axes),
            strategy=release.strategy, y=np.asarray(release.y, dtype=np.float64),
            noise_variance=float(release.noise_variance), label=label, unit=item.quantum)))
    return kept, skipped


def not_kept_notes(compiled: CompiledBatch, measurements: Sequence[PlannedVector]) -> list[str]:
    """EXPLAIN's lines on the planned measurements that will not be kept for reuse, and why."""
    measured = [m for m in measurements if m.share > 0]
    if (reason := not_kept_reason(compiled.table)) is not None:
        return [f"Reuse: {reason}."] if measured else []
    lines = []
    for m in measured:
        group = compiled.groups[m.group]
        calibration = m.calibration()
        why = _why_not_kept(group.cells, calibration.variance, calibration.strategy)
        if why is not None:
            lines.append(f"Reuse: {_label(m.vector, group.axes)} will not be kept: {why}.")
    return lines


def _label(vector: DataVector, axes: Sequence[Axis]) -> str:
    return f"{vector.label} over {', '.join(f'{a.column.name}({a.size})' for a in axes) or 'all rows'}"


def _why_not_kept(cells: int, noise_variance: float, strategy: Workload) -> str | None:
    """Why a measurement over ``cells`` cells is not kept for reuse (None: it is)."""
    if cells > REUSE_CELLS:
        return f"{cells:,} cells, more than dpsql.engine.reuse.reuse.REUSE_CELLS = {REUSE_CELLS:,}"
    if not noise_variance >= MIN_NOISE_VARIANCE:
        return (f"noise variance {noise_variance:.3g} is below dpsql.engine.reuse.reuse.MIN_NOISE_VARIANCE = "
                f"{MIN_NOISE_VARIANCE:g} (nearly exact)")
    try:
        to_recipe(strategy)
    except NotKeptError as err:
        return str(err)
    return None


@dataclass(frozen=True, slots=True)
class Sources:
    """Which kept releases answer a statement: the numbers of those the connection's own charges paid
    for, and the others the data owner shares (counted when shown, never numbered)."""

    own: tuple[int, ...] = ()
    others: frozenset[int] = frozenset()

    @property
    def shared(self) -> int:
        return len(self.others)

    def describe(self, noun: str = "release(s)") -> str:
        """E.g. "release(s) #1, #3" or "release(s) #2 and 1 release shared by other analysts"."""
        own = f"{noun} {', '.join(f'#{r}' for r in self.own)}" if self.own else ""
        shared = (f"{self.shared} release{'s' if self.shared != 1 else ''} shared by other analysts"
                  if self.shared else "")
        return " and ".join(part for part in (own, shared) if part) or "no release"

    def __or__(self, other: Sources) -> Sources:
        return Sources(own=tuple(sorted({*self.own, *other.own})), others=self.others | other.others)

    def __bool__(self) -> bool:
        return bool(self.own) or bool(self.others)


def sources(members: Iterable[KeptMeasurement]) -> Sources:
    """The releases ``members`` come from (a planned measurement, NEW_RELEASE, is none of them)."""
    found = {(m.release, m.shared) for m in members if m.release != NEW_RELEASE}
    return Sources(own=tuple(sorted(r for r, shared in found if not shared)),
                   others=frozenset(r for r, shared in found if shared))


@dataclass(slots=True, kw_only=True)
class Reuse:
    """Answering statements of one compiled batch from kept measurements (pools built once per
    group and data vector).

    A group's pool takes every kept measurement of the same data vector (:mod:`dpsql.releases.reduce`
    reduces each to what it says about the group's cells), those over the same cells together, in
    the order their cells were first measured (oldest first), as long as the pool's work stays
    within MAX_POOL_WORK; the batch's own measurements (release ``first``) always join. A later
    release therefore only adds to the pool of every group that pooled before (or is left out by
    the bound): no answer's variance grows as releases accumulate.
    """

    compiled: CompiledBatch
    kept: Sequence[KeptMeasurement]
    #: (group, vector) → (vector key, value of one integer unit) where a vector is measured with
    #: other bounds than declared (truncated sums); see :func:`measured_keys`.
    keys: Mapping[tuple[int, DataVector], tuple[str, float]] = field(default_factory=dict)
    #: The release whose measurements join every pool whatever the bound: the batch's own (measured, or planned).
    first: int | None = None
    #: Reductions and pools computed before (a store keeps them across batches and the stages of one;
    #: :mod:`dpsql.releases.information`); only kept releases' are kept.
    cache: KeptInformation = field(default_factory=KeptInformation)
    #: Per planned measurement (release NEW_RELEASE, by identity), what its information depends on (its
    #: values are zeros): pools holding planned measurements are remembered by these (:meth:`KeptInformation.planned`).
    planned: Mapping[tuple[int, int], Hashable] = field(default_factory=dict)
    _pools: dict[tuple[int, str], Pool | None] = field(default_factory=dict)
    _projections: dict[tuple[int, int], tuple[Pool, Workload, Projection]] = field(default_factory=dict)
    _classes: dict[tuple[tuple[tuple[int, int], ...], bytes], Reduced] = \
        field(default_factory=dict)
    #: Per pool, the kept measurements the work bound left out.
    left_out: dict[tuple[int, str], list[KeptMeasurement]] = field(default_factory=dict)

    def unit_key(self, index: int, vector: DataVector) -> tuple[str, float]:
        """(vector key, value of one integer unit of the vector) of a group's vector: as measured,
        else with the declared bounds."""
        if (index, vector) in self.keys:
            return self.keys[(index, vector)]
        if not vector.is_sum:
            return vector_key(vector, None, 1.0), 1.0
        column = self.compiled.table.columns[vector.summed]
        quantum = square_quantum(column) if vector.squared else measure_quantum(column)
        return vector_key(vector, column.measure_bounds, quantum), quantum

    def pool_of(self, index: int, vector: DataVector) -> Pool | None:
        """The GLS pool of one group's data vector (None: nothing kept fits)."""
        key = (index, self.unit_key(index, vector)[0])
        if key not in self._pools:
            self._pools[key] = self._build(key)
        return self._pools[key]

    def joining(self, index: int, vector: DataVector) -> list[KeptMeasurement]:
        """The kept measurements a group's pool of ``vector`` draws from (before the work bound)."""
        key = self.unit_key(index, vector)[0]
        return [m for m in self.kept if m.table == self.compiled.table.name and m.vector == key]

    def _build(self, key: tuple[int, str]) -> Pool | None:
        table = self.compiled.table
        group = self.compiled.groups[key[0]]
        if not_kept_reason(table) is not None or group.cells > REUSE_CELLS:
            return None
        axes = group_axes(group, table)
        classes: dict[tuple[tuple[str, bytes], ...], list[KeptMeasurement]] = {}
        for kept in self.kept:
            if kept.table == table.name and kept.vector == key[1]:
                classes.setdefault(cells_key(kept.axes), []).append(kept)
        work, admitted, left = 0, [], []
        for measured in sorted(classes.values(), key=lambda ms: min(m.release for m in ms)):  # oldest cells first
            earlier = [m for m in measured if m.release != self.first]
            cost = reduction_work(measured[0].cells)
            if earlier and work + cost > MAX_POOL_WORK:  # left out; the batch's own still join
                left.extend(earlier)
                measured = [m for m in measured if m.release == self.first]
                if not measured:
                    continue
            elif earlier:
                work += cost
            admitted.append(measured)
        if left:
            self.left_out[key] = left
        if not admitted:
            return None
        layout = self.cache.layout(axes, [measured[0].axes for measured in admitted], REUSE_CELLS)
        members = [m for measured in admitted for m in measured]

        def build() -> Pool | None:
            return self.cache.pool((self.compiled.table.name, key[1], layout.key),
                                   [tuple(m.identity for m in measured) for measured in admitted],
                                   [_is_kept(measured) for measured in admitted], members, layout.lift,
                                   lambda i: self._reduced(admitted[i], layout.meets[i]))

        if _is_kept(members) or any(m.identity not in self.planned for m in members if not _is_kept([m])):
            return build()
        contents = tuple(tuple(self.planned.get(m.identity, m.identity) for m in measured) for measured in admitted)
        return self.cache.planned((self.compiled.table.name, key[1], layout.key, contents), build, members,
                                  layout.lift)

    def _reduced(self, members: Sequence[KeptMeasurement], found: Meet) -> Part:
        """Members over the same cells, their information summed and reduced onto the group's cells."""
        identities, keep = tuple(m.identity for m in members), _is_kept(members)

        def classes() -> Reduced:
            if sum(m.strategy.shape[0] for m in members) < found.of_measured.size:  # M = XᵀX of few rows
                roots = [m.root() for m in members]
                return on_classes_of_root(np.concatenate([X for X, _ in roots]),
                                          np.asarray(sum(X.T @ z for X, z in roots)), found)
            information = sum(m.information()[0] for m in members)
            score = sum(m.information()[1] for m in members)
            S_theta, r_theta = on_classes(np.asarray(information), np.asarray(score), found)
            return S_theta, r_theta, psd_root(S_theta)

        def compute() -> Part:
            name = found.of_measured.tobytes() + b"|" + str(found.classes).encode()
            if keep:
                return lifted(self.cache.classes(identities, name, classes, keep), found)
            if (identities, name) not in self._classes:  # a planned class: remembered for this batch only
                self._classes[(identities, name)] = classes()
            return lifted(self._classes[(identities, name)], found)

        return self.cache.reduction(identities, found.of_group.tobytes() + b"|" + found.of_measured.tobytes(),
                                    compute, keep)

    def statement_answers(self, statement: int) -> dict[AnswerKey, mechanism.Answers] | None:
        """Every block of a statement answered from the pools, with covariances between blocks that
        share one; None if some block is not determined by kept measurements."""
        compiled = self.compiled.statements[statement]
        group = self.compiled.groups[compiled.group]
        positions = sorted({p for output in compiled.aggregates for p in output.blocks})
        if any(group.blocks[p].total is not None for p in positions) or group.cells > REUSE_CELLS:
            return None
        rows: dict[int, tuple[Pool, Projection, float]] = {}
        for p in positions:
            block = group.blocks[p]
            found = self.pool_of(compiled.group, block.data)
            if found is None:
                return None
            read = self._projected(found, block.workload)
            if not np.all(read.answerable):
                return None
            rows[p] = (found, read, block.scale * self.unit_key(compiled.group, block.data)[1])
        answers: dict[AnswerKey, mechanism.Answers] = {}
        for p, (found, read, unit) in rows.items():
            covariances = {q: read.covariances(other) * unit * other_unit
                           for q, (other_pool, other, other_unit) in rows.items() if q > p and other_pool is found}
            answers[AnswerKey(compiled.group, p)] = mechanism.Answers(
                values=read.values * unit, variances=read.covariances(read) * unit**2, covariances=covariances,
                form=WhitenedForm(whitened=read.whitened, scale=unit, source=found))
        return answers

    def _projected(self, found: Pool, workload: Workload) -> Projection:
        """A block's rows (over its group's cells) read through a pool, once per pool and block: the
        statements of a batch share blocks (identical statements compile to the same ones)."""
        key = (id(found), id(workload))
        if key not in self._projections:  # the entry holds both objects, so neither id is reused meanwhile
            self._projections[key] = (found, workload, found.projected(np.asarray(workload.dense(), dtype=np.float64)))
        return self._projections[key][2]

    def members_of(self, statement: int) -> list[KeptMeasurement]:
        """The kept measurements in a statement's pools (after ``statement_answers`` found it answerable)."""
        compiled = self.compiled.statements[statement]
        group = self.compiled.groups[compiled.group]
        vectors = {group.blocks[p].data for output in compiled.aggregates for p in output.blocks}
        found = [self.pool_of(compiled.group, v) for v in vectors]
        return [m for f in found if f is not None for m in f.members]

    def sources_of(self, statement: int) -> Sources:
        """The releases whose measurements answer a statement (after ``statement_answers`` found it answerable)."""
        return sources(self.members_of(statement))

    def left_out_of(self, statement: int) -> list[KeptMeasurement]:
        """The kept measurements the work bound left out of a statement's pools."""
        compiled = self.compiled.statements[statement]
        group = self.compiled.groups[compiled.group]
        keys = {(compiled.group, self.unit_key(compiled.group, group.blocks[p].data)[0])
                for output in compiled.aggregates for p in output.blocks}
        return [m for key in sorted(keys) for m in self.left_out.get(key, [])]


def _is_kept(members: Sequence[KeptMeasurement]) -> bool:
    """Whether measurements are all of kept releases (a planned one's values and variance are not final)."""
    return all(m.release != NEW_RELEASE and m.release != 0 for m in members)


def answer_all(reuse: Reuse, answers: AnswerSet, statements: Iterable[int], own: int | None = None,
               groups: Mapping[tuple[int, int], int] | None = None,
               unkept: Iterable[int] = ()) -> tuple[AnswerSet, dict[int, Sources]]:
    """``answers`` with each listed statement's blocks replaced by their GLS answers where kept
    measurements determine them; also which earlier releases answered each statement (release
    ``own``, the batch's, is not listed). A statement whose pools hold only its own group's
    measurements of release ``own`` (``groups``: each of them by (release, index), its group) keeps
    its answers as they are: GLS over them alone is the route's own answer, but for float rounding.
    So does a statement of a group in ``unkept`` (some of its measurements in release ``own`` are
    not kept, so a pool would not hold them)."""
    found = dict(answers)
    used: dict[int, Sources] = {}
    mine_of, skipped = groups or {}, set(unkept)
    for statement in statements:
        compiled = reuse.compiled.statements[statement]
        group, blocks = compiled.group, reuse.compiled.groups[compiled.group].blocks
        vectors = {blocks[p].data for output in compiled.aggregates for p in output.blocks}
        if group in skipped or all(m.release == own and mine_of.get(m.identity) == group
                                   for v in vectors for m in reuse.joining(group, v)):
            continue  # nothing but its own group's measurements could answer it: no pool is built
        mine = reuse.statement_answers(statement)
        if mine is None:
            continue
        members = reuse.members_of(statement)
        if all(m.release == own and mine_of.get(m.identity) == group for m in members):
            continue
        found.update(mine)
        releases = sources(members)
        if set(releases.own) - {own} or releases.shared:
            used[statement] = releases
    return AnswerSet(found), used


def measured_keys(measured: Sequence[MeasuredVector]) -> dict[tuple[int, DataVector], tuple[str, float]]:
    """Each measured vector's key and unit, from the bounds and quantum it was measured with."""
    return {(m.group, m.vector): (vector_key(m.vector, m.bounds, m.quantum), m.quantum) for m in measured}


def planned_answers(compiled: CompiledBatch, measurements: Sequence[PlannedVector],
                    kept: Sequence[KeptMeasurement], alone: Mapping[AnswerKey, mechanism.Answers],
                    cache: KeptInformation | None = None) -> dict[AnswerKey, mechanism.Answers]:
    """Each block's variances (and covariances) as :func:`keep_and_answer` will report them: GLS over
    the planned measurements that will be kept and the ``kept`` ones (none: the batch's own alone).
    No data: the new measurements' strategies and calibrated noise variances are public, the values
    are zeros. ``alone``: the blocks under the plan by itself, kept where no pool applies or only the
    block's own group's measurements would answer it. ``cache``: a store's information of its kept
    measurements."""
    if not_kept_reason(compiled.table) is not None:
        return dict(alone)
    table = compiled.table
    hypothetical: list[KeptMeasurement] = []
    contents: dict[tuple[int, int], Hashable] = {}
    groups: dict[tuple[int, int], int] = {}
    unkept: set[int] = set()
    keys = Reuse(compiled=compiled, kept=())
    for m in measurements:
        group = compiled.groups[m.group]
        if m.share == 0:
            continue
        calibration = m.calibration()
        if _why_not_kept(group.cells, calibration.variance, calibration.strategy) is not None:
            unkept.add(m.group)
            continue
        vector, axes = keys.unit_key(m.group, m.vector)[0], group_axes(group, table)
        groups[(NEW_RELEASE, len(hypothetical))] = m.group
        contents[(NEW_RELEASE, len(hypothetical))] = (vector, cells_key(axes), calibration.variance,
                                                      json.dumps(to_recipe(calibration.strategy), sort_keys=True))
        hypothetical.append(KeptMeasurement(
            table=table.name, vector=vector, axes=axes, strategy=calibration.strategy,
            y=np.zeros(calibration.strategy.shape[0]), noise_variance=calibration.variance, release=NEW_RELEASE,
            index=len(hypothetical)))
    if not hypothetical and not kept:
        return dict(alone)
    reuse = Reuse(compiled=compiled, kept=[*kept, *hypothetical], first=NEW_RELEASE,
                  cache=cache if cache is not None else KeptInformation(), planned=contents)
    return dict(answer_all(reuse, AnswerSet(alone), range(len(compiled.statements)), NEW_RELEASE, groups,
                           unkept)[0])


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
                    combine: bool = True) -> tuple[AnswerSet, dict[int, Sources]]:
    """Keep a charged release's measurements (with why the others are not kept: ``dpsql budget
    show`` lists both), then answer every statement by GLS over every kept measurement that informs
    it: with ``combine``, those of every kept release; without, this release's alone (each
    statement then also uses the batch's measurements of the other statement groups, never an
    earlier release's)."""
    kept, skipped = kept_measurements(compiled, measured)
    own = store.keep([m for _, m in kept], [*summary([m for _, m in kept]),
                                             *(f"not kept for reuse: {why}" for _, why in skipped)], budget) \
        if kept or skipped else None
    if own is None or not_kept_reason(compiled.table) is not None:
        return answers, {}
    pooled = store.kept() if combine else [m.with_release(own, index) for index, (_, m) in enumerate(kept)]
    if not pooled:
        return answers, {}
    groups = {(own, index): group for index, (group, _) in enumerate(kept)}
    reuse = Reuse(compiled=compiled, kept=pooled, keys=measured_keys(measured), first=own, cache=store.information)
    return answer_all(reuse, answers, range(len(compiled.statements)), own, groups, {g for g, _ in skipped})


def reuse_entry(releases: Sources | None) -> dict[str, object]:
    """A statement's ``reuse`` metadata: the releases whose measurements answered it (another
    analyst's, shared by the data owner, only counted)."""
    if not releases:
        return {}
    entry: dict[str, object] = {"answered_by_releases": list(releases.own),
                                "method": "generalized least squares over every kept measurement of its cells"}
    if releases.shared:
        entry["shared_releases"] = releases.shared
    return {"reuse": entry}
