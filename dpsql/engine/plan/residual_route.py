"""The ResidualPlanner route: a batch of COUNT(*) … GROUP BY statements answered jointly by
ResidualPlanner (Xiao, He, Zhang, Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy
Marginals under Convex Loss Functions", NeurIPS 2023).

The route:
    compile  every statement into one group over all the batch's axes; an axis has the column's
             cells plus its outside cell (NULL, out of domain), so a marginal over A counts every
             row and all marginals describe one data vector. A column declared
             ``out_of_domain = "exclude"`` has no outside rows (the scan filters them out), so
             its outside cell is left out of the attribute. A block is Σ_t ⊗ F_{t,i} over the
             axes it groups or filters on (its marginal A): ``MarginalQueries``.
    select   σ_S² for every subset S of every marginal, minimising the weighted sum of the
             blocks' variances (weights from ``dpsql.residual.queries.selection_weight``, exact for
             GROUP BY blocks). Only the public schema and the statements are read.
    scan     the maximal marginals, once, with GROUPING SETS (``Backend.marginal_counts``);
             the product domain Π nᵢ is never formed.
    measure  every residual R_S x with the secure discrete Gaussian (``residual.measure``).
    answer   reconstruct each marginal (mutually consistent: every table's total is the same
             number) and apply its blocks, with the exact variance of every answer.

Privacy: ``residual.measure`` is ρ′-zCDP when one record moves one cell of each marginal table.
A privacy unit owns at most k rows (the backend keeps at most k per unit), which moves x by at
most k in L1 norm and every residual release's Mahalanobis norm by at most k times its one-row
value (triangle inequality), so the cost is k²ρ′: the selection is made at ρ′ = ρ/k² and the
batch is ρ-zCDP per unit. Pure ε is not offered: ResidualPlanner is a Gaussian mechanism.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpsql.backends import Backend
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.measuring.measure import MeasuredVector
from dpsql.engine.plan.guard import StatementError, guard_notes, statement_errors
from dpsql.engine.plan.metadata import Release, ReleaseMetadata, family_name
from dpsql.engine.plan.planning_size import MAX_DENSE_CELLS
from dpsql.engine.vocabulary import AnswerKey, AnswerSet, NotApplicable, Report, unit_rows
from dpsql.errors import DomainTooLargeError, ShapeError
from dpsql.matrix.workloads import Explicit, Kron, Sum, Workload
from dpsql.noise import RandomSource
from dpsql.planning.mechanism import Answers, Measurement
from dpsql.planning.planner import why_unused
from dpsql.planning.weights import block_weight
from dpsql.residual import planner as residual
from dpsql.residual import queries as mq
from dpsql.residual.lattice import Marginal
from dpsql.schema import Schema
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, compile_batch
from dpsql.sql.derived import covariance_pairs
from dpsql.sql.vectors import COUNTS

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class ResidualPlan:
    """Everything ResidualPlanner decided for a batch before any data is read.

    ``queries[b]`` is block b of the single group as marginal queries (None: never TRUE, answered
    0 exactly); ``selection`` is at ρ/k²; ``variances[b]`` the expected variance of each answer;
    ``weights``: each statement's weight; ``block_weights``: c_b of each block in the batch
    objective (``dpsql.planning.weights``).
    """

    cost: PrivacyCost
    compiled: CompiledBatch
    queries: tuple[mq.MarginalQueries | None, ...]
    selection: residual.Selection
    unit_rows: int
    variances: tuple[FloatArray, ...]
    weights: tuple[float, ...]
    block_weights: tuple[float, ...]

    name = "ResidualPlanner"
    measures_nothing = False

    @property
    def optimal(self) -> bool:
        """Whether no Gaussian matrix mechanism answers the batch with lower total error.

        True when every block reports each cell of its marginal once, with one weight (GROUP BY
        with every group reported, or an excluded outside cell): then FᵀF = c·I per block, the
        batch's Gram is the weighted marginal Gram ResidualPlanner optimizes, and its
        sum-of-variances optimum is that Gram's SVD lower bound (He, Xiao, Toksoz, Ding, Zhang, Kifer,
        "ResidualPlanner+: a Scalable Matrix Mechanism for Marginals and Beyond", arXiv 2305.08175,
        Lemma 2).
        """
        return self.bound_ratio <= 1 + 1e-9 and all(q is None or _reports_each_cell_once(q) for q in self.queries)

    @property
    def total_variance(self) -> float:
        """Expected total squared error over every answer of the batch."""
        return float(sum(v.sum() for v in self.variances))

    @property
    def expected_total(self) -> float:
        """Expected total squared error of the answers."""
        return self.total_variance

    @property
    def weighted_variance(self) -> float:
        """Σ_b c_b·Σ_i Var_i: what the selection minimises (``dpsql.planning.weights``)."""
        return float(sum(c * v.sum() for c, v in zip(self.block_weights, self.variances)))

    @property
    def objective(self) -> float:
        """The batch objective: :attr:`weighted_variance` / k² (in units of one privacy unit's k
        rows, as the standard route's objective)."""
        return self.weighted_variance / self.unit_rows**2

    @property
    def answer_count(self) -> int:
        return sum(v.size for v in self.variances)

    @property
    def guard_notes(self) -> tuple[tuple[int, str], ...]:
        """(statement, note) for each statement expected to do worse than answering it alone."""
        return guard_notes(self.statement_errors(), None)

    def statement_errors(self) -> list[StatementError]:
        """Each statement's expected error against answering it alone (Σ Var over each block)."""
        sums = {AnswerKey(0, b): float(v.sum()) for b, v in enumerate(self.variances)}
        return statement_errors(self.compiled, sums, self.cost)

    def cost_parts(self) -> list[PrivacyCost]:
        """What the plan spends: one ρ-zCDP release of every residual."""
        return [self.cost]

    def answer(self, *, backend: Backend, rng: RandomSource | None, report: Report) -> Release:
        """Scan once, measure every residual, reconstruct, answer every block."""
        metadata = ReleaseMetadata(mechanism=f"ResidualPlanner, {family_name(self.cost)}",
                                   strategy={"batch": self.describe()},
                                   expected_rmse={"batch": math.sqrt(self.total_variance / self.answer_count)})
        measured: list[MeasuredVector] = []
        answers = answer(self, backend=backend, rng=rng, report=report, measured=measured)
        return Release(compiled=self.compiled, answers=answers, errors=self.statement_errors(), metadata=metadata,
                       split_cap=None, measured=tuple(measured))

    def explain_lines(self) -> list[str]:
        """ResidualPlanner's marginals, measurements and optimality certificate."""
        selection = self.selection
        axes = self.compiled.groups[0].axes
        names = ["(" + ", ".join(axes[i].column.name for i in a) + ")" if a else "(total)" for a in selection.marginals]
        shown = ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")
        objective = selection.objective_value()
        if math.isclose(objective, self.weighted_variance, rel_tol=1e-9):  # GROUP BY blocks: the objective is the error
            certificate = ("  SVD lower bound for these marginals "
                           f"(of the statement-weighted error {selection.bound:.6g}): "
                           f"ResidualPlanner's error / bound = {self.bound_ratio:.3f}")
        else:
            certificate = (f"  weighted marginal objective {objective:.6g} = {self.bound_ratio:.3f} "
                           f"× its SVD lower bound {selection.bound:.6g} "
                           "(the weights approximate the filtered statements; the RMSE above is their exact error)")
        per_unit = (f" (ρ/{self.unit_rows}² for privacy units of up to {self.unit_rows} rows)"
                    if self.unit_rows > 1 else "")
        return [
            f"ResidualPlanner: {self.describe()}; measured at ρ = {float(selection.rho):.6g} per row{per_unit}.",
            f"  marginals over {len(axes)} columns: {shown}",
            certificate,
        ]

    @property
    def bound_ratio(self) -> float:
        """The selection's objective over its lower bound (1 for sum of variances: optimal)."""
        return self.selection.objective_value() / self.selection.bound if self.selection.bound else 1.0

    def describe(self) -> str:
        measured = sum(math.prod(n - 1 for n in (self.selection.domains[i] for i in s)) for s in self.selection.closure)
        return (f"ResidualPlanner ({len(self.selection.marginals)} marginals, {len(self.selection.closure)} "
                f"residual measurements, {measured:,} noisy values)")


def plan(batch: ir.Batch, schema: Schema, cost: PrivacyCost, weights: Sequence[float]) -> ResidualPlan | NotApplicable:
    """ResidualPlanner's plan for the batch, or the reason it does not apply (for EXPLAIN).

    ``weights`` (one per statement) weigh each statement's answers as the standard
    route does (``dpsql.planning.weights``: c_b = w_s / m_s for a COUNT(*) block of m_s answers); the
    selection minimises Σ_b c_b·Σ Var over the blocks, still a weighted marginal objective.
    """
    if cost.family != "rho":
        return NotApplicable("ResidualPlanner was not considered: it is a Gaussian (zCDP) mechanism "
                             "and this batch is charged in ε.")
    compiled = compile_batch(batch, schema, [list(range(len(batch.statements)))])
    if any(covariance_pairs(statement) for statement in batch.statements):
        return NotApplicable("ResidualPlanner was not considered: an output combines several aggregates, whose "
                             "covariances only the statement groups compute.")
    group = compiled.groups[0]
    if any(block.total is not None for block in group.blocks):
        return NotApplicable("ResidualPlanner was not considered: order statistics (MEDIAN, PERCENTILE, MIN, MAX) "
                             "need the covariances of their prefix counts, which the statement groups give.")
    if any(block.data != COUNTS for block in group.blocks):
        return NotApplicable("ResidualPlanner answers COUNT(*) only; this batch also has SUM, AVG or COUNT(column).")
    if not group.axes:
        return NotApplicable("ResidualPlanner needs GROUP BY or WHERE columns; this batch only counts all rows.")
    sizes = [axis.size for axis in group.axes]  # an excluded column's axis has no outside cell (compile)
    if max(sizes) > MAX_DENSE_CELLS:
        return NotApplicable(f"ResidualPlanner was not considered: its per-attribute matrices would be dense over "
                             f"{max(sizes):,} cells (the limit is MAX_DENSE_CELLS = {MAX_DENSE_CELLS:,}).")
    queries = []
    for block in group.blocks:
        found = _marginal_queries(block.workload, sizes)
        if isinstance(found, NotApplicable):
            return found
        queries.append(found)
    live = [q for q in queries if q is not None]
    if not live:
        return NotApplicable("every statement's WHERE clause is never TRUE.")
    statement_of = {p: statement for statement in compiled.statements
                    for output in statement.aggregates for p in output.blocks}
    index_of = {id(statement): i for i, statement in enumerate(compiled.statements)}
    block_weights = tuple(
        block_weight(float(weights[index_of[id(statement_of[b])]]), block.workload.shape[0], 1, "gaussian")
        for b, block in enumerate(group.blocks))
    selection_weights: dict[Marginal, float] = {}
    for q, c in zip(queries, block_weights):
        if q is not None:
            selection_weights[q.marginal] = selection_weights.get(q.marginal, 0.0) + c * mq.selection_weight(q)
    rows_per_unit = unit_rows(compiled.table)
    marginals = sorted(selection_weights, key=lambda a: (len(a), a))
    try:
        selection = residual.select(sizes, marginals, objective="sum_variance",
                                    rho=Fraction(cost.value) / rows_per_unit**2,
                                    weights=[selection_weights[a] for a in marginals])
    except (DomainTooLargeError, ShapeError) as err:
        return NotApplicable(f"ResidualPlanner was not used: {why_unused(err)}.")
    scale = _sigma2_lookup(selection.closure, selection.sigma2)
    variances = tuple(np.zeros(block.workload.shape[0]) if q is None else mq.variances(q, scale)
                      for q, block in zip(queries, group.blocks))
    return ResidualPlan(cost=cost, compiled=compiled, queries=tuple(queries), selection=selection,
                        unit_rows=rows_per_unit, variances=variances, weights=tuple(weights),
                        block_weights=block_weights)


def answer(route: ResidualPlan, *, backend: Backend, rng: RandomSource | None, report: Report,
           measured: list[MeasuredVector] | None = None) -> AnswerSet:
    """Scan once, measure every residual, reconstruct and answer every block (group 0). Each
    residual's integer release y_S = Ξ_S x_S + z_S (Ξ_S = ⊗_{i∈S} (nᵢI − J), z_S iid N_ℤ(0, γ_S²))
    is appended to ``measured``, when given: a measurement of the marginal S, kept for reuse.

    Privacy: ``residual.measure`` at ρ/k² per row is ρ-zCDP per privacy unit (module docstring);
    this is the one place the route touches data and randomness, after the charge."""
    compiled, selection = route.compiled, route.selection
    axes = compiled.groups[0].axes
    maximal = _maximal(selection.marginals)
    report(f"scanning '{compiled.table.name}' once for {len(maximal)} marginal tables (GROUPING SETS)")
    base = backend.marginal_counts(compiled.table, [axis.column for axis in axes], maximal)
    tables: dict[Sequence[int], IntArray] = {
        a: _coarsen(table, [axes[i].cell_of_base for i in a])[tuple(slice(0, selection.domains[i]) for i in a)]
        for a, table in base.items()}
    report(f"measuring with {route.describe()}")
    integer: dict[int, npt.NDArray[Any]] = {}
    releases = residual.measure(selection, tables, rng=rng, integer_releases=integer)
    if measured is not None:
        measured.extend(_marginal_releases(selection, integer))
    report(f"reconstructing {len(selection.marginals)} marginals")
    estimates = residual.reconstruct(selection, releases)
    scale = _sigma2_lookup(selection.closure, releases.sigma2)
    answers = {}
    for b, (q, block) in enumerate(zip(route.queries, compiled.groups[0].blocks)):
        if q is None:
            rows = block.workload.shape[0]
            answers[AnswerKey(0, b)] = Answers(values=np.zeros(rows), variances=np.zeros(rows))
        else:
            answers[AnswerKey(0, b)] = Answers(values=mq.answer(q, estimates[q.marginal]),
                                               variances=mq.variances(q, scale))
    return AnswerSet(answers)


def _marginal_releases(selection: residual.Selection,
                       integer: Mapping[int, npt.NDArray[Any]]) -> list[MeasuredVector]:
    """Each closure set's integer release as a measurement of its marginal's cell counts."""
    found = []
    for s, (gamma2, variance) in enumerate(residual.release_noise(selection)):
        marginal = tuple(selection.closure[s])
        factors = [Explicit(n * np.eye(n) - np.ones((n, n))) for n in (selection.domains[i] for i in marginal)]
        strategy: Workload = Kron(factors) if factors else Explicit(np.ones((1, 1)))
        release = Measurement(strategy=strategy, y=np.asarray(integer[s], dtype=np.float64).ravel(), noise="gaussian",
                              noise_scale=gamma2, noise_variance=variance)
        found.append(MeasuredVector(group=0, vector=COUNTS, quantum=1.0, bounds=None, measurement=release,
                                    axes=marginal))
    return found


def _marginal_queries(workload: Workload, sizes: Sequence[int]) -> mq.MarginalQueries | NotApplicable | None:
    """A compiled block as queries on the marginal of the axes it does not simply sum over
    (restricted to each attribute's first ``sizes[i]`` cells: the others are always empty)."""
    terms = workload.terms if isinstance(workload, Sum) else (workload,)
    factor_lists = []
    for term in terms:
        if isinstance(term, Explicit):  # no axes: the total count
            return NotApplicable("ResidualPlanner needs GROUP BY or WHERE columns.")
        if not isinstance(term, Kron) or not all(isinstance(f, Explicit) for f in term.factors):
            return NotApplicable("a statement's queries are not a marginal's Kronecker form.")
        factor_lists.append([np.asarray(f.dense(), dtype=np.float64)[:, :n] for f, n in zip(term.factors, sizes)])
    used = tuple(i for i in range(len(factor_lists[0]))
                 if any(f[i].shape[0] != 1 or not np.all(f[i] == 1.0) for f in factor_lists))
    queries = mq.MarginalQueries(marginal=used, terms=tuple(tuple(f[i] for i in used) for f in factor_lists))
    return None if mq.is_zero(queries) else queries


def _reports_each_cell_once(queries: mq.MarginalQueries) -> bool:
    """One Kronecker term whose factors have exactly one non-zero per column, all of one magnitude."""
    if len(queries.terms) != 1:
        return False
    for factor in queries.terms[0]:
        nonzero = factor != 0
        if not np.all(nonzero.sum(axis=0) == 1) or np.ptp(np.abs(factor[nonzero])) != 0:
            return False
    return True


def _sigma2_lookup(closure: tuple[Marginal, ...], sigma2: FloatArray) -> Callable[[Marginal], float]:
    table = dict(zip(closure, sigma2.tolist()))
    return table.__getitem__


def _maximal(marginals: tuple[Marginal, ...]) -> list[Marginal]:
    """The marginals no other requested marginal contains: the only tables the scan needs."""
    sets = [frozenset(a) for a in marginals]
    return [a for a, s in zip(marginals, sets) if not any(s < other for other in sets)]


def _coarsen(table: IntArray, cell_maps: list[IntArray]) -> IntArray:
    """Base-cell counts (domain.size + 1 per axis) summed into the batch's axis cells, exactly."""
    out = np.asarray(table, dtype=np.int64)
    for axis, cell_of_base in enumerate(cell_maps):
        moved = np.moveaxis(out, axis, 0)
        summed = np.zeros((int(cell_of_base.max()) + 1, *moved.shape[1:]), dtype=np.int64)
        kept = cell_of_base >= 0  # -1: the outside cell of an excluded column, always empty
        np.add.at(summed, cell_of_base[kept], moved[kept])
        out = np.moveaxis(summed, 0, axis)
    return out
