"""Choose the measurement strategy for a workload by exact expected error.

Candidates are Kronecker products of per-attribute standard strategies (identity everywhere; or
H2, H4 or the Haar wavelet on every ordered attribute with identity on categorical ones) and, when
``optimize`` is set, the optimized templates:

- ``HDMM`` (one attribute): OPT₀;
- ``HDMM-Kron``: OPT_⊗, one Kronecker product for a Kronecker or union-of-Kronecker workload;
- ``HDMM-marginals``: OPT_M, weighted marginals (scored in the residual basis, any domain size);
- ``HDMM-union``: OPT₊, one Kronecker strategy per group of terms with a budget split, when the
  workload has several groups and the domain is small enough (UNION_MAX_CELLS) for its exact error;
- ``Eigen-Design`` for domains of at most EIGEN_MAX_CELLS cells;
- ``workload``: the workload's own distinct rows measured directly (the Workload
  baseline of Wu et al., "Answering Summation Queries for Numerical Attributes under Differential
  Privacy"), for workloads of at most WORKLOAD_MAX_ENTRIES entries over at most
  EIGEN_MAX_CELLS cells (its exact error needs a dense (AᵀA)⁺). It wins where a few queries share
  cells, e.g. COUNT and SUM per group read as value cells: measuring [1ᵀ; tᵀ/s] per group costs
  sensitivity max(1 + tⱼ/s) ≤ 2.

Optimized strategies are rounded to integers as the mechanism measures them and cached on disk by
the workload's exact structure (``dpsql.planning.strategy_cache``). Each candidate is scored by its exact
expected total squared error at unit privacy (``accuracy.expected_error``) and the lowest wins; the SVD
bound prunes the templates and is reported by EXPLAIN. A candidate whose lower bound
(``accuracy.error_floor``, O(entries)) is above an error already scored is left unscored (a standard
strategy only against the other standard ones, so the best of them is always known), which changes no
decision; the plan's notes name it. Decisions are cached by the workload's exact
structure (``dpsql.planning.plan_cache``). A template that fails, or whose error cannot be computed exactly, is left
out, and the plan says so; the standard strategies are always there to fall back on.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpsql import strategies
from dpsql.errors import DomainTooLargeError, DpsqlError, PlanningLimitError, ShapeError, UnsupportedStrategyError
from dpsql.matrix.partitions import Partition, Parts, part_of_cell, partition_form
from dpsql.matrix.workloads import Explicit, FloatArray, Kron, VStack, Workload
from dpsql.noise import Noise
from dpsql.planning import accuracy, plan_cache, strategy_cache, summed_axes
from dpsql.planning.mechanism import integral_strategy

#: Per-attribute strategy families: (name, builder for an ordered attribute of n cells).
FAMILIES: dict[str, Callable[[int], Workload]] = {
    "identity": strategies.identity,
    "H2": lambda n: strategies.hierarchical(n, 2),
    "H4": lambda n: strategies.hierarchical(n, 4),
    "wavelet": strategies.wavelet,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The chosen strategy and every candidate's expected total squared error.

    Errors are at unit privacy (Gaussian σ = Δ₂, i.e. ρ = 1/2; Laplace ε = 1). The SVD lower
    bound, which only EXPLAIN shows, is computed on first request (:meth:`svd_bound`).
    """

    strategy: Workload
    name: str
    noise: Noise
    candidates: dict[str, float]
    queries: int
    workload: Workload = field(repr=False, compare=False)
    notes: tuple[str, ...] = ()
    _bound: list[tuple[float | None, bool]] = field(default_factory=list, repr=False, compare=False)

    @property
    def expected_error(self) -> float:
        return self.candidates[self.name]

    def svd_bound(self) -> tuple[float | None, bool]:
        """(bound, exact): the workload's SVD lower bound at unit Gaussian privacy and whether it
        is exact (else a weaker lower bound); (None, False) where the domain is too large."""
        if not self._bound:
            try:
                self._bound.append(accuracy.svd_bound_detail(self.workload))
            except DomainTooLargeError:
                self._bound.append((None, False))
        return self._bound[0]


