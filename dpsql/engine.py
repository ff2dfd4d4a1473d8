"""One batch, end to end: parse, compile, plan, cost, charge, scan, measure, package.

Privacy:
    Each data vector the batch needs (cell counts; per column, non-NULL counts and clamped sums)
    is measured once with the strategy its plan chose. A privacy unit adds or removes at most
    k = max_rows rows, changing a count vector by at most k in L1 (and L2) norm and a sum vector
    by at most k·B, B = max(|lower|, |upper|) / quantum in the sum's integer units; so measurement
    j runs at ε_j/(k·B_j) (Laplace) or ρ_j/(k·B_j)² (Gaussian) of the strategy's own sensitivity,
    and the shares add up to the batch's ε (sequential composition) or ρ (zCDP composition).
    A sum vector whose column is also an axis of its group may instead be measured with per-cell
    bounds b_j ≤ B (a row in cell j moves its sum by at most b_j, from the schema's cell ranges):
    sensitivity k·max_j b_j‖a_j‖ (``mechanism.calibrate(cell_bounds=...)``, :func:`_cell_bounds`).
    Everything after the measurements is post-processing. Nothing is read from the data before
    the cost is checked and charged, and the cells come from the schema only.

Truncation: a SUM/AVG measure declared with ``truncate`` first has its threshold θ chosen with
    a share of the batch's budget (``dpsql.thresholds``, pure ε_sel-DP, or ρ_sel = ε_sel²/2), and
    its sums are then measured clamped at ±θ with B = θ/quantum; the measurements split the rest.
    The whole batch cost is charged before the first scan.

Truncation-aware answering (TaMM, seed 003 Table 1): a statement group with SUM/AVG on a measure
column is also compiled with that column read as value cells (``dpsql.sql.compile.ValueCells``):
COUNT, SUM and AVG then share one count vector of sensitivity k, measured once with the
strategy optimized for the weighted workload W·T. The separate measurements (counts, and sums
clamped at ±θ with sensitivity k·θ: TiMM) are the alternative; each group keeps whichever has
the lower expected error, scored with sums in units of their bound as the budget split scores
them. Value cells are used only where exact (one value per cell) unless the column declares
``value_cells = "rounded"``: then each value is rounded to its cell's midpoint, the score adds the
squared bias bound, and EXPLAIN and the metadata (``bias_bound``) report the most a row moves.
For a truncated column the choice needs θ, so it is made after θ is released (a function of
public information and θ only), scoring the value-cell form with the standard strategies and
the workload itself (no time-limited optimization, which would delay every release with a new θ).

Routes: a zCDP batch of COUNT(*) statements is also planned as one ResidualPlanner release over
all its marginals (``dpsql.marginal_batch``, ρ-zCDP per privacy unit, measured at ρ/k²); the
route with the lower batch objective answers it.

Objective (``dpsql.weights``): every decision above (strategies, split, value cells or apart,
partition, route) minimises Σ_s w_s·mean_{answers of s}(Var / baseline), each statement's error
relative to answering it alone at ε/N (ρ/N), with weights w_s (``weights=``, default 1). The
guard then checks every statement against its baseline (``_guard``) and says which stay worse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql import blas, marginal_batch, mechanism, plan_cache, planner, thresholds
from dpsql import postprocess as postprocessing
from dpsql import weights as weighting
from dpsql.accounting import Budget, PrivacyCost
from dpsql.backends.duckdb import CellData, DuckDBBackend
from dpsql.accuracy import check_support, unit_noise_variance
from dpsql.errors import (
    DomainTooLargeError,
    PrivacyParameterError,
    ProgrammingError,
    ShapeError,
    UnsupportedStrategyError,
)
from dpsql.ledger import LedgerBudget
from dpsql.linalg import pinv_gram, quadratic_diag, trace_of_product
from dpsql.noise import RandomSource
from dpsql.results import statement_tables
from dpsql.schema import Column, Ordered, Schema, Table, measure_quantum
from dpsql.sql import ir
from dpsql.sql.compile import (
    MERGE_CELLS,
    WEIGHT_BITS,
    Block,
    CompiledBatch,
    CompiledGroup,
    CompiledStatement,
    ValueCells,
    batch_cell_totals,
    batch_table,
    column_set,
    compile_batch,
    compile_group,
    group_cells,
    initial_partition,
    value_cells_problem,
)
from dpsql.sql.parse import parse_batch
from dpsql.workloads import Explicit, Identity, Kron, VStack, Workload, scale_columns

DataKind = tuple[str, str | None]
CellBounds = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """How one data vector of one statement group is measured: plan, budget share, per-row scale."""

    group: int
    kind: DataKind
    plan: planner.Plan
    share: float      # this measurement's ε or ρ
    row_scale: int    # k·B: the most one privacy unit moves one cell of this vector
    quantum: float    # value of one integer unit (1 for counts)
    block_totals: tuple[float, ...] = ()   # t_b: the chosen strategy's unit error summed over each block of this vector
    block_weights: tuple[float, ...] = ()  # c_b: each block's weight in the batch objective (dpsql.weights)
    cell_bounds: CellBounds | None = None  # k·b_j per cell (Kronecker vectors): plan is on y = x/b (_cell_bounds)

    @property
    def weighted(self) -> bool:
        """Whether the plan was scored on a workload with unequal block weights (its candidates'
        scores are then the weighted objective, not the answers' total error)."""
        return len(set(self.block_weights)) > 1

    @property
    def objective(self) -> float:
        """Σ_b c_b·t_b: this vector's unit error in the batch objective (what the split weighs)."""
        return _objective(self.plan, self.block_weights, self.block_totals)

    @property
    def noise_scale(self) -> float:
        """Variance of one unit error at this share: (k·B/ε)² (Laplace) or (k·B)²/(2ρ) (Gaussian)."""
        if self.share == 0:
            return 0.0
        return (self.row_scale / self.share) ** 2 if self.plan.noise == "laplace" else self.row_scale**2 / (2 * self.share)

    def expected_rmse(self, candidate: str) -> float:
        """RMSE per query of a candidate strategy at this measurement's budget, in data units."""
        return math.sqrt(self.expected_total(candidate) / self.plan.queries)

    def expected_total(self, candidate: str) -> float:
        """Expected total squared error of a candidate strategy's answers, in data units squared.

        Exact for the chosen strategy; for another candidate of a weighted plan, its weighted
        score scaled by the chosen strategy's ratio of total error to score."""
        unit_error = self.plan.candidates[candidate]  # at ε = 1 or ρ = 1/2, one unit moving one count
        if self.block_totals and self.plan.expected_error > 0:
            unit_error *= sum(self.block_totals) / self.plan.expected_error
        if self.share == 0:  # an identically zero workload: answered exactly, nothing measured
            return 0.0 if unit_error == 0 else math.inf
        return unit_error * self.noise_scale * self.quantum**2


def _objective(plan: planner.Plan, weights: Sequence[float], totals: Sequence[float]) -> float:
    """Σ_b c_b·t_b over a data vector's blocks (the plan's own score when no block totals are known)."""
    if not totals:
        return plan.expected_error
    return float(sum(c * t for c, t in zip(weights, totals)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """Everything decided before the data is touched.

    ``compiled`` and ``measurements`` are the standard route: statement groups, each data vector
    measured with its planner's strategy. ``residual`` is ResidualPlanner's plan for the whole
    batch when it applies (else ``residual_note`` says why not); it answers the batch when
    ``use_residual``, i.e. when its expected total squared error is the lower one. When
    ResidualPlanner is certified optimal (``ResidualPlan.optimal``) and the batch spans several
    column sets, the standard route is not planned at all (``measurements`` is empty) and
    ``compiled`` is ResidualPlanner's.
    """

    compiled: CompiledBatch
    cost: PrivacyCost
    measurements: tuple[Measurement, ...]
    residual: marginal_batch.ResidualPlan | None = None
    residual_note: str | None = None
    thresholds: tuple[thresholds.ThresholdPlan, ...] = ()
    batch: ir.Batch | None = None
    separate: CompiledBatch | None = None  # the statement groups before any was read as value cells
    answering_notes: tuple[tuple[int, str], ...] = ()  # (group, note): value cells (TaMM) or measured apart, and why
    weights: tuple[float, ...] = ()  # each statement's weight in the objective as planned (the guard may have raised some)
    guard_notes: tuple[tuple[int, str], ...] = ()  # (statement, note): expected error still above answering it alone
    decided: dict[tuple[tuple[str, float], ...], tuple[CompiledBatch, tuple[Measurement, ...], list[tuple[int, str]]]] = field(
        default_factory=dict, compare=False, repr=False)  # _final_answering by released θs (the SVT grid repeats them)

    @property
    def measures_nothing(self) -> bool:
        """Whether every statement is identically zero (its WHERE never TRUE): answered with exact
        zeros, no data read and nothing charged."""
        return (not self.use_residual and not self.thresholds and bool(self.measurements)
                and all(m.share == 0 for m in self.measurements))

    @property
    def standard_total(self) -> float:
        """Expected total squared error of the standard route's answers."""
        return sum(m.expected_total(m.plan.name) for m in self.measurements)

    @property
    def standard_objective(self) -> float:
        """The standard route's batch objective (``dpsql.weights``): Σ_K Σ_b c_b·t_b·(noise variance
        of one unit of measurement K, in units of its per-unit bound k·B)."""
        return sum(m.objective * m.noise_scale / m.row_scale**2 for m in self.measurements)

    @property
    def use_residual(self) -> bool:
        """Whether ResidualPlanner answers: it has the lower batch objective (both routes weigh
        every statement's answers by the same c_b; ResidualPlanner's blocks are COUNT(*)s)."""
        if self.residual is None:
            return False
        return not self.measurements or self.residual.objective < self.standard_objective * (1 - 1e-9)

    @property
    def answering(self) -> CompiledBatch:
        """The compiled batch of the route that answers."""
        return self.residual.compiled if self.use_residual else self.compiled  # type: ignore[union-attr]


#: How many candidate statement groups the partition search may plan before it stops merging.
MAX_GROUP_EVALUATIONS = 60


@blas.single_threaded()
def prepare(text: str, schema: Schema, cost: PrivacyCost, parameters: Sequence[object] | None = None,
            progress: planner.Progress | None = None, *, plan_all_routes: bool = False,
            weights: Sequence[float] | None = None) -> Prepared:
    """Parse, compile, plan every data vector and split the batch's budget — no data read.

    ``progress`` hears about each strategy that has to be optimized (seconds, not milliseconds).
    ``plan_all_routes`` plans the statement groups even when ResidualPlanner is certified optimal
    (to compare the routes; the choice is the same). ``weights`` (one positive number per
    statement, in statement order; default all 1) weigh each statement's errors, relative to
    answering it alone, in the objective every planning decision minimises (``dpsql.weights``).
    After planning, a statement still expected to do worse than answering it alone has its
    weight raised and the budget split again (GUARD_ROUNDS times at most), then the groups are
    planned again with the raised weights (GUARD_REPLANS times at most, kept only when fewer
    statements lose); if it stays worse, ``guard_notes`` says so (EXPLAIN and the statement's
    result metadata show it).
    """
    batch = parse_batch(text, parameters)
    statement_weights = statement_weights_of(weights, len(batch.statements))
    noise: planner.Noise = "laplace" if cost.family == "epsilon" else "gaussian"
    table = batch_table(batch, schema)
    weighing = _Weighing(weights=statement_weights, noise=noise)
    route = marginal_batch.plan(batch, schema, cost, statement_weights)
    if (isinstance(route, marginal_batch.ResidualPlan) and route.optimal and not plan_all_routes
            and len(initial_partition(batch, table)) > 1):
        return Prepared(compiled=route.compiled, cost=cost, measurements=(), residual=route, weights=statement_weights,
                        guard_notes=tuple(_guard_notes(statement_errors(route.compiled, _residual_sums(route), cost), 0)))
    prepared, raised = _plan_groups(batch, schema, cost, weighing, progress)
    for _ in range(GUARD_REPLANS):
        if not prepared.guard_notes:
            break
        again, raised = _plan_groups(batch, schema, cost, raised, progress)
        if _standing(again) >= _standing(prepared):
            break
        prepared = again
    prepared = replace(prepared, residual=None if isinstance(route, str) else route,
                       residual_note=route if isinstance(route, str) else None)
    if prepared.use_residual:
        assert prepared.residual is not None
        return replace(prepared, weights=statement_weights, guard_notes=tuple(_guard_notes(statement_errors(
            prepared.residual.compiled, _residual_sums(prepared.residual), cost), 0)))
    return prepared


#: Times the statement groups may be planned again with the guard's raised weights (each is a full
#: planning pass: a count of work, not time).
GUARD_REPLANS = 2


def _standing(prepared: Prepared) -> tuple[int, float]:
    """(statements worse than alone, worst ratio): the guard's order of plans, lower is better."""
    errors = statement_errors(prepared.compiled, _measured_sums(prepared.compiled, prepared.measurements), prepared.cost)
    ratios = [e.ratio for e in errors]
    return len(weighting.worse_than_alone(ratios)), max(ratios, default=0.0)


def _plan_groups(batch: ir.Batch, schema: Schema, cost: PrivacyCost, weighing: _Weighing,
                 progress: planner.Progress | None) -> tuple[Prepared, _Weighing]:
    """The standard route under ``weighing``: statement groups, value cells or apart, the split and
    the guard's re-splits. Also returns the guard's raised weights, to plan again with."""
    noise = weighing.noise
    table = batch_table(batch, schema)
    separate = compile_batch(batch, schema, _choose_partition(batch, table, noise, weighing))
    measured = [separate.table.columns[str(kind[1])] for g in separate.groups for kind in g.data_kinds() if kind[0] == "sum"]
    selections, selection_share = thresholds.plans(list(dict.fromkeys(measured)), family=cost.family, total=cost.value)
    bounds = {c.name: ValueCells(low=c.measure_bounds[0], high=c.measure_bounds[1])  # type: ignore[index]
              for c in measured if c.truncation is None}
    budget = cost.value * (1 - selection_share)
    choice = _answering_groups(batch, separate, separate.table.columns, bounds, noise=noise, budget=budget, progress=progress,
                               weighing=weighing)
    pending = [(g, f"SUM({kind[1]}) is read as value cells (TaMM) or measured apart (TiMM) once its θ is released; "
                   "the figures below measure it apart at the outer bound")
               for g, group in enumerate(separate.groups) for kind in group.data_kinds()
               if kind[0] == "sum" and kind[1] not in bounds]
    notes = tuple(sorted(choice.notes + pending))
    measurements = _split(choice.drafts, budget, noise)
    measurements, kept, guard, raised = _guard(choice.compiled, measurements, weighing, cost, budget)
    _calibrations(measurements)  # every noise scale is representable: checked before anything is charged
    return Prepared(compiled=choice.compiled, cost=cost, measurements=measurements, thresholds=tuple(selections), batch=batch,
                    separate=separate, answering_notes=notes, weights=kept.weights, guard_notes=tuple(guard)), raised


def statement_weights_of(weights: Sequence[float] | None, statements: int) -> tuple[float, ...]:
    """The statements' weights: one positive finite number per statement (default all 1).

    Raises ProgrammingError naming the problem (nothing is run or charged).
    """
    if weights is None:
        return (1.0,) * statements
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ProgrammingError(f"weights= must be a list of positive numbers, one per statement in statement order; got "
                               f"{type(weights).__name__}. Nothing was run or charged.")
    if len(weights) != statements:
        raise ProgrammingError(f"weights= has {len(weights)} number(s) but the batch has {statements} statement(s); give one "
                               "positive weight per statement, in statement order. Nothing was run or charged.")
    result = []
    for index, value in enumerate(weights):
        number = float(value) if isinstance(value, (int, float, Fraction)) and not isinstance(value, bool) else math.nan
        if not math.isfinite(number) or number <= 0:
            raise ProgrammingError(f"weights[{index}] = {value!r} (statement {index + 1}) is not a positive finite number; "
                                   "each statement's weight must be > 0 (1 is the default). Nothing was run or charged.")
        result.append(number)
    return tuple(result)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Weighing:
    """Each statement's weight w_s, and how it becomes the block weights c_b (``dpsql.weights``)."""

    weights: tuple[float, ...]
    noise: planner.Noise

    def blocks(self, group: CompiledGroup, statements: Sequence[CompiledStatement], members: Sequence[int],
               columns: Mapping[str, Column]) -> list[float]:
        """c_b of each block of ``group``, whose ``statements`` are the batch's ``members``."""
        found = [1.0] * len(group.blocks)
        for member, statement in zip(members, statements):
            positions = [p for output in statement.aggregates for p in output.blocks]
            answers = sum(group.blocks[p].workload.shape[0] for p in positions)
            for p in positions:
                found[p] = weighting.block_weight(self.weights[member], answers, len(positions), self.noise,
                                                  _bound_ratio(group.blocks[p], columns))
        return found


def _row_bound(kind: DataKind, columns: Mapping[str, Column]) -> float:
    """β: the most one row moves one answer of this kind, in data units (B·quantum for sums)."""
    if kind[0] != "sum":
        return 1.0
    quantum, steps = _value_scale(columns[str(kind[1])])
    return quantum * steps


def _bound_ratio(block: Block, columns: Mapping[str, Column]) -> float:
    """ρ_b: the per-row bound the measurement uses for this block (its data vector's β times the
    block's scale) over the bound of answering it alone (β of what the block answers)."""
    return block.scale * _row_bound(block.data, columns) / _row_bound(block.kind, columns)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Draft:
    """A data vector to measure, before the budget split."""

    group: int
    kind: DataKind
    plan: planner.Plan
    row_scale: int
    quantum: float
    block_totals: tuple[float, ...] = ()   # as in Measurement
    block_weights: tuple[float, ...] = ()
    cell_bounds: CellBounds | None = None

    @property
    def objective(self) -> float:
        """Σ_b c_b·t_b (the plan's own score when no block totals are known)."""
        return _objective(self.plan, self.block_weights, self.block_totals)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Answering:
    """Statement groups as answered (some read as value cells), their data vectors, and why."""

    compiled: CompiledBatch
    drafts: list[_Draft]
    notes: list[tuple[int, str]]  # (group index, why it is answered as it is)


#: A group is read as value cells only while it has at most this many cells (planning stays seconds).
VALUE_CELLS_MAX = 4096


def _answering_groups(batch: ir.Batch, separate: CompiledBatch, columns: Mapping[str, Column], bounds: Mapping[str, ValueCells],
                      *, noise: planner.Noise, budget: float, progress: planner.Progress | None,
                      groups: Sequence[int] | None = None, start: CompiledBatch | None = None,
                      known: Mapping[tuple[int, DataKind], planner.Plan] | None = None,
                      weighing: _Weighing | None = None) -> _Answering:
    """Per statement group: separate measurements, or — where ``bounds`` lets a SUM column be read
    as value cells and that lowers the group's error score — one count measurement (TaMM).

    Value cells are used only where they are exact (one clamped value per cell) unless the column
    declares ``value_cells = "rounded"``. The score of a form is its expected total squared error
    at the optimal split of ``budget`` over its measurements, (Σ_k c_k^p)^{1/p}/ε² (Laplace,
    p = 1/3) or /(2ρ) (Gaussian, p = 1/2), in units of one privacy unit's bound (k rows; k·s for
    sums); rounded value cells add their squared bias bound. A SUM over n rows on cells rounding
    by at most h per row is off by at most n·h, and n is private: the score counts one privacy
    unit's rows per answer (bias k·h, i.e. (h/s)² per SUM answer in these units), the one public
    row count, and the results report h as ``bias_bound`` (EXPLAIN shows it). With opted-in
    rounding the analyst accepts the n-fold rest; the full budget (not the group's share) makes
    the variances, and so the pull toward value cells, the smallest they can be.

    ``columns`` are the table's columns as measured (truncated ones narrowed to ±θ); ``groups``
    limits the work to those group indices of ``separate`` (the others keep their form in
    ``start`` and are left out of the result's drafts). ``known`` gives plans made before (by
    group and kind of ``separate``); when given, new plans skip the SVD bound (EXPLAIN is done).
    ``weighing`` gives each statement's weight in the scores (default: all 1).
    """
    table = separate.table
    unit_rows = table.privacy_unit.max_rows if table.privacy_unit.column else 1
    weighing = weighing or _Weighing(weights=(1.0,) * len(separate.statements), noise=noise)
    base = start or separate
    compiled_groups, statements = list(base.groups), list(base.statements)
    drafts: list[_Draft] = []
    notes: list[tuple[int, str]] = []
    for index in range(len(separate.groups)) if groups is None else groups:
        group = separate.groups[index]
        members = [i for i, s in enumerate(separate.statements) if s.group == index]
        chosen = _group_drafts(index, group, columns, unit_rows, noise, progress, known,
                               block_weights=weighing.blocks(group, [separate.statements[m] for m in members], members, columns))
        sums = sorted({str(kind[1]) for kind in group.data_kinds() if kind[0] == "sum"})
        touched = {axis.column.name for axis in group.axes}
        usable = {}
        for name in (n for n in sums if n in bounds):
            problem = value_cells_problem(table.columns[name], name in touched) or _rounding_problem(table.columns[name], bounds[name])
            if problem is None:
                usable[name] = bounds[name]
            else:
                notes.append((index, f"SUM({name}) is measured apart from the counts: {problem}."))
        compiled_groups[index] = group
        for member in members:
            statements[member] = separate.statements[member]
        if usable:
            cells_group, cells_statements = compile_group(batch, table, members, index, usable)
            label = ", ".join(usable)
            if cells_group.cells > VALUE_CELLS_MAX:
                notes.append((index, f"reading {label} as value cells would need {cells_group.cells:,} cells "
                                      f"(limit {VALUE_CELLS_MAX:,}); sums are measured apart."))
            else:
                # quick templates only with several axes (OPT⊗ and OPT₊ would take their full time limit per group)
                # and after θ is released (each θ is a new workload; optimizing would delay every release)
                basis = {} if touched & set(usable) else {"value basis": _value_basis(cells_group, usable)}
                cell_weights = weighing.blocks(cells_group, cells_statements, members, columns)
                alternative = _group_drafts(index, cells_group, columns, unit_rows, noise, progress,
                                            {} if known is not None else None, quick=len(cells_group.axes) > 1 or known is not None,
                                            extra=basis, block_weights=cell_weights)
                apart = _error_score(chosen, noise, budget)
                joint = _error_score(alternative, noise, budget) + _squared_bias_bound(cells_group, cell_weights)
                rounding = "; ".join(_rounding_note(name, cells, table.columns[name]) for name, cells in usable.items())
                use = joint < apart * (1 - 1e-9)
                verdict = "answered from one count vector (TaMM)" if use else "measured apart (TiMM)"
                notes.append((index, f"{verdict} — error score with {label} as value cells {joint:.4g} "
                                      f"({cells_group.cells:,} cells; {rounding}) against separate count and sum measurements {apart:.4g}."))
                if use:
                    chosen = alternative
                    compiled_groups[index] = cells_group
                    for member, statement in zip(members, cells_statements):
                        statements[member] = statement
        drafts.extend(chosen)
    compiled = CompiledBatch(table=table, groups=tuple(compiled_groups), statements=tuple(statements))
    return _Answering(compiled=compiled, drafts=drafts, notes=notes)


def _rounding_problem(column: Column, cells: ValueCells) -> str | None:
    """Why rounded value cells are not allowed for ``column`` (None: exact, or opted in)."""
    most = cells.bias(column.domain)  # type: ignore[arg-type]
    if most == 0 or column.rounded_value_cells:
        return None
    return (f"value cells would round each value of {column.name} to its cell's midpoint (up to ±{most:.6g} per row, a bias "
            f'outside the standard errors); declare {column.key}.value_cells = "rounded" to allow it')


def _error_score(drafts: Sequence[_Draft], noise: planner.Noise, budget: float) -> float:
    """Batch objective of measuring ``drafts`` with all of ``budget`` split optimally:
    (Σ c_k^{1/3})³/ε² (Laplace) or (Σ √c_k)²/(2ρ) (Gaussian), c_k the weighted unit errors
    Σ_b c_b·t_b (``dpsql.weights``)."""
    power = 1 / 3 if noise == "laplace" else 1 / 2
    total = sum(d.objective ** power for d in drafts) ** (1 / power)
    return total / budget**2 if noise == "laplace" else total / (2 * budget)


def _squared_bias_bound(group: CompiledGroup, weights: Sequence[float] | None = None) -> float:
    """Σ over a group's value-cell SUM answers of c_b·(h/s)²: one privacy unit's rounding bias in
    units of its bound, weighted as :func:`_error_score` weighs the variances; 0 on exact cells."""
    c = weights if weights is not None else [1.0] * len(group.blocks)
    return float(sum(w * block.workload.shape[0] * (block.bias / block.scale) ** 2
                     for w, block in zip(c, group.blocks) if block.bias))


def bias_bounds(compiled: CompiledBatch) -> dict[str, dict[str, object]]:
    """Per column read as rounded value cells: ``bias_bound`` of the result metadata."""
    found: dict[str, float] = {}
    for group in compiled.groups:
        for block in group.blocks:
            if block.bias:
                found[str(block.kind[1])] = max(found.get(str(block.kind[1]), 0.0), block.bias)
    return {name: {"sum_per_row": h, "avg": h,
                   "note": f"value cells round each value to its cell's midpoint: a SUM over n rows is off by at most "
                           f"n × {h:.6g}, an AVG by at most {h:.6g}; this bias is not in the standard errors"}
            for name, h in found.items()}


def _value_basis(group: CompiledGroup, cells: Mapping[str, ValueCells]) -> Workload:
    """A strategy for value cells that no statement filters or groups on: identity on the other
    axes ⊗, on each value axis, the rows [outside; non-NULL; r/s] (no outside row on an axis
    without an outside cell: ``out_of_domain = "exclude"``).

    COUNT(*), COUNT(col) and SUM(col) are sums of these rows, and one row moves one count and
    one r/s ≤ 1: L1 sensitivity ≤ 2 (L2 ≤ √2), against the budget of three separate measurements.
    The rows are scaled by 2^WEIGHT_BITS, which makes them integers holding the weights exactly.
    """
    factors: list[Workload] = []
    for axis in group.axes:
        if axis.column.name in cells:
            outside = np.zeros(axis.size)
            outside[-1] = 1.0 if axis.has_outside else 0.0
            rows = np.vstack([outside, 1.0 - outside, cells[axis.column.name].weights(axis)])[0 if axis.has_outside else 1:]
            rows = rows * 2**WEIGHT_BITS
            factors.append(Explicit(rows))
        else:
            factors.append(Identity(axis.size))
    return Kron(factors)


def _rounding_note(name: str, cells: ValueCells, column: Column) -> str:
    """How value cells round the column's values (EXPLAIN and metadata)."""
    most = cells.rounding(column.domain)  # type: ignore[arg-type]
    if cells.bias(column.domain) == 0:  # type: ignore[arg-type]  # only the weights' binary rounding
        return f"{name} exact (one value per cell, weights to 2^-{WEIGHT_BITS})"
    return (f"{name} rounded to cell midpoints, at most ±{most:.6g} per row (bias_bound: SUM ±{most:.6g} × rows summed, "
            f"AVG ±{most:.6g}; not in the standard errors)")


def _group_drafts(index: int, group: CompiledGroup, columns: Mapping[str, Column], unit_rows: int,
                  noise: planner.Noise, progress: planner.Progress | None,
                  known: Mapping[tuple[int, DataKind], planner.Plan] | None = None, quick: bool = False,
                  extra: Mapping[str, Workload] | None = None, block_weights: Sequence[float] | None = None) -> list[_Draft]:
    """Plan each data vector of one group (``known``: plans already made, by (group, kind);
    ``quick``: only the planner's quick templates; ``extra``: more candidate strategies for its counts;
    ``block_weights``: c_b of each block, default 1). The planner sees the workload with block b's
    rows scaled by √(c_b / max c) (unchanged when the weights are equal), so it minimises Σ_b c_b·t_b."""
    sizes = [axis.size for axis in group.axes]
    ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
    weights = list(block_weights) if block_weights is not None else [1.0] * len(group.blocks)
    drafts = []
    for kind in group.data_kinds():
        positions = [p for p, block in enumerate(group.blocks) if block.data == kind]
        rows = [group.blocks[p].workload.shape[0] for p in positions]
        workload = group.workload(kind)
        scales = weighting.normalized([weights[p] for p in positions])[1]
        planning = weighting.scaled_stack(workload, rows, scales)
        plan = (known or {}).get((index, kind)) or planner.plan(planning, noise=noise, sizes=sizes, ordered=ordered,
                                                                 quick=quick, progress=progress,
                                                                 extra=extra if kind == ("count", None) else None)
        quantum, bound = _value_scale(columns[str(kind[1])]) if kind[0] == "sum" else (1.0, 1)
        draft = _Draft(group=index, kind=kind, plan=plan, row_scale=unit_rows * bound, quantum=quantum,
                       block_totals=_block_totals(workload, rows, plan), block_weights=tuple(weights[p] for p in positions))
        draft = _cell_bounded(draft, group, columns, unit_rows, noise, progress, rows=rows, scales=scales,
                              quick=quick or known is not None) if kind[0] == "sum" else draft
        drafts.append(_supported(draft, workload, rows, sizes, ordered))
    return drafts


def _supported(draft: _Draft, workload: Workload, rows: Sequence[int], sizes: Sequence[int],
               ordered: Sequence[bool]) -> _Draft:
    """``draft``, or — when its strategy as measured (rounded to integers) does not support the
    workload its answers come from — the same draft with its best standard candidate (full column
    rank, so it supports every workload). A cell-bounded draft was checked by :func:`_cell_bounded`.

    ``mechanism.answer`` makes exactly this check after the measurement; making it here, before
    anything is charged, means it can never fail then.
    """
    if draft.plan.expected_error == 0 or draft.cell_bounds is not None:
        return draft
    try:
        check_support(workload, mechanism.rounded_strategy(draft.plan.strategy))
        return draft
    except UnsupportedStrategyError as err:
        standard = planner.candidates(sizes, ordered)
        name = min((n for n in standard if n in draft.plan.candidates), key=draft.plan.candidates.__getitem__)
        note = f"{draft.plan.name} was replaced by {name}: rounded to integers it does not support every answer ({err})"
        plan = replace(draft.plan, strategy=standard[name], name=name, notes=draft.plan.notes + (note,))
        return replace(draft, plan=plan, block_totals=_block_totals(workload, rows, plan))


def _block_totals(workload: Workload, rows: Sequence[int], plan: planner.Plan) -> tuple[float, ...]:
    """t_b = v·trace(G_b (AᵀA)⁺): the unit error of the plan's strategy summed over each block of
    the (unweighted) workload, blocks in order (a dense stack's rows split by ``rows``); cached by
    the workload's and the strategy's structure (``dpsql.plan_cache``)."""
    if plan.expected_error == 0:
        return (0.0,) * len(rows)
    strategy = plan.strategy
    key = plan_cache.decision_key(workload, noise=plan.noise, options=["block totals", *map(str, rows)],
                                  extra={"strategy": strategy})
    known = plan_cache.load_numbers(key, len(rows))
    if known is not None:
        return known
    M, v = pinv_gram(strategy), unit_noise_variance(strategy, plan.noise)
    if isinstance(workload, VStack):
        totals = tuple(v * trace_of_product(block.gram(), M) for block in workload.blocks)
    else:
        diagonal = quadratic_diag(workload, M)
        ends = np.cumsum(rows)
        totals = tuple(v * float(diagonal[end - r:end].sum()) for r, end in zip(rows, ends))
    plan_cache.store_numbers(key, totals)
    return totals
def _cell_bounded(draft: _Draft, group: CompiledGroup, columns: Mapping[str, Column], unit_rows: int,
                  noise: planner.Noise, progress: planner.Progress | None, *, rows: Sequence[int], scales: Sequence[float],
                  quick: bool) -> _Draft:
    """The SUM draft measured with per-cell bounds when its column is an axis of the group and that
    lowers the expected error; else ``draft`` (one global bound B).

    With b_j the most one row moves cell j's sum (:func:`_cell_bounds`), the plan is made for
    W_y = W·diag(b)/B over y = x/b, where a row moves one cell of y by at most 1 (like a count):
    its scores are in units of B, as the global plan's, so the budget split and the TaMM choice
    compare them directly. The planner sees W_y's blocks scaled by ``scales`` (the statements'
    weights, as for the global plan) and the two plans are compared on the batch objective. The mechanism measures the strategy on x with sensitivity
    k·max_j b_j‖a_j‖ (``mechanism.cell_bounded_strategy``).
    """
    column = columns[str(draft.kind[1])]
    bounds = _cell_bounds(group, column, draft.quantum)
    if bounds is None:
        return draft
    top = draft.row_scale // unit_rows
    sizes = [axis.size for axis in group.axes]
    ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
    try:
        position = next(i for i, vector in enumerate(bounds) if len(set(vector)) > 1)  # the summed column's axis
        workload = scale_columns(group.workload(draft.kind), tuple(np.asarray(v, dtype=np.float64) / (top if i == position else 1)
                                                                   for i, v in enumerate(bounds)))
        plan = planner.plan(weighting.scaled_stack(workload, rows, scales), noise=noise, sizes=sizes, ordered=ordered,
                            quick=quick, progress=progress)
        scaled = tuple(tuple(unit_rows * v for v in vector) if i == position else vector for i, vector in enumerate(bounds))
        measured = mechanism.cell_bounded_strategy(plan.strategy, scaled)
        check_support(group.workload(draft.kind), measured)  # as mechanism.answer will, after the charge
    except (DomainTooLargeError, ShapeError, UnsupportedStrategyError):
        return draft
    if not isinstance(measured, Kron) and measured.shape[1] > mechanism.DENSE_SOLVE_LIMIT:
        return draft  # scaled columns lose a stack's marginal structure: answering would need LSMR over many cells
    bounded = replace(draft, plan=plan, block_totals=_block_totals(workload, rows, plan), cell_bounds=scaled)
    if not bounded.objective < draft.objective * (1 - 1e-9):
        return draft
    cells = sorted(set(max(bounds, key=lambda vector: max(vector) - min(vector))))
    note = (f"cell-bounded sum({column.name}): per-cell bounds {cells[0] * draft.quantum:,.6g}…{cells[-1] * draft.quantum:,.6g} "
            f"(one row moves cell j's sum by at most b_j, not the global {top * draft.quantum:,.6g}); expected squared "
            f"error {bounded.objective / draft.objective:.3g}× that of the global-bound plan ({draft.plan.name})")
    return replace(bounded, plan=replace(plan, notes=plan.notes + (note,)))


#: Per-cell bounds are raised to at least B / 2^CELL_BOUND_RANGE (a larger bound is still a bound):
#: cells that small add nothing to the error, and the strategy's integer entries stay moderate.
CELL_BOUND_RANGE = 16


def _cell_bounds(group: CompiledGroup, column: Column, quantum: float) -> tuple[tuple[int, ...], ...] | None:
    """Per axis of ``group``, the most one row moves a cell's clamped sum of ``column`` (in quanta;
    all ones but on the column's own axis), or None when the column is not an axis.

    A row in batch cell j of the column's axis has a value in [b_first, b_last+1] (its base cells'
    boundaries; the edge cells reach to ±∞ when the domain clamps out-of-range values into them),
    which SUM clamps to the measure bounds [lo, hi] and rounds to quanta: it adds at most
    b_j = ⌈max(|clamp(b_first)|, |clamp(b_last+1)|)/q⌉. The outside cell holds NULL and NaN (adding
    0) and, unless the domain clamps or the table excludes them, out-of-domain values (B). Every
    b_j is at least 1 and B/2^CELL_BOUND_RANGE; all come from the schema only.
    """
    position = next((i for i, axis in enumerate(group.axes) if axis.column.name == column.name), None)
    if position is None or column.measure_bounds is None or not isinstance(group.axes[position].column.domain, Ordered):
        return None
    axis = group.axes[position]
    domain = group.axes[position].column.domain
    assert isinstance(domain, Ordered)
    low, high = column.measure_bounds
    top = max(1, math.ceil(max(abs(low), abs(high)) / quantum))
    floor = max(1, math.ceil(top / 2**CELL_BOUND_RANGE))
    edges = np.asarray(domain.boundaries, dtype=np.float64)
    cells = axis.cell_of_base[:-1]
    bounds = np.full(axis.size, floor, dtype=np.int64)
    for j in np.unique(cells):
        bases = np.flatnonzero(cells == j)
        left = -math.inf if domain.clamp and bases[0] == 0 else edges[bases[0]]
        right = math.inf if domain.clamp and bases[-1] == domain.size - 1 else edges[bases[-1] + 1]
        most = max(abs(min(max(v, low), high)) for v in (left, right))
        bounds[j] = max(floor, min(top, math.ceil(most / quantum)))
    if axis.has_outside:
        bounds[-1] = floor if domain.clamp or column.outside_excluded else top
    if int(bounds.max()) == int(bounds.min()):
        return None  # nothing to gain over the global bound
    return tuple(tuple(int(b) for b in bounds) if i == position else (1,) * a.size for i, a in enumerate(group.axes))


def _split(drafts: Sequence[_Draft], total: float, noise: planner.Noise) -> tuple[Measurement, ...]:
    """The budget split over the drafts (``planner.split_budget``). A data vector whose workload
    is identically zero (every statement reading it is never TRUE; expected error exactly 0) gets
    share 0: its answers are exact zeros and it is never measured."""
    shares = planner.split_budget([d.objective for d in drafts], total, noise=noise)
    return tuple(Measurement(group=d.group, kind=d.kind, plan=d.plan, share=share, row_scale=d.row_scale, quantum=d.quantum,
                             block_totals=d.block_totals, block_weights=d.block_weights, cell_bounds=d.cell_bounds)
                 for d, share in zip(drafts, shares))


#: Rounds of the guard: each raises the weight of every statement expected to do worse than
#: answering it alone by that ratio squared and splits the budget again (a count of work, not time).
GUARD_ROUNDS = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class StatementError:
    """One statement's expected error under the plan against answering it alone (``dpsql.weights``).

    ``parts``: per aggregate input (an AVG has its SUM and its COUNT), (label, expected RMSE per
    answer with the squared bias bound of rounded value cells, RMSE of answering that part alone
    with the Laplace mechanism at ε/(N·n_s) or the Gaussian at ρ/(N·n_s)), in data units.
    ``ratio``: the mean over the statement's answers of (Var + bias²)/baseline; above 1 the
    statement is expected to do worse than answering it alone.
    """

    parts: tuple[tuple[str, float, float], ...]
    ratio: float


def statement_errors(compiled: CompiledBatch, sums: Mapping[tuple[int, int], float], cost: PrivacyCost,
                     columns: Mapping[str, Column] | None = None) -> list[StatementError]:
    """Each statement's :class:`StatementError`. ``sums`` holds Σ (Var + bias²) over each block's
    answers, keyed (group, block); ``columns`` as measured (truncated ones narrowed to ±θ)."""
    noise: planner.Noise = "laplace" if cost.family == "epsilon" else "gaussian"
    columns = columns if columns is not None else compiled.table.columns
    unit_rows = compiled.table.privacy_unit.max_rows if compiled.table.privacy_unit.column else 1
    result = []
    for statement in compiled.statements:
        group = compiled.groups[statement.group]
        labelled = [(output.aggregate.alias + ("" if len(output.blocks) == 1 else (" (SUM)", " (COUNT)")[j]), p)
                    for output in statement.aggregates for j, p in enumerate(output.blocks)]
        parts, relative, answers = [], 0.0, 0
        for label, p in labelled:
            block = group.blocks[p]
            rows = block.workload.shape[0]
            baseline = weighting.baseline_variance(noise, cost.value, len(compiled.statements), len(labelled),
                                                   unit_rows * _row_bound(block.kind, columns))
            total = sums.get((statement.group, p), 0.0)
            parts.append((label, math.sqrt(total / rows), math.sqrt(baseline)))
            relative += total / baseline
            answers += rows
        result.append(StatementError(parts=tuple(parts), ratio=relative / answers))
    return result


def _measured_sums(compiled: CompiledBatch, measurements: Sequence[Measurement]) -> dict[tuple[int, int], float]:
    """Σ (Var + bias²) over each block's answers under the measurements (keyed (group, block)); a
    rounded value-cell SUM answer counts one privacy unit's bias, k·h, as the scores do."""
    unit_rows = compiled.table.privacy_unit.max_rows if compiled.table.privacy_unit.column else 1
    sums = {}
    for m in measurements:
        group = compiled.groups[m.group]
        positions = [p for p, block in enumerate(group.blocks) if block.data == m.kind]
        for p, total in zip(positions, m.block_totals):
            block = group.blocks[p]
            bias = block.workload.shape[0] * (unit_rows * block.bias) ** 2
            sums[m.group, p] = total * m.noise_scale * (m.quantum * block.scale) ** 2 + bias
    return sums


def _residual_sums(route: marginal_batch.ResidualPlan) -> dict[tuple[int, int], float]:
    """Σ Var over each block's answers on the ResidualPlanner route."""
    return {(0, b): float(v.sum()) for b, v in enumerate(route.variances)}


def _vector_weights(compiled: CompiledBatch, m: Measurement | _Draft, weighing: _Weighing,
                    columns: Mapping[str, Column]) -> tuple[float, ...]:
    """c_b of the blocks of one measurement's data vector under ``weighing``."""
    group = compiled.groups[m.group]
    members = [i for i, statement in enumerate(compiled.statements) if statement.group == m.group]
    found = weighing.blocks(group, [compiled.statements[i] for i in members], members, columns)
    return tuple(c for c, block in zip(found, group.blocks) if block.data == m.kind)


def _guard(compiled: CompiledBatch, measurements: tuple[Measurement, ...], weighing: _Weighing, cost: PrivacyCost,
           budget: float) -> tuple[tuple[Measurement, ...], _Weighing, list[tuple[int, str]], _Weighing]:
    """Bring every statement's expected error to at most answering it alone, where a split can.

    Each round raises w_s of every statement with ratio r_s > 1 to w_s·r_s² and splits the budget
    again over the same strategies (GUARD_ROUNDS rounds at most): a measurement's variance falls
    as c^{-2/3} (Laplace, ε_k ∝ c_k^{1/3}) or c^{-1/2} (Gaussian) in its weight, so r² covers
    the ratio when the statement has its measurement to itself; the round with the fewest such
    statements, then the smallest worst ratio, is kept (with its weights), and a note names each
    statement left worse than alone; the weights as last raised are returned too, for planning
    again. Public information only: the plan and the schema.
    """
    columns = compiled.table.columns
    weights = list(weighing.weights)
    best: tuple[tuple[int, float], tuple[Measurement, ...], tuple[float, ...], list[StatementError]] | None = None
    for _ in range(GUARD_ROUNDS + 1):
        errors = statement_errors(compiled, _measured_sums(compiled, measurements), cost)
        ratios = [e.ratio for e in errors]
        losers = weighting.worse_than_alone(ratios)
        key = (len(losers), max(ratios, default=0.0))
        if best is None or key < best[0]:
            best = (key, measurements, tuple(weights), errors)
        if not losers:
            break
        for s in losers:
            weights[s] *= ratios[s] ** 2
        raised = _Weighing(weights=tuple(weights), noise=weighing.noise)
        drafts = [_Draft(group=m.group, kind=m.kind, plan=m.plan, row_scale=m.row_scale, quantum=m.quantum,
                         block_totals=m.block_totals, block_weights=_vector_weights(compiled, m, raised, columns))
                  for m in measurements]
        measurements = _split(drafts, budget, weighing.noise)
    assert best is not None
    _, kept, final, errors = best
    return (kept, _Weighing(weights=final, noise=weighing.noise), _guard_notes(errors, GUARD_ROUNDS),
            _Weighing(weights=tuple(weights), noise=weighing.noise))


def _guard_notes(errors: Sequence[StatementError], rounds: int) -> list[tuple[int, str]]:
    """(statement, note) for each statement expected to do worse than answering it alone."""
    notes = []
    for s in weighting.worse_than_alone([e.ratio for e in errors]):
        figures = "; ".join(f"{label} RMSE {rmse:.4g} against {alone:.4g} alone" for label, rmse, alone in errors[s].parts)
        tried = f" after {rounds} rounds of raising its weight and splitting the budget again" if rounds else ""
        note = (f"expected mean squared error {errors[s].ratio:.4g}× that of answering this statement alone at the "
                f"same share{tried} ({figures}); give it a larger weights= entry, or send it in its own batch.")
        notes.append((s, note))
    return notes


def _calibrations(measurements: Sequence[Measurement]) -> list[mechanism.Calibration | None]:
    """Each measurement's noise (None: share 0, not measured), from public parameters only.

    Raises PrivacyParameterError when a noise scale is not representable (a budget share far too
    small); callers check this before charging.
    """
    return [None if m.share == 0 else _calibration(m) for m in measurements]


def _calibration(m: Measurement) -> mechanism.Calibration:
    strategy, contribution = _measured_strategy(m)
    return mechanism.calibrate(strategy, **contribution, **_budget_argument(m))  # type: ignore[arg-type]


def _measured_strategy(m: Measurement) -> tuple[Workload, dict[str, object]]:
    """(strategy on the data vector, its contribution arguments for ``mechanism.calibrate``/``measure``):
    the plan's strategy with max_contribution = k·B, or — cell-bounded — its substitution onto
    x = diag(b) y with the per-cell bounds k·b_j."""
    if m.cell_bounds is None:
        return m.plan.strategy, {"max_contribution": m.row_scale}
    return mechanism.cell_bounded_strategy(m.plan.strategy, m.cell_bounds), {"max_contribution": 1, "cell_bounds": m.cell_bounds}


def _budget_argument(m: Measurement) -> dict[str, Fraction]:
    """``epsilon=`` or ``rho=`` for ``mechanism.measure``: the share, exactly."""
    return {"epsilon" if m.plan.noise == "laplace" else "rho": Fraction(m.share)}


def _choose_partition(batch: ir.Batch, table: Table, noise: planner.Noise, weighing: _Weighing | None = None) -> list[list[int]]:
    """Groups of statements, merged greedily while the batch's total expected error falls.

    Starts from one group per distinct column set. Merging two groups answers both from one
    measurement over their joint cells; keeping them apart splits the budget. Candidate groups
    are scored with the standard strategies and the quick optimized template (weighted
    marginals), which is what makes merging GROUP BYs over different columns pay off. With the optimal
    split the batch's total error is ∝ (Σ_k c_k^{1/3})³ (Laplace) or (Σ_k √c_k)² (Gaussian) over
    the measurements' weighted unit errors c_k = Σ_b c_b·t_b (``weighing``, ``dpsql.weights``),
    which is the score compared here. The partition found is cached by the statements, their
    weights and the table's declaration (``dpsql.plan_cache``).
    """
    weighing = weighing or _Weighing(weights=(1.0,) * len(batch.statements), noise=noise)
    key = plan_cache.object_key("partition", noise, table, batch.statements, weighing.weights)
    known = plan_cache.load_partition(key, len(batch.statements))
    if known is None:
        known = _search_partition(batch, table, noise, weighing)
        plan_cache.store_partition(key, known)
    return known


def _search_partition(batch: ir.Batch, table: Table, noise: planner.Noise, weighing: _Weighing) -> list[list[int]]:
    """:func:`_choose_partition`'s greedy search."""
    power = 1 / 3 if noise == "laplace" else 1 / 2
    errors: dict[frozenset[int], list[float]] = {}

    def group_errors(members: frozenset[int]) -> list[float]:
        if members not in errors:
            group, statements = compile_group(batch, table, sorted(members))
            sizes = [axis.size for axis in group.axes]
            ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
            weights = weighing.blocks(group, statements, sorted(members), table.columns)
            found = []
            for kind in group.data_kinds():
                positions = [p for p, block in enumerate(group.blocks) if block.data == kind]
                top, scales = weighting.normalized([weights[p] for p in positions])
                W = weighting.scaled_stack(group.workload(kind), [group.blocks[p].workload.shape[0] for p in positions], scales)
                found.append(top * planner.expected_error(W, noise=noise, sizes=sizes, ordered=ordered, quick=True))
            errors[members] = found
        return errors[members]

    def score(groups: list[frozenset[int]]) -> float:
        return float(sum(c**power for g in groups for c in group_errors(g)))

    groups = [frozenset(members) for members in initial_partition(batch, table)]
    if len(groups) == 1:
        return [sorted(groups[0])]
    columns = {g: frozenset().union(*(column_set(batch.statements[i], table) for i in g)) for g in groups}
    current = score(groups)
    while len(groups) > 1 and len(errors) < MAX_GROUP_EVALUATIONS:
        best: tuple[float, int, int] | None = None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                if group_cells(table, columns[groups[i]] | columns[groups[j]]) > MERGE_CELLS or len(errors) >= MAX_GROUP_EVALUATIONS:
                    continue
                merged = [g for k, g in enumerate(groups) if k not in (i, j)] + [groups[i] | groups[j]]
                candidate = score(merged)
                if candidate < current * (1 - 1e-9) and (best is None or candidate < best[0]):
                    best = (candidate, i, j)
        if best is None:
            break
        current, i, j = best
        union = groups[i] | groups[j]
        columns[union] = columns[groups[i]] | columns[groups[j]]
        groups = [g for k, g in enumerate(groups) if k not in (i, j)] + [union]
    return [sorted(g) for g in groups]


def _value_scale(column: Column) -> tuple[float, int]:
    """(quantum, B) of a sum column: sums count in quanta, one row moving a cell by at most B."""
    quantum = measure_quantum(column)
    low, high = column.measure_bounds  # type: ignore[misc]
    return quantum, max(1, math.ceil(max(abs(low), abs(high)) / quantum))


@blas.single_threaded()
def run(prepared: Prepared, *, backend: DuckDBBackend, budget: Budget, rng: RandomSource | None = None,
        progress: Callable[[str], None] | None = None, postprocess: Sequence[str] = ()) -> list[pa.Table]:
    """Charge the batch, scan, measure, package one table per statement.

    The standard route scans once per statement group and measures each data vector; the
    ResidualPlanner route (``prepared.use_residual``) scans once for all marginals.
    ``progress`` receives a short message before each step (scan, measurement, packaging).
    ``postprocess`` lists opt-in steps of ``dpsql.postprocess`` ("nonnegative", "isotonic").
    """
    report = progress or (lambda message: None)
    if rng is not None and isinstance(budget, LedgerBudget):  # a known seed replays the noise (see dbapi.connect)
        raise ProgrammingError("rng= (a chosen random source) is for tests on in-memory data with an in-memory Budget; a "
                               "release charged to a ledger draws its noise from the operating system. Nothing was run or charged.")
    compiled = prepared.answering
    unknown = sorted(set(postprocess) - set(postprocessing.STEPS))
    if unknown:
        raise ProgrammingError(f"unknown post-processing step(s) {', '.join(unknown)}; use {' or '.join(postprocessing.STEPS)}. "
                               "Nothing was run or charged.")
    budget.check(prepared.cost)
    backend.check_table(compiled.table)
    if not prepared.measures_nothing:
        budget.charge(prepared.cost)
    family = "discrete Laplace (pure ε-DP)" if prepared.cost.family == "epsilon" else "discrete Gaussian (ρ-zCDP)"
    metadata: dict[str, object]
    if prepared.use_residual:
        route = prepared.residual
        assert route is not None
        answers = marginal_batch.answer(route, backend=backend, rng=rng, report=report)
        errors = statement_errors(compiled, _residual_sums(route), prepared.cost)
        metadata = {
            "mechanism": f"ResidualPlanner, {family}",
            "strategy": {"batch": route.describe()},
            "expected_rmse": {"batch": math.sqrt(route.total_variance / route.query_count)},
        }
    else:
        chosen = _choose_thresholds(prepared, backend=backend, rng=rng, report=report)
        compiled, used, notes = _final_answering(prepared, chosen, progress=report)
        answers = _standard_answers(compiled, used, chosen, backend=backend, rng=rng, report=report)
        errors = statement_errors(compiled, _measured_sums(compiled, used), prepared.cost, _measured_columns(compiled.table, chosen))
        metadata = {
            "mechanism": f"matrix mechanism, {family}",
            "strategy": {_name(m): m.plan.name for m in used},
            "expected_rmse": {_name(m): m.expected_rmse(m.plan.name) for m in used},
        }
        if notes:
            metadata["answering"] = [f"Group {g + 1}: {note}" for g, note in notes]
        bias = bias_bounds(compiled)
        if bias:
            metadata["bias_bound"] = bias
        if chosen:
            metadata["truncation_threshold"] = chosen
            metadata["truncation"] = {plan.column.name: plan.describe() for plan in prepared.thresholds}
    if postprocess:
        answers, steps = postprocessing.apply(compiled, answers, postprocess)
        metadata["postprocessing"] = steps or [f"{', '.join(postprocess)}: nothing to change"]
    report("packaging the results")
    metadata["budget_spent"] = ("nothing: every statement's WHERE clause is never TRUE (exact zeros, no data read)"
                                if prepared.measures_nothing else prepared.cost.describe())
    metadata["budget_remaining"] = f"{budget.remaining:.6g} of {budget.total.describe()}"
    return statement_tables(compiled, answers, metadata, _statement_metadata(errors, prepared))


def _statement_metadata(errors: Sequence[StatementError], prepared: Prepared) -> list[dict[str, object]]:
    """Each statement's ``statement_error`` metadata: its expected RMSE per aggregate part, the RMSE
    of answering that part alone at the same share, their mean squared ratio, its weight, and a
    note when it is expected to do worse than alone (figures of the plan: public, no data)."""
    notes = dict(_guard_notes(errors, 0 if prepared.use_residual else GUARD_ROUNDS))
    result: list[dict[str, object]] = []
    for s, e in enumerate(errors):
        entry: dict[str, object] = {
            "expected_rmse": {label: rmse for label, rmse, _ in e.parts},
            "alone_rmse": {label: alone for label, _, alone in e.parts},
            "ratio_to_alone": e.ratio,
            "weight": prepared.weights[s] if prepared.weights else 1.0,
        }
        if s in notes:
            entry["note"] = notes[s]
        result.append({"statement_error": entry})
    return result


def _choose_thresholds(prepared: Prepared, *, backend: DuckDBBackend, rng: RandomSource | None,
                       report: Callable[[str], None]) -> dict[str, float]:
    """θ for every truncated measure column (the batch is already charged for these selections)."""
    chosen = {}
    for plan in prepared.thresholds:
        report(f"choosing the truncation threshold of {plan.column.name} ({plan.method}, ε = {plan.epsilon:.4g})")
        chosen[plan.column.name] = thresholds.choose(plan, backend=backend, table=prepared.compiled.table, rng=rng)
    return chosen


def _measured_columns(table: Table, chosen: Mapping[str, float]) -> dict[str, Column]:
    """The table's columns with each truncated measure narrowed to its released θ."""
    return {name: thresholds.truncated(c, chosen[name]) if name in chosen else c for name, c in table.columns.items()}


def _final_answering(prepared: Prepared, chosen: Mapping[str, float], *,
                     progress: Callable[[str], None]) -> tuple[CompiledBatch, tuple[Measurement, ...], list[tuple[int, str]]]:
    """The groups and measurements that answer, once the thresholds θ are released.

    Groups summing a truncated column are decided again (value cells or apart) with the column
    narrowed to ±θ; the others keep the plan made before the data was read. The measurements'
    budget (the batch's, less the selections' share) is split again over the final set.
    """
    if not chosen or prepared.batch is None or prepared.separate is None:
        return prepared.compiled, prepared.measurements, list(prepared.answering_notes)
    key = tuple(sorted(chosen.items()))
    if key not in prepared.decided:
        prepared.decided[key] = _decide_at_thresholds(prepared, chosen, progress=progress)
    return prepared.decided[key]


def _decide_at_thresholds(prepared: Prepared, chosen: Mapping[str, float], *,
                          progress: Callable[[str], None]) -> tuple[CompiledBatch, tuple[Measurement, ...], list[tuple[int, str]]]:
    """:func:`_final_answering` for one set of released θs."""
    assert prepared.batch is not None and prepared.separate is not None
    columns = _measured_columns(prepared.compiled.table, chosen)
    separate = prepared.separate
    redo = [g for g, group in enumerate(separate.groups) if any(k[0] == "sum" and k[1] in chosen for k in group.data_kinds())]
    bounds = {name: ValueCells(low=c.measure_bounds[0], high=c.measure_bounds[1])  # type: ignore[index]
              for name, c in columns.items() if c.measure_bounds is not None}
    noise: planner.Noise = "laplace" if prepared.cost.family == "epsilon" else "gaussian"
    progress("planning the sums at the released thresholds")
    known = {(m.group, m.kind): m.plan for m in prepared.measurements
             if prepared.compiled.groups[m.group] is separate.groups[m.group] and m.cell_bounds is None}
    budget = sum(m.share for m in prepared.measurements)
    weighing = _Weighing(weights=prepared.weights or (1.0,) * len(separate.statements), noise=noise)
    result = _answering_groups(prepared.batch, separate, columns, bounds, noise=noise, budget=budget, progress=progress,
                               groups=redo, start=prepared.compiled, known=known, weighing=weighing)
    kept = [_Draft(group=m.group, kind=m.kind, plan=m.plan, row_scale=m.row_scale, quantum=m.quantum,
                   block_totals=m.block_totals, block_weights=m.block_weights, cell_bounds=m.cell_bounds)
            for m in prepared.measurements if m.group not in redo]
    drafts = sorted(kept + result.drafts, key=lambda d: d.group)
    notes = [note for note in prepared.answering_notes if note[0] not in redo] + result.notes
    measurements = _split(drafts, budget, noise)
    try:
        _calibrations(measurements)
    except PrivacyParameterError:  # a share too small for the new plans: the plan checked before the charge measures
        fallback = "the plan made before θ was released is used: a budget share of the re-planned sums was too small"
        return prepared.compiled, prepared.measurements, sorted(list(prepared.answering_notes) + [(g, fallback) for g in redo])
    return result.compiled, measurements, sorted(notes)


def _standard_answers(compiled: CompiledBatch, measurements: Sequence[Measurement], chosen: Mapping[str, float], *,
                      backend: DuckDBBackend, rng: RandomSource | None,
                      report: Callable[[str], None]) -> dict[tuple[int, int], mechanism.Answers]:
    """One scan per statement group, each data vector measured with its plan's strategy.

    Truncated measure columns are clamped at their chosen θ (the measurements already carry
    the narrowed quantum and per-unit scale). AVG answers whose SUM and COUNT come from one
    measurement (value cells) carry their covariance for the delta method.
    """
    truncated = _measured_columns(compiled.table, chosen)
    answers: dict[tuple[int, int], mechanism.Answers] = {}
    scans = _scan(compiled, measurements, truncated, backend=backend, report=report)
    for index, group in enumerate(compiled.groups):
        zero = [m for m in measurements if m.group == index and m.share == 0]
        _zero_answers(group, index, zero, answers)
        mine = [m for m in measurements if m.group == index and m.share != 0]
        if not mine:
            continue  # nothing to measure: not scanned
        data = scans[index]
        for m in mine:
            report(f"measuring {_name(m)} with {m.plan.name} ({m.plan.strategy.shape[0]:,} noisy values)")
            x = _batch_vector(group, data, m.kind)
            strategy, contribution = _measured_strategy(m)
            release = mechanism.measure(strategy, x, rng=rng, **contribution, **_budget_argument(m))  # type: ignore[arg-type]
            positions = [p for p, block in enumerate(group.blocks) if block.data == m.kind]
            stacked = mechanism.answer(group.workload(m.kind), release)
            ends = np.cumsum([group.blocks[p].workload.shape[0] for p in positions])
            for position, end in zip(positions, ends):
                rows = slice(end - group.blocks[position].workload.shape[0], end)
                unit = group.blocks[position].scale * m.quantum
                answers[index, position] = mechanism.Answers(values=stacked.values[rows] * unit,
                                                             variances=stacked.variances[rows] * unit**2)
            _add_covariances(compiled, index, positions, release, m.quantum, answers)
    return answers


@dataclass(frozen=True, slots=True)
class _ScanRequest:
    """What one statement group reads: its table variant, cell columns, sums and non-NULL counts."""

    index: int
    table: Table
    cells: list[Column]
    sums: dict[Column, float]
    nonnull: list[Column]
    value_axes: bool


def _scan(compiled: CompiledBatch, measurements: Sequence[Measurement], truncated: Mapping[str, Column], *,
          backend: DuckDBBackend, report: Callable[[str], None]) -> dict[int, CellData]:
    """The cell data of every group with something to measure, by group index.

    Groups reading the table's columns as measured share one scan (GROUPING SETS); a group with
    value-cell axes (its own variant of a column, binning the clamped value) is scanned alone.
    """
    requests = []
    for index, group in enumerate(compiled.groups):
        mine = [m for m in measurements if m.group == index and m.share != 0]
        if not mine:
            continue
        value_axes = {a.column.name: a.column for a in group.axes if a.column != compiled.table.columns[a.column.name]}
        columns = {**truncated, **value_axes}
        requests.append(_ScanRequest(index=index, table=replace(compiled.table, columns=columns),
                                     cells=[columns[axis.column.name] for axis in group.axes],
                                     sums={columns[str(m.kind[1])]: m.quantum for m in mine if m.kind[0] == "sum"},
                                     nonnull=[columns[str(m.kind[1])] for m in mine if m.kind[0] == "nonnull"],
                                     value_axes=bool(value_axes)))
    shared: list[_ScanRequest] = []
    alone: list[_ScanRequest] = []
    sums: dict[Column, float] = {}
    for request in requests:
        fits = not request.value_axes and all(sums.get(c, q) == q for c, q in request.sums.items())
        (shared if fits else alone).append(request)
        if fits:
            sums.update(request.sums)
    found: dict[int, CellData] = {}
    if shared:
        name, cells = compiled.table.name, sum(compiled.groups[r.index].cells for r in shared)
        report(f"scanning '{name}' once for {len(shared)} statement group(s) ({cells:,} cells)")
        nonnull = list(dict.fromkeys(c for r in shared for c in r.nonnull))
        data = backend.cell_data_sets(shared[0].table, [r.cells for r in shared], sum_columns=sums, count_columns=nonnull)
        found.update({r.index: d for r, d in zip(shared, data)})
    for r in alone:
        report(f"scanning '{compiled.table.name}' for group {r.index + 1} of {len(compiled.groups)} "
               f"({compiled.groups[r.index].cells:,} cells)")
        found[r.index] = backend.cell_data(r.table, r.cells, sum_columns=r.sums, count_columns=r.nonnull)
    return found


def _zero_answers(group: CompiledGroup, index: int, zero: Sequence[Measurement],
                  answers: dict[tuple[int, int], mechanism.Answers]) -> None:
    """Exact zeros (variance 0) for the blocks of data vectors with an identically zero workload."""
    kinds = {m.kind for m in zero}
    for position, block in enumerate(group.blocks):
        if block.data in kinds:
            rows = block.workload.shape[0]
            answers[index, position] = mechanism.Answers(values=np.zeros(rows), variances=np.zeros(rows))


def _add_covariances(compiled: CompiledBatch, index: int, positions: Sequence[int], release: mechanism.Measurement,
                     quantum: float, answers: dict[tuple[int, int], mechanism.Answers]) -> None:
    """Cov(SUM, COUNT) row by row for AVGs whose two blocks share ``release``."""
    group = compiled.groups[index]
    for statement in compiled.statements:
        for output in statement.aggregates:
            if statement.group != index or len(output.blocks) != 2 or not set(output.blocks) <= set(positions):
                continue
            total, count = output.blocks
            blocks = group.blocks
            covariance = mechanism.answer_covariance(blocks[total].workload, blocks[count].workload, release)
            unit = blocks[total].scale * blocks[count].scale * quantum**2
            found = answers[index, total]
            answers[index, total] = replace(found, covariances={**found.covariances, count: covariance * unit})


def _name(m: Measurement) -> str:
    """'count', 'sum(income)'... prefixed with the statement group when there are several."""
    kind = m.kind[0] if m.kind[1] is None else f"{m.kind[0]}({m.kind[1]})"
    return f"group {m.group + 1}: {kind}"


def _batch_vector(group: CompiledGroup, data: CellData, kind: DataKind) -> npt.NDArray[np.int64] | npt.NDArray[np.object_]:
    """Base-cell data summed into the group's cells (the axes' coarser partitions)."""
    values = data.counts if kind[0] == "count" else (data.sums if kind[0] == "sum" else data.nonnull)[kind[1]]  # type: ignore[index]
    return batch_cell_totals([axis.cell_of_base for axis in group.axes], data.index, data.shape, values)


def explain(prepared: Prepared, budget: Budget | None = None) -> str:
    """A readable report of the plan: routes compared, workload sizes, candidates' expected RMSE, SVD bound, cost."""
    compiled = prepared.compiled
    lines = [f"Batch: {len(compiled.statements)} statement(s) on table '{compiled.table.name}'.",
             f"Cost: {prepared.cost.describe()}" + (f"; budget left {budget.remaining:.6g} of {budget.total.describe()}" if budget else "")]
    for plan in prepared.thresholds:
        lines.append(f"Truncation: {plan.describe()}; the sums are then clamped at ±θ. The expected RMSEs "
                     "below use the outer bound (a smaller θ lowers them, and adds a bias toward zero).")
    route = prepared.residual
    if route is not None and not prepared.measurements:
        lines.append("Route: ResidualPlanner — its expected error equals the SVD lower bound of this batch's workload, "
                     "so no strategy answers it more accurately; statement groups were not planned.")
        lines.extend(_explain_residual(route))
        return "\n".join(lines + _explain_statements(prepared))
    queries = sum(m.plan.queries for m in prepared.measurements)
    standard_rmse = math.sqrt(prepared.standard_total / queries)
    if route is None:
        lines.append(f"Route: statement groups (expected RMSE per answer {standard_rmse:.4g}); {prepared.residual_note}")
    else:
        rp_rmse = math.sqrt(route.total_variance / route.query_count)
        chosen = "ResidualPlanner" if prepared.use_residual else "statement groups"
        lines.append(f"Route: {chosen} — expected RMSE per answer: ResidualPlanner {rp_rmse:.4g}, "
                     f"statement groups {standard_rmse:.4g}; the lower statement-weighted objective answers "
                     f"(ResidualPlanner {route.objective:.6g}, statement groups {prepared.standard_objective:.6g}).")
        lines.extend(_explain_residual(route))
        if prepared.use_residual:
            return "\n".join(lines + _explain_statements(prepared))
        lines.append("")
    lines.append(f"Statement groups: {len(compiled.groups)}, each answered jointly.")
    for index, group in enumerate(compiled.groups):
        members = _runs([i + 1 for i, s in enumerate(compiled.statements) if s.group == index])
        columns = ", ".join(f"{a.column.name}({a.size})" for a in group.axes) or "no columns"
        lines.append(f"Group {index + 1}: statements {members}; {group.cells:,} cells over {columns}.")
        lines.extend(f"  sums: {note}" for g, note in prepared.answering_notes if g == index)
    for m in prepared.measurements:
        lines.append(f"\n{_name(m)}: {m.plan.queries:,} queries, noise {m.plan.noise}, budget share "
                     f"{'ε' if m.plan.noise == 'laplace' else 'ρ'}={m.share:.6g}")
        width = max(map(len, m.plan.candidates))
        for name in sorted(m.plan.candidates, key=m.plan.candidates.__getitem__):
            marker = "*" if name == m.plan.name else " "
            lines.append(f"  {marker} {name:<{width}} expected RMSE {m.expected_rmse(name):12.4g}")
        lines.extend(f"    note: {note}" for note in m.plan.notes)
        if m.weighted:
            lines.append("    note: candidates are scored by the statement-weighted objective (see Statements below); "
                         "only the chosen strategy's RMSE is exact, the others are its score scaled alike")
        scales = sorted({b.scale for b in compiled.groups[m.group].blocks if b.data == m.kind and b.scale != 1})
        if scales:
            lines.append(f"    note: read as value cells; SUM rows are weighted by value / s (s = {', '.join(f'{x:g}' for x in scales)}), "
                         "so their errors are s times the figures here")
        bound, exact = m.plan.svd_bound()
        if bound is not None:
            floor = bound * (2 if m.plan.noise == "laplace" else 1)  # Laplace variance is 2b², b ≥ Δ₂
            ratio = m.plan.expected_error / floor if floor else float("nan")
            kind = "" if exact else " (partial: from the largest sub-workload, the true bound is higher)"
            lines.append(f"    SVD lower bound{kind}: RMSE {m.expected_rmse(m.plan.name) / math.sqrt(ratio):.4g}; "
                         f"chosen strategy's error / bound = {ratio:.3f}")
        else:
            lines.append("    SVD bound: not computed (domain too large for a dense spectrum)")
    return "\n".join(lines + _explain_statements(prepared))


def _explain_statements(prepared: Prepared) -> list[str]:
    """Per statement: expected RMSE of each aggregate part against answering it alone, the ratio of
    mean squared errors, its weight when not 1, and the guard's note when it stays worse."""
    if prepared.use_residual:
        assert prepared.residual is not None
        errors = statement_errors(prepared.residual.compiled, _residual_sums(prepared.residual), prepared.cost)
    else:
        errors = statement_errors(prepared.compiled, _measured_sums(prepared.compiled, prepared.measurements), prepared.cost)
    unit = "ε" if prepared.cost.family == "epsilon" else "ρ"
    lines = ["", f"Statements: expected RMSE per answer, and answering each alone ({unit}/{len(errors)} per statement, "
                 "split evenly over its aggregate parts); ratio = mean squared error / alone's (at most 1 unless noted):"]
    notes = dict(prepared.guard_notes)
    for s, e in enumerate(errors):
        weight = prepared.weights[s] if prepared.weights else 1.0
        figures = "; ".join(f"{label} {rmse:.4g} (alone {alone:.4g})" for label, rmse, alone in e.parts)
        lines.append(f"  statement {s + 1}: {figures}; ratio {e.ratio:.3f}" + (f"; weight {weight:.4g}" if weight != 1 else ""))
        if s in notes:
            lines.append(f"    note: {notes[s]}")
    return lines


def _runs(numbers: Sequence[int]) -> str:
    """1, 2, 3, 5 → "1–3, 5"."""
    parts: list[list[int]] = []
    for n in numbers:
        if parts and n == parts[-1][1] + 1:
            parts[-1][1] = n
        else:
            parts.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in parts)


def _explain_residual(route: marginal_batch.ResidualPlan) -> list[str]:
    """ResidualPlanner's marginals, measurements and optimality certificate."""
    selection = route.selection
    axes = route.compiled.groups[0].axes
    names = ["(" + ", ".join(axes[i].column.name for i in a) + ")" if a else "(total)" for a in selection.marginals]
    shown = ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")
    objective = selection.objective_value()
    if math.isclose(objective, route.weighted_variance, rel_tol=1e-9):  # GROUP BY blocks: the objective is the answers' error
        certificate = (f"  SVD lower bound for these marginals (of the statement-weighted error {selection.bound:.6g}): "
                       f"ResidualPlanner's error / bound = {route.bound_ratio:.3f}")
    else:
        certificate = (f"  weighted marginal objective {objective:.6g} = {route.bound_ratio:.3f} × its SVD lower bound "
                       f"{selection.bound:.6g} (the weights approximate the filtered statements; the RMSE above is their exact error)")
    per_unit = f" (ρ/{route.unit_rows}² for privacy units of up to {route.unit_rows} rows)" if route.unit_rows > 1 else ""
    return [
        f"ResidualPlanner: {route.describe()}; measured at ρ = {float(selection.rho):.6g} per row{per_unit}.",
        f"  marginals over {len(axes)} columns: {shown}",
        certificate,
    ]
