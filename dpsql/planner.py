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
- ``workload``: the workload's own distinct rows measured directly (seed 003's Workload
  baseline), for workloads of at most WORKLOAD_MAX_ENTRIES entries over at most
  EIGEN_MAX_CELLS cells (its exact error needs a dense (AᵀA)⁺). It wins where a few queries share cells, e.g. COUNT and SUM per group
  read as value cells: measuring [1ᵀ; tᵀ/s] per group costs sensitivity max(1 + tⱼ/s) ≤ 2.

Optimized strategies are rounded to integers as the mechanism measures them and cached on disk by
the workload's Gram (``dpsql.strategy_cache``). Each candidate is scored by its exact expected
total squared error at unit privacy (``error.expected_error``) and the lowest wins; the SVD bound
is reported beside them. A template that fails, or whose error cannot be computed exactly, is left
out, and the plan says so; the standard strategies are always there to fall back on.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql import error, strategies, strategy_cache
from dpsql.errors import DomainTooLargeError, DpsqlError, ShapeError
from dpsql.mechanism import integral_strategy
from dpsql.workloads import Explicit, Workload

Noise = error.Noise
#: Per-attribute strategy families: (name, builder for an ordered attribute of n cells).
FAMILIES: dict[str, Callable[[int], Workload]] = {
    "identity": strategies.identity,
    "H2": lambda n: strategies.hierarchical(n, 2),
    "H4": lambda n: strategies.hierarchical(n, 4),
    "wavelet": strategies.wavelet,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The chosen strategy, every candidate's expected total squared error, and the SVD bound.

    Errors are at unit privacy (Gaussian σ = Δ₂, i.e. ρ = 1/2; Laplace ε = 1).
    """

    strategy: Workload
    name: str
    noise: Noise
    candidates: dict[str, float]
    svd_bound: float | None
    svd_bound_exact: bool
    queries: int
    notes: tuple[str, ...] = ()

    @property
    def expected_error(self) -> float:
        return self.candidates[self.name]


@functools.lru_cache(maxsize=256)
def _factor(family: str, n: int) -> Workload:
    """One attribute's strategy, shared between plans so that its (AᵀA)⁺ is computed once."""
    return FAMILIES[family](n)


def candidates(sizes: Sequence[int], ordered: Sequence[bool]) -> dict[str, Workload]:
    """Kronecker strategies over attributes of the given cell counts; identity on unordered ones."""
    if not sizes:
        return {"identity": strategies.identity(1)}
    result = {}
    for name in FAMILIES:
        if name != "identity" and not any(o and n > 2 for o, n in zip(ordered, sizes)):
            continue
        factors = [_factor(name, n) if o and n > 2 else _factor("identity", n) for n, o in zip(sizes, ordered)]
        result[name] = strategies.kron(factors)
    return result


#: Work budget of each optimized template, in objective evaluations (dpsql.strategies.budget); the
#: best strategy found within it is used. A count of work, not wall time, so a plan is deterministic.
PLAN_EVALUATIONS = 2_000
#: HDMM's evaluations grow with the attribute's size n (dense n × n algebra: about 30 ms per
#: p-Identity evaluation at n = 1,024 on one core), so HDMM templates get at most PLAN_HDMM_WORK / n²
#: evaluations for the largest attribute n (256 at n = 1,024, 16 at n = 4,096), and at least one;
#: a Gaussian step (a full eigendecomposition, about ten times dearer) counts as one, so Gaussian
#: HDMM gets an eighth of that.
PLAN_HDMM_WORK = 2**28
#: Eigen-Design runs on domains of at most this many cells (it eigendecomposes the dense Gram).
EIGEN_MAX_CELLS = 1024
#: OPT₊ runs on domains of at most this many cells (its exact error needs a dense (AᵀA)⁺).
UNION_MAX_CELLS = 4096
#: OPT_M runs on workloads of at most this many attributes (its objective costs O(d·2^d)).
MARGINALS_MAX_ATTRIBUTES = 16

#: Templates cheap enough (O(d·2^d) per step, milliseconds) for searches that plan many groups.
QUICK_TEMPLATES = frozenset({"HDMM-marginals"})

Progress = Callable[[str], None]


def plan(W: Workload, *, noise: Noise = "gaussian", sizes: Sequence[int] | None = None,
         ordered: Sequence[bool] | None = None, bound: bool = True, optimize: bool = True,
         quick: bool = False, progress: Progress | None = None, extra: Mapping[str, Workload] | None = None) -> Plan:
    """Score every candidate on W and return the best, with all scores and (if ``bound``) the SVD bound.

    ``sizes``/``ordered`` describe W's Kronecker attributes (default: one ordered attribute);
    ``optimize`` adds the HDMM and Eigen-Design templates (``quick``: only those in QUICK_TEMPLATES,
    for searches that plan many candidate groups); ``progress`` hears about each template that has
    to be optimized (not read from the cache); ``extra`` adds the caller's own integer strategies.
    """
    if W.shape[0] == 0 or W.shape[1] == 0:
        raise ShapeError(f"cannot plan for an empty workload of shape {W.shape}: it needs at least one query and one cell.")
    sizes = list(sizes) if sizes is not None else [W.shape[1]]
    ordered = list(ordered) if ordered is not None else [True] * len(sizes)
    options = {**candidates(sizes, ordered), **(extra or {})}
    notes: list[str] = []
    scores = {name: error.expected_error(W, A, noise=noise) for name, A in options.items()}
    own = _workload_strategy(W)
    if own is not None:
        scores["workload"], options["workload"] = error.expected_error(W, own, noise=noise), own
    if optimize:
        for name, A in _optimized(W, noise=noise, sizes=sizes, notes=notes, progress=progress, quick=quick).items():
            try:
                scores[name], options[name] = error.expected_error(W, A, noise=noise), A
            except DpsqlError as err:
                notes.append(f"{name} was not used ({type(err).__name__}: {err}); the best standard strategy stands in.")
    best = min(scores, key=scores.__getitem__)
    value: float | None = None
    exact = False
    if bound:
        try:
            value, exact = error.svd_bound_detail(W)
        except DomainTooLargeError:
            value = None
    return Plan(strategy=options[best], name=best, noise=noise, candidates=scores, svd_bound=value,
                svd_bound_exact=exact, queries=W.shape[0], notes=tuple(notes))


#: The workload-as-strategy candidate is tried up to this many workload entries.
WORKLOAD_MAX_ENTRIES = 2**21


def _workload_strategy(W: Workload) -> Workload | None:
    """W's distinct non-zero rows as an integer strategy (None when W is too large to densify)."""
    rows, cells = W.shape
    if cells > EIGEN_MAX_CELLS or rows * cells > WORKLOAD_MAX_ENTRIES:
        return None
    distinct = np.unique(W.dense(), axis=0)
    distinct = distinct[np.any(distinct != 0, axis=1)]
    return integral_strategy(Explicit(distinct)) if len(distinct) else None


def _rounded(build: Callable[[], Workload]) -> Callable[[], Workload]:
    """``build``, then rounded to the integer strategy the mechanism will measure."""
    return lambda: integral_strategy(build())


def _templates(W: Workload, *, noise: Noise, sizes: Sequence[int]) -> dict[str, Callable[[], Workload]]:
    """The optimized templates that apply to W, as builders."""
    from dpsql.strategies import eigen_design, opt0, opt_kron, opt_marginals, opt_union

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
    """The HDMM templates' budget: PLAN_EVALUATIONS, or fewer on large attributes (PLAN_HDMM_WORK).

    >>> hdmm_evaluations([64]), hdmm_evaluations([512]), hdmm_evaluations([1024, 2]), hdmm_evaluations([2**15])
    (2000, 1024, 256, 1)
    >>> hdmm_evaluations([1024], "gaussian")
    32
    """
    work = PLAN_HDMM_WORK // (8 if noise == "gaussian" else 1)
    return max(1, min(PLAN_EVALUATIONS, work // int(max(sizes, default=1)) ** 2))


def _several_groups(W: Workload) -> bool:
    """Whether OPT₊ would split W into more than one group (else it is OPT_⊗)."""
    from dpsql.strategies.hdmm import union_groups

    try:
        return len(union_groups(W)) > 1
    except ShapeError:
        return False  # not a union of Kronecker products: OPT_⊗ reports why


def _optimized(W: Workload, *, noise: Noise, sizes: Sequence[int], notes: list[str],
               progress: Progress | None, quick: bool) -> dict[str, Workload]:
    """The optimized templates that succeed on W, rounded to integers and cached by W's Gram."""
    result = {}
    for name, build in _templates(W, noise=noise, sizes=sizes).items():
        if quick and name not in QUICK_TEMPLATES:
            continue
        announce = None if progress is None else functools.partial(
            progress, f"optimizing the {name} strategy for {W.shape[0]:,} queries over {W.shape[1]:,} cells "
            f"(at most {PLAN_EVALUATIONS:,} evaluations; cached afterwards)")
        try:
            result[name] = strategy_cache.cached(W, noise=noise, template=name, build=_rounded(build), on_build=announce)
        except (DpsqlError, ArithmeticError, np.linalg.LinAlgError, ValueError) as err:
            notes.append(f"{name} was not used ({type(err).__name__}: {err}); the best standard strategy stands in.")
    return result


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
    if not weights.any():
        return [0.0] * len(weights)
    exact_total = Fraction(total)
    exact_weights = [Fraction(float(w)) for w in weights]
    norm = sum(exact_weights)
    return [_float_at_most(exact_total * w / norm) for w in exact_weights]


def _float_at_most(value: Fraction) -> float:
    """The largest float ≤ value (for value ≥ 0)."""
    nearest = float(value)
    return math.nextafter(nearest, 0.0) if Fraction(nearest) > value else nearest