@functools.lru_cache(maxsize=256)
def _factor(family: str, n: int) -> Workload:
    """One attribute's strategy, shared between plans so that its (AᵀA)⁺ is computed once."""
    return FAMILIES[family](n)


def candidates(sizes: Sequence[int], ordered: Sequence[bool]) -> dict[str, Workload]:
    """Kronecker strategies over attributes of the given cell counts; identity on unordered ones. Each
    is built once per layout (:func:`_standard`), so what is kept per strategy object (its sensitivity,
    pseudo-inverse, eigenvalue bound) is computed once for every workload scored over that layout."""
    if not sizes:
        return {"identity": strategies.identity(1)}
    return dict(_standard(tuple(sizes), tuple(ordered)))


@functools.lru_cache(maxsize=256)
def _standard(sizes: tuple[int, ...], ordered: tuple[bool, ...]) -> tuple[tuple[str, Workload], ...]:
    """:func:`candidates` of one layout, built once."""
    result = []
    for name in FAMILIES:
        if name != "identity" and not any(o and n > 2 for o, n in zip(ordered, sizes)):
            continue
        factors = [_factor(name, n) if o and n > 2 else _factor("identity", n) for n, o in zip(sizes, ordered)]
        result.append((name, strategies.kron(factors)))
    return tuple(result)


#: Work budget of each optimized template, in objective evaluations (dpsql.strategies.budget); the
#: best strategy found within it is used. A count of work, not wall time, so a plan is deterministic.
PLAN_EVALUATIONS = 2_000
#: HDMM's evaluations grow with the attribute's size n (dense n × n algebra: about 30 ms per
#: p-Identity evaluation at n = 1,024 on one core), so HDMM templates get at most PLAN_HDMM_WORK / n²
#: evaluations for the largest attribute n (256 at n = 1,024, 16 at n = 4,096), and at least one;
#: a Gaussian step (a full eigendecomposition, about ten times dearer) counts as one, so Gaussian
#: HDMM gets an eighth of that.
PLAN_HDMM_WORK = 2**28
#: ... and at most PLAN_HDMM_CUBIC_WORK / n³ of them: one p-Identity evaluation costs O(p·n²) = O(n³/16)
#: operations, so this caps HDMM's work per group at any size (256 evaluations at n = 256, 4 at
#: n = 1,024; Gaussian steps an eighth of that), which the batch limits of
#: ``dpsql.engine.plan.planning_size`` then bound over all groups.
PLAN_HDMM_CUBIC_WORK = 2**32
#: Eigen-Design runs on domains of at most this many cells (it eigendecomposes the dense Gram).
EIGEN_MAX_CELLS = 1024
#: OPT₊ runs on domains of at most this many cells (its exact error needs a dense (AᵀA)⁺).
UNION_MAX_CELLS = 4096
#: OPT_M runs on workloads of at most this many attributes (its objective costs O(d·2^d)).
MARGINALS_MAX_ATTRIBUTES = 16

#: Searches that plan many candidate groups (``quick``) run only OPT_M, the template cheap enough
#: for them (O(d·2^d) per step, milliseconds), from its deterministic starts and with this work
#: budget; the final plan gets PLAN_EVALUATIONS and random restarts.
QUICK_EVALUATIONS = 50

Progress = Callable[[str], None]


def plan(W: Workload, *, noise: Noise = "gaussian", sizes: Sequence[int] | None = None,
         ordered: Sequence[bool] | None = None, optimize: bool = True, quick: bool = False,
         progress: Progress | None = None, extra: Mapping[str, Workload] | None = None,
         names: Sequence[str] | None = None) -> Plan:
    """Score every candidate on W and return the best, with all scores.

    ``sizes``/``ordered`` describe W's Kronecker attributes (default: one ordered attribute);
    ``optimize`` adds the HDMM and Eigen-Design templates (``quick``: only a short OPT_M, for
    searches that plan many candidate groups); ``progress`` hears about each template that has
    to be optimized (not read from the cache); ``extra`` adds the caller's own integer strategies;
    ``names`` are the attributes' names, for the plan's notes.

    Cheap candidates are scored first. The templates run only when the best of them is more than
    NEAR_OPTIMAL above the SVD lower bound (no strategy can gain more). Decisions are cached by
    W's exact structure (``dpsql.planning.plan_cache``): a workload planned before is not scored again.
    """
    if W.shape[0] == 0 or W.shape[1] == 0:
        raise ShapeError(f"cannot plan for an empty workload of shape {W.shape}: "
                         "it needs at least one query and one cell.")
    sizes = list(sizes) if sizes is not None else [W.shape[1]]
    ordered = list(ordered) if ordered is not None else [True] * len(sizes)
    form = partition_form(W)
    if form is not None:
        return _partition_plan(W, form, noise=noise, sizes=sizes)
    reduced = None if extra else summed_axes.reduction(W, sizes)
    if reduced is not None:  # attributes read only through totals: planned on the others (exact)
        inner = plan(reduced.workload, noise=noise, sizes=reduced.sizes, ordered=ordered, optimize=optimize,
                     quick=quick, progress=progress)
        lifted = reduced.lift(inner.strategy)
        if lifted is not None:
            return Plan(strategy=lifted, name=inner.name, noise=noise, candidates=dict(inner.candidates),
                        queries=W.shape[0], workload=W, notes=(*inner.notes, reduced.note(names)))
    options = {**candidates(sizes, ordered), **(extra or {})}
    key = _decision_key(W, noise=noise, sizes=sizes, ordered=ordered, optimize=optimize, quick=quick, extra=extra)
    known = plan_cache.load(key)
    if known is not None:
        memo = f"{key}|{known.name}"
        strategy = _rebuilt.get(memo) or _rebuild(known.name, W, options, noise=noise, sizes=sizes,
                                                  progress=progress, quick=quick)
        if strategy is not None:
            _remember(memo, strategy)
            return Plan(strategy=strategy, name=known.name, noise=noise, candidates=dict(known.candidates),
                        queries=W.shape[0], workload=W, notes=known.notes)
    templates = _templates(W, noise=noise, sizes=sizes, quick=quick) if optimize else {}
    notes: list[str] = []
    scoring = _Scoring(W, noise)
    standard = candidates(sizes, ordered)
    for name, A in options.items():  # a standard strategy only against the others: the best of them is always scored
        scoring.score(name, A, rivals=standard if name in standard else None)
    own = _workload_strategy(W)
    if own is not None:
        options["workload"] = own
    bound: list[tuple[float | None, bool]] = []
    if not quick:  # the workload's own rows before the templates, which run unless the best so far is near optimal
        if own is not None:
            scoring.score("workload", own)
        result = scoring.plan(options, queries=W.shape[0])
        bound = result._bound
        if templates and _near_optimal(result):
            notes.append(f"the optimized templates were not run: {result.name} is within {NEAR_OPTIMAL:.0%} "
                         "of the SVD lower bound.")
            templates = {}
    for name, A in _optimized(W, templates, noise=noise, notes=notes, progress=progress, quick=quick).items():
        try:
            scoring.score(name, A)
            options[name] = A
        except DpsqlError as err:
            notes.append(unused_note(name, err))
    if quick and own is not None:  # after the quick template, whose error usually rules it out unscored
        scoring.score("workload", own)
    scores = scoring.ordered([*options, *templates])
    if scoring.unscored:
        notes.append(f"not scored, as a lower bound on its error exceeds a scored candidate's: "
                     f"{', '.join(scoring.unscored)}.")
    best = min(scores, key=scores.__getitem__)
    plan_cache.store(key, plan_cache.Decision(name=best, candidates=scores, notes=tuple(notes)))
    return Plan(strategy=options[best], name=best, noise=noise, candidates=scores, queries=W.shape[0], workload=W,
                notes=tuple(notes), _bound=bound)


#: A candidate is left unscored when its error floor exceeds a scored rival's exact error by more than
#: this fraction (far above the floating-point rounding of either figure).
PRUNE_MARGIN = 1e-6


class _Scoring:
    """Candidates' exact expected errors on one workload, each skipped when its lower bound
    (``accuracy.error_floor``) shows it cannot be the least: the decision is the one scoring all of them
    would make, and a candidate left out is named in the plan's notes."""

    def __init__(self, W: Workload, noise: Noise) -> None:
        self.W, self.noise = W, noise
        self.found: dict[str, float] = {}
        self.unscored: list[str] = []

    def score(self, name: str, A: Workload, rivals: Mapping[str, Workload] | None = None) -> None:
        """Score A under ``name`` unless its floor is above the least error among ``rivals`` scored so far
        (default: every candidate scored so far)."""
        best = min((v for n, v in self.found.items() if rivals is None or n in rivals), default=math.inf)
        if accuracy.error_floor(self.W, A, noise=self.noise) > best * (1 + PRUNE_MARGIN):
            self.unscored.append(name)
        else:
            self.found[name] = accuracy.expected_error(self.W, A, noise=self.noise)

    def plan(self, options: Mapping[str, Workload], *, queries: int) -> Plan:
        """The best candidate scored so far, as a plan."""
        scores = self.ordered(list(options))
        best = min(scores, key=scores.__getitem__)
        return Plan(strategy=options[best], name=best, noise=self.noise, candidates=scores, queries=queries,
                    workload=self.W)

    def ordered(self, names: Sequence[str]) -> dict[str, float]:
        """The scores in the order of ``names`` (which breaks ties: the first least error wins)."""
        return {name: self.found[name] for name in dict.fromkeys(names) if name in self.found}


def _partition_plan(W: Workload, form: Partition, *, noise: Noise, sizes: Sequence[int]) -> Plan:
    """The optimal strategy for a workload whose weighted rows partition some cells
    (``dpsql.matrix.partitions``), scored in closed form without an n × n matrix: the identity where every
    query reads one cell, else each part's total measured once (``workload``, :class:`Parts`). No
    optimizer runs: a plain GROUP BY, a single marginal (identities ⊗ totals), disjoint ranges and
    Kronecker products of such factors are all partitions.

    Why nothing can do better, under the same sensitivity: query r = c_r·1_pᵀ reads part p of s_p
    cells. For any strategy A scaled to Δ₂ = 1, X = AᵀA has diagonal ≤ 1, so 1_pᵀX1_p ≤ s_p², and by
    Cauchy–Schwarz s_p² = (1_pᵀ1_p)² ≤ (1_pᵀX1_p)(1_pᵀX⁺1_p): query r's variance c_r²·1_pᵀX⁺1_p is
    at least c_r² (unit noise). Measuring each part's total once (Δ₁ = Δ₂ = 1) gives every query
    exactly c_r², the identity too where s_p = 1. Laplace noise is scaled to Δ₁ ≥ Δ₂, so the same
    bound holds; and being per query, it holds for any weighting of the total squared error."""
    identity = strategies.kron([_factor("identity", n) for n in sizes]) if sizes else strategies.identity(1)
    scores = {"identity": accuracy.unit_noise_variance(identity, noise) * form.identity_error()}
    read = form.read_cells()
    bound = (form.root_trace() ** 2 / read if read else 0.0, True)
    if form.single_cells:
        note = "every query reads one cell, each cell at most once: the identity is optimal (closed form)"
        strategy, name = identity, "identity"
    else:
        note = ("the queries read equal or disjoint sets of cells: measuring each set's total once is optimal "
                "(closed form)")
        strategy, name = Parts(*part_of_cell(W)), "workload"
        scores[name] = accuracy.unit_noise_variance(strategy, noise) * form.parts_error()
    return Plan(strategy=strategy, name=name, noise=noise, candidates=scores, queries=W.shape[0], workload=W,
                notes=(note + ", so no other strategy was scored.",), _bound=[bound])


#: Optimization is skipped when a cheap candidate's expected error is within this fraction of the
#: SVD lower bound (Gaussian: svdb; Laplace: 2·svdb, since Δ₁ ≥ Δ₂).
NEAR_OPTIMAL = 0.05


def _near_optimal(result: Plan) -> bool:
    """Whether ``result``'s best error is within NEAR_OPTIMAL of the SVD lower bound (computed here
    only where it is cheap: a Kronecker product, or at most EIGEN_MAX_CELLS cells)."""
    if result.workload.shape[1] > EIGEN_MAX_CELLS and not isinstance(result.workload, Kron):
        return False
    bound, _ = result.svd_bound()
    if not bound:
        return False
    floor = bound * (2.0 if result.noise == "laplace" else 1.0)
    return result.expected_error <= floor * (1 + NEAR_OPTIMAL)


def expected_error(W: Workload, *, noise: Noise = "gaussian", sizes: Sequence[int] | None = None,
                   ordered: Sequence[bool] | None = None, quick: bool = False) -> float:
    """The expected total squared error of W's plan at unit privacy (:func:`plan`'s), read from
    the decision cache without rebuilding the strategy when W was planned before."""
    sizes = list(sizes) if sizes is not None else [W.shape[1]]
    ordered = list(ordered) if ordered is not None else [True] * len(sizes)
    known = plan_cache.load(_decision_key(W, noise=noise, sizes=sizes, ordered=ordered, optimize=True, quick=quick,
                                          extra=None))
    if known is not None:
        return known.candidates[known.name]
    return plan(W, noise=noise, sizes=sizes, ordered=ordered, quick=quick).expected_error


def _decision_key(W: Workload, *, noise: Noise, sizes: Sequence[int], ordered: Sequence[bool], optimize: bool,
                  quick: bool, extra: Mapping[str, Workload] | None) -> str:
    """The decision cache's key for one call of :func:`plan`."""
    options = [f"sizes={list(sizes)}", f"ordered={list(ordered)}", f"optimize={optimize}", f"quick={quick}"]
    return plan_cache.decision_key(W, noise=noise, options=options, extra=extra or {})


#: Strategies rebuilt from cached decisions, kept in memory per process (by decision key and name).
REBUILT_STRATEGIES = 64
_rebuilt: OrderedDict[str, Workload] = OrderedDict()


def _remember(key: str, strategy: Workload) -> None:
    _rebuilt[key] = strategy
    _rebuilt.move_to_end(key)
    while len(_rebuilt) > REBUILT_STRATEGIES:
        _rebuilt.popitem(last=False)


def _rebuild(name: str, W: Workload, options: Mapping[str, Workload], *, noise: Noise, sizes: Sequence[int],
             progress: Progress | None, quick: bool) -> Workload | None:
    """The strategy a cached decision names (None when it cannot be rebuilt: plan again)."""
    if name in options:
        return options[name]
    if name == "workload":
        return _workload_strategy(W)
    templates = _templates(W, noise=noise, sizes=sizes, quick=quick)
    if name in templates:
        built = _optimized(W, {name: templates[name]}, noise=noise, notes=[], progress=progress, quick=quick)
        return built.get(name)
    return None


#: The workload-as-strategy candidate is tried up to this many workload entries.
WORKLOAD_MAX_ENTRIES = 2**21


_own_rows: weakref.WeakKeyDictionary[Workload, Workload | None] = weakref.WeakKeyDictionary()


def _workload_strategy(W: Workload) -> Workload | None:
    """W's distinct non-zero rows as an integer strategy (None when W is too large to densify); kept per
    workload object while it lives (a statement group's quick plan and its final plan read one)."""
    if W in _own_rows:
        return _own_rows[W]
    rows, cells = W.shape
    strategy = None
    if cells <= EIGEN_MAX_CELLS and rows * cells <= WORKLOAD_MAX_ENTRIES:
        distinct = distinct_rows(stacked_rows(W))
        distinct = distinct[np.any(distinct != 0, axis=1)]
        strategy = integral_strategy(Explicit(distinct)) if len(distinct) else None
    _own_rows[W] = strategy
    return strategy


def stacked_rows(W: Workload) -> FloatArray:
    """W's rows as a dense matrix, in some order and with some duplicate rows left out (all
    :func:`distinct_rows` needs): a stack block by block, each block object once (copies of a statement
    share their compiled blocks), a Kronecker block from its factors (``np.kron``: O(rows · cells), where
    W·I would cost O(rows · cells²))."""
    if not isinstance(W, VStack):
        return W.dense()
    blocks = {id(block): block for block in W.blocks}
    return np.vstack([block.dense() for block in blocks.values()])


def distinct_rows(matrix: FloatArray) -> FloatArray:
    """``np.unique(matrix, axis=0)``: the distinct rows in lexicographic order. Equal rows are found by their
    bytes (a dictionary of the m rows' bytes, O(m · n), in place of a sort of m wide keys whose comparisons
    run over the long runs of zeros a statement's rows share), then only the k distinct rows are ordered
    (``np.lexsort``, O(n · k log k)), instead of a field-by-field sort of all m rows. A matrix with a −0.0 or a
    NaN entry, whose bytes do not decide equality, is left to ``np.unique``."""
    if matrix.ndim != 2 or matrix.shape[1] == 0 or np.isnan(matrix).any() or np.any((matrix == 0) & np.signbit(matrix)):
        return np.unique(matrix, axis=0)
    rows = np.ascontiguousarray(matrix, dtype=np.float64)
    first: dict[bytes, int] = {}  # each distinct row's first index, in row order
    for index, row in enumerate(rows):
        first.setdefault(row.tobytes(), index)
    distinct = rows[np.fromiter(first.values(), dtype=np.intp, count=len(first))]
    return distinct[np.lexsort(distinct.T[::-1])]


def _rounded(build: Callable[[], Workload]) -> Callable[[], Workload]:
    """``build``, then rounded to the integer strategy the mechanism will measure."""
    return lambda: integral_strategy(build())


def _templates(W: Workload, *, noise: Noise, sizes: Sequence[int],
               quick: bool = False) -> dict[str, Callable[[], Workload]]:
    """The optimized templates that apply to W, as builders (``quick``: OPT_M only, from its
    deterministic starts with at most QUICK_EVALUATIONS evaluations)."""
    from dpsql.strategies import eigen_design, opt0, opt_kron, opt_marginals, opt_union

    if quick:
        if not 1 < len(sizes) <= MARGINALS_MAX_ATTRIBUTES:
            return {}
        return {"HDMM-marginals": lambda: opt_marginals(W, noise=noise, restarts=0, max_evaluations=QUICK_EVALUATIONS)}
    limit, hdmm = PLAN_EVALUATIONS, hdmm_evaluations(sizes, noise)
    if len(sizes) == 1:
        templates = {"HDMM": lambda: opt0(W, noise=noise, max_evaluations=hdmm)}
    else:
        templates = {"HDMM-Kron": lambda: opt_kron(W, noise=noise, max_evaluations=hdmm)}
        if len(sizes) <= MARGINALS_MAX_ATTRIBUTES:
            templates["HDMM-marginals"] = lambda: opt_marginals(W, noise=noise, max_evaluations=limit)
        if W.shape[1] <= UNION_MAX_CELLS and _several_groups(W):
            templates["HDMM-union"] = lambda: opt_union(W, noise=noise, max_evaluations=hdmm)
    if W.shape[1] <= EIGEN_MAX_CELLS:
        templates["Eigen-Design"] = lambda: eigen_design(W, max_evaluations=limit)
    return templates


def hdmm_evaluations(sizes: Sequence[int], noise: Noise = "laplace") -> int:
    """The HDMM templates' budget: PLAN_EVALUATIONS, or fewer on large attributes (PLAN_HDMM_WORK,
    PLAN_HDMM_CUBIC_WORK).

    >>> hdmm_evaluations([64]), hdmm_evaluations([256]), hdmm_evaluations([1024, 2]), hdmm_evaluations([2**15])
    (2000, 256, 4, 1)
    >>> hdmm_evaluations([256], "gaussian"), hdmm_evaluations([1024], "gaussian")
    (32, 1)
    """
    share = 8 if noise == "gaussian" else 1
    n = int(max(sizes, default=1))
    return max(1, min(PLAN_EVALUATIONS, PLAN_HDMM_WORK // share // n**2, PLAN_HDMM_CUBIC_WORK // share // n**3))


def _several_groups(W: Workload) -> bool:
    """Whether OPT₊ would split W into more than one group (else it is OPT_⊗)."""
    from dpsql.strategies.hdmm import union_groups

    try:
        return len(union_groups(W)) > 1
    except ShapeError:
        return False  # not a union of Kronecker products: OPT_⊗ reports why


def _optimized(W: Workload, templates: Mapping[str, Callable[[], Workload]], *, noise: Noise, notes: list[str],
               progress: Progress | None, quick: bool = False) -> dict[str, Workload]:
    """The optimized templates that succeed on W, rounded to integers and cached by W's Gram
    (quick searches' results apart from the full ones)."""
    result = {}
    for name, build in templates.items():
        announce = None if progress is None else functools.partial(
            progress, f"optimizing the {name} strategy for {W.shape[0]:,} queries over {W.shape[1]:,} cells "
            f"(at most {PLAN_EVALUATIONS:,} evaluations; cached afterwards)")
        try:
            result[name] = strategy_cache.cached(W, noise=noise, template=f"{name} quick" if quick else name,
                                                 build=_rounded(build), on_build=announce)
        except (DpsqlError, ArithmeticError, np.linalg.LinAlgError, ValueError) as err:
            notes.append(unused_note(name, err))
    return result


def why_unused(err: BaseException) -> str:
    """Why a strategy (or route) could not be used, in words chosen by the error's class; the error's own text,
    which may print whole matrices, is left out."""
    if isinstance(err, UnsupportedStrategyError):
        return ("the strategy it found does not measure every query of the batch (some lie outside what it "
                "measures), so their answers would be biased")
    if isinstance(err, (DomainTooLargeError, PlanningLimitError)):
        return "the cells it would work over exceed dpsql's planning limits"
    if isinstance(err, ShapeError):
        return "the batch's queries do not have the form it needs"
    if isinstance(err, (ArithmeticError, np.linalg.LinAlgError, ValueError)):
        return "its numerical optimization did not reach a usable strategy"
    return "it could not be built for these queries"


def unused_note(name: str, err: BaseException) -> str:
    """The EXPLAIN note for a candidate strategy left out: a sentence naming it and why (:func:`why_unused`)."""
    return f"{name} was not used: {why_unused(err)}; the best of the other strategies stands in."


def split_budget(errors: Sequence[float], total: float, *, noise: Noise) -> list[float]:
    """Shares of a budget over independent measurements minimising the summed expected error.

    Gaussian: error_k ∝ c_k/ρ_k, so ρ_k ∝ √c_k. Laplace: error_k ∝ c_k/ε_k², so ε_k ∝ c_k^{1/3}.
    A measurement with c_k = 0 (an identically zero workload, answered exactly) gets exactly 0.
    Each share is rounded down to a float, so the shares' exact sum never exceeds ``total``
    (sequential or zCDP composition then spends at most the charged budget).

    >>> [round(x, 6) for x in split_budget([1.0, 4.0], 3.0, noise="gaussian")]
    [1.0, 2.0]
    >>> split_budget([0.0, 8.0], 0.5, noise="laplace")
    [0.0, 0.5]
    """
    power = 0.5 if noise == "gaussian" else 1.0 / 3.0
    values = np.asarray(errors, dtype=np.float64)
    weights = np.power(values, power) / np.power(values.max(), power) if values.size and values.max() > 0 \
        else np.zeros(values.size)
    return proportional_shares(weights.tolist(), total)


def proportional_shares(weights: Sequence[float], total: float) -> list[float]:
    """total·w_k/Σw, each rounded down to a float so that the shares' exact sum never exceeds
    ``total`` (all zeros when every weight is 0).

    >>> proportional_shares([1.0, 3.0], 1.0)
    [0.25, 0.75]
    """
    if not any(weights):
        return [0.0] * len(weights)
    exact_total = Fraction(total)
    exact_weights = [Fraction(float(w)) for w in weights]
    norm = sum(exact_weights)
    return [_float_at_most(exact_total * w / norm) for w in exact_weights]


def _float_at_most(value: Fraction) -> float:
    """The largest float ≤ value (for value ≥ 0)."""
    nearest = float(value)
    return math.nextafter(nearest, 0.0) if Fraction(nearest) > value else nearest
