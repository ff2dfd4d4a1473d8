"""StatDP-style Monte Carlo privacy tests on worst-case neighbouring databases.

Method (Ding, Wang, Wang, Zhang & Kifer, "Detecting Violations of Differential Privacy", CCS 2018):
run the mechanism M many times on each of two neighbouring databases D, D′ (they differ in ONE
privacy unit, chosen to move the answer as far as the declared bounds allow), choose an output
event E on the first half of the samples (StatDP's event selection), then test on the second,
independent half whether the data reject

    H₀:  P[M(D) ∈ E] ≤ e^ε · P[M(D′) ∈ E] + δ        (and the same with D and D′ swapped).

The test is one-sided with Clopper–Pearson bounds (Clopper & Pearson 1934): it flags a violation
when lower_{α/2}(p̂) − δ > e^ε · upper_{α/2}(p̂′). If H₀ holds, a flag needs one of the two bounds to
miss its true probability, so the false-alarm rate is at most ALPHA for the one event tested. Each
test also runs a deliberately mis-scaled control (the same mechanism with noise calibrated for
3ε, or 9ρ: sensitivity understated 3×) through the same detector and asserts that it IS flagged,
so the detector demonstrably has the power to catch a violation of this size.

Which layer is sampled: the real engine, ``engine.prepare`` once and ``engine.run`` per release,
with a backend that runs each distinct generated scan (DuckDB SQL with the privacy-unit cap, the
clamping at θ, the SVT profile) once and replays its result (``ScansOnce``). The scans are
deterministic functions of the data, so replaying them changes nothing but the run time (one SQL
release costs 20–110 ms, mostly generating the SQL text; a replayed one 3–7 ms); threshold
selection, value-cell choice, budget split, noise, reconstruction and packaging run every time.
Each test first checks that its first releases are bit-for-bit those of the public path
``dpsql.connect(con, schema=..., budget=..., rng=SeededRandomSource(s))`` + SQL with the same seeds.
All noise comes from fixed-seed ``SeededRandomSource``s, so the outcome is deterministic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

import dpsql
from _helpers import ScansOnce, duckdb_table
from dpsql import engine
from dpsql.budget import accounting
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

pytestmark = pytest.mark.slow

#: The false-alarm rate of one final (second-half) test.
ALPHA = 1e-4
#: Confidence used only to rank candidate events on the first half.
SELECTION_ALPHA = 0.05
#: Candidate thresholds per output coordinate (quantiles of the pooled first half).
THRESHOLDS = 41


# ============================================================================== the detector
def _cp_lower(hits: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson lower bound: P[bound > p] ≤ alpha."""
    return 0.0 if hits == 0 else float(stats.beta.ppf(alpha, hits, n - hits + 1))


def _cp_upper(hits: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson upper bound: P[bound < p] ≤ alpha."""
    return 1.0 if hits == n else float(stats.beta.ppf(1 - alpha, hits + 1, n - hits))


@dataclass(frozen=True)
class Verdict:
    """The event tested on the second half, its hit counts on (first, second) database, and the verdict.

    ``loss`` is the largest empirical |ln(p̂/p̂′)| on the second half over the candidate events
    with at least LOSS_HITS hits on both sides: how much privacy loss the neighbours really show.
    """

    event: str
    hits: tuple[int, int]
    n: int
    margin: float   # lower(p) − δ − e^ε·upper(p′); > 0 is a violation
    flagged: bool
    loss: float


#: Hits an event needs on both databases for its ratio to count in ``Verdict.loss``.
LOSS_HITS = 50


def _events(selection: np.ndarray) -> list[tuple[str, Callable[[np.ndarray], np.ndarray]]]:
    """Candidate events {coordinate j ≤ c} and {coordinate j ≥ c}, c at quantiles of the pooled first half."""
    events: list[tuple[str, Callable[[np.ndarray], np.ndarray]]] = []
    for j in range(selection.shape[1]):
        for c in np.unique(np.quantile(selection[:, j], np.linspace(0.0, 1.0, THRESHOLDS))):
            events.append((f"out[{j}] <= {c:.6g}", lambda y, j=j, c=c: y[:, j] <= c))
            events.append((f"out[{j}] >= {c:.6g}", lambda y, j=j, c=c: y[:, j] >= c))
    return events


def _suspicion(p: int, q: int, n: int, bound: float, delta: float) -> float:
    """How strongly n draws suggest P > e^ε P′ + δ: (p̃ − δ − e^ε q̃) over its standard error, with
    p̃ = (p + ½)/(n + 1) so that empty events rank below informative ones (StatDP ranks by p-value)."""
    a, b = (p + 0.5) / (n + 1), (q + 0.5) / (n + 1)
    return (a - delta - bound * b) / math.sqrt((a * (1 - a) + bound**2 * b * (1 - b)) / n)


def statdp(first: np.ndarray, second: np.ndarray, *, epsilon: float, delta: float = 0.0) -> Verdict:
    """Select the most suspicious (event, direction) on the first halves, test it on the second halves.

    ``first`` and ``second`` are (runs × coordinates) outputs of M(D) and M(D′).
    """
    half = min(len(first), len(second)) // 2
    select = (first[:half], second[:half])
    test = (first[half:2 * half], second[half:2 * half])
    bound = math.exp(epsilon)
    events = _events(np.vstack(select))
    best: tuple[float, str, Callable[[np.ndarray], np.ndarray], int] | None = None
    for name, event in events:
        hits = [int(event(sample).sum()) for sample in select]
        for direction in (0, 1):
            score = _suspicion(hits[direction], hits[1 - direction], half, bound, delta)
            if best is None or score > best[0]:
                best = (score, name, event, direction)
    assert best is not None
    _, name, event, direction = best
    hits = [int(event(sample).sum()) for sample in test]
    p, q = hits[direction], hits[1 - direction]
    margin = _cp_lower(p, half, ALPHA / 2) - delta - bound * _cp_upper(q, half, ALPHA / 2)
    label = f"P[{name} | {'D' if direction == 0 else 'D′'}] vs P[· | {'D′' if direction == 0 else 'D'}]"
    ratios = [abs(math.log(a / b)) for a, b in ([int(e(sample).sum()) for sample in test] for _, e in events)
              if min(a, b) >= LOSS_HITS]
    return Verdict(event=label, hits=(p, q), n=half, margin=margin, flagged=margin > 0, loss=max(ratios, default=0.0))


def test_the_detector_flags_a_known_violation_and_passes_a_known_safe_pair() -> None:
    """Calibrating the detector itself on exact distributions (no dpsql): two discrete Laplace
    laws one step apart at scale 1/ε satisfy ε-DP exactly (ratio e^ε on tails); at scale 1/(3ε) they
    violate ε-DP by e^{2ε} and must be flagged."""
    rng = np.random.default_rng(1)

    def laplace(scale: float, shift: int, n: int) -> np.ndarray:
        p = math.exp(-1 / scale)
        return (shift + rng.geometric(1 - p, n) - rng.geometric(1 - p, n)).reshape(-1, 1).astype(float)

    assert not statdp(laplace(1.0, 0, 4000), laplace(1.0, 1, 4000), epsilon=1.0).flagged
    assert statdp(laplace(1 / 3, 0, 4000), laplace(1 / 3, 1, 4000), epsilon=1.0).flagged


# ============================================================================== sampling the engine
def _table(rows: Sequence[tuple[object, ...]], columns: str) -> duckdb.DuckDBPyConnection:
    return duckdb_table("t", columns, rows)


def _outputs(table: pa.Table, names: Sequence[str]) -> list[float]:
    """The released numbers a test looks at: answer columns, and released thresholds from the metadata."""
    metadata = json.loads(table.schema.metadata[b"dpsql"])
    values = [float(v) for name in names for v in table.column(name).to_pylist()]
    return values + [float(metadata["truncation_threshold"][c])
                     for c in sorted(metadata.get("truncation_threshold", {}))]


def _sample(con: duckdb.DuckDBPyConnection, schema: Schema, sql: str, cost: dict[str, float], names: Sequence[str],
            *, runs: int, seed: int) -> np.ndarray:
    """`runs` releases of the batch on one database (real engine, scans replayed), as a (runs × outputs) array.

    The first three releases are checked against the public path: dpsql.connect + SQL with the same seeds.
    """
    prepared = engine.prepare(sql, schema, PrivacyCost(**cost))
    backend = ScansOnce(con)
    total = {"epsilon": 1e6} if "epsilon" in cost else {"rho": 1e6}
    for s in range(3):
        (via_engine,) = engine.run(prepared, backend=backend, budget=Budget(**total),
                                   rng=SeededRandomSource(10_000 + s))
        public = dpsql.connect(con, schema=schema, budget=Budget(**total), rng=SeededRandomSource(10_000 + s))
        via_sql = public.cursor().execute(sql, **cost).fetch_arrow_table()
        assert via_sql.equals(via_engine) and via_sql.schema.metadata == via_engine.schema.metadata
    rng = SeededRandomSource(seed)
    out = [_outputs(engine.run(prepared, backend=backend, budget=Budget(**total), rng=rng)[0], names)
           for _ in range(runs)]
    return np.asarray(out, dtype=np.float64)


# ============================================================================== unit-capped COUNT
UNIT_ROWS = 3
COUNT_SCHEMA = Schema.load({"tables": {"t": {
    "privacy_unit": {"column": "person_id", "max_rows": UNIT_ROWS},
    "columns": {"g": {"type": "categorical", "values": ["a", "b", "c"]}}}}})
COUNT_SQL = "SELECT COUNT(*) AS n FROM t WHERE g = 'a'"


def _people(seed: int = 0, units: int = 200) -> list[tuple[object, ...]]:
    """Units 0…199 with 1–4 rows each (some above the cap), categories a/b/c at random."""
    rng = np.random.default_rng(seed)
    return [(unit, str(rng.choice(["a", "b", "c"]))) for unit in range(units) for _ in range(int(rng.integers(1, 5)))]


def _count_neighbours() -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
    """D; D′ = D + one unit with max_rows rows, all counted (the worst case); D″ = D + one unit with
    3·max_rows counted rows (only max_rows may count: the cap)."""
    base = _people()
    columns = "person_id INTEGER, g VARCHAR"
    return (_table(base, columns), _table(base + [(10_000, "a")] * UNIT_ROWS, columns),
            _table(base + [(10_001, "a")] * (3 * UNIT_ROWS), columns))


def test_unit_capped_count_is_epsilon_dp_on_worst_case_neighbours() -> None:
    """ε = 1, max_rows = 3: COUNT(*) WHERE g = 'a' on D and D′ (a unit whose 3 rows all count).
    2,000 releases each: the detector finds no event whose probability ratio exceeds e^ε, while
    the neighbours are worst-case (tail events' true ln-ratio is exactly ε; the largest empirical
    one must be at least 0.6ε). A unit with 9 counted rows (D″) gives
    releases identical, seed for seed, to D′'s: the cap leaves exactly max_rows of them."""
    d, d1, d3 = _count_neighbours()
    runs, cost = 2000, {"epsilon": 1.0}
    first = _sample(d, COUNT_SCHEMA, COUNT_SQL, cost, ["n"], runs=runs, seed=1)
    second = _sample(d1, COUNT_SCHEMA, COUNT_SQL, cost, ["n"], runs=runs, seed=2)
    assert np.array_equal(_sample(d3, COUNT_SCHEMA, COUNT_SQL, cost, ["n"], runs=200, seed=2), second[:200])
    verdict = statdp(first, second, epsilon=1.0)
    assert not verdict.flagged, verdict
    assert verdict.loss >= 0.6, verdict  # worst-case neighbours: the true loss of the tail events is ε


def test_unit_capped_count_control_with_noise_for_three_epsilon_is_flagged() -> None:
    """The same batch released at 3ε (noise a third of what ε needs) on the same neighbours, tested
    against ε: the detector must flag it (its tail ratios are e^{3ε} = e^{2ε}·e^ε)."""
    d, d1, _ = _count_neighbours()
    runs, cost = 1200, {"epsilon": 3.0}
    first = _sample(d, COUNT_SCHEMA, COUNT_SQL, cost, ["n"], runs=runs, seed=3)
    second = _sample(d1, COUNT_SCHEMA, COUNT_SQL, cost, ["n"], runs=runs, seed=4)
    verdict = statdp(first, second, epsilon=1.0)
    assert verdict.flagged, verdict


# ============================================================================== ρ-zCDP COUNT as (ε, δ)
ZCDP_RHO, ZCDP_DELTA = 0.125, 0.05
ZCDP_SQL = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"


def _zcdp_samples(rho: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    d, d1, _ = _count_neighbours()
    first, second = (_sample(con, COUNT_SCHEMA, ZCDP_SQL, {"rho": rho}, ["n"], runs=1000, seed=seed + i)
                     for i, con in enumerate((d, d1)))
    return first, second


def test_unit_capped_count_at_rho_meets_its_epsilon_delta_conversion() -> None:
    """ρ = 1/8 per privacy unit implies (ε, δ)-DP with δ = 0.05 and ε from the Canonne–Kamath–Steinke
    conversion (``accounting.epsilon_from_rho``, ≈ 0.74). GROUP BY g (whatever route answers it) on
    D and D′ (the unit's 3 rows all in g = 'a'), 1,000 releases each: no event violates
    P ≤ e^ε P′ + δ."""
    epsilon = accounting.epsilon_from_rho(ZCDP_RHO, delta=ZCDP_DELTA)
    verdict = statdp(*_zcdp_samples(ZCDP_RHO, seed=5), epsilon=epsilon, delta=ZCDP_DELTA)
    assert not verdict.flagged, verdict


def test_unit_capped_count_control_at_nine_rho_is_flagged() -> None:
    """The same batch released at 9ρ (σ a third: sensitivity understated 3×), whose exact Gaussian
    δ at that ε is about 0.38 (``accounting.gaussian_delta``), tested against (ε, 0.05): flagged."""
    epsilon = accounting.epsilon_from_rho(ZCDP_RHO, delta=ZCDP_DELTA)
    assert accounting.gaussian_delta(9 * ZCDP_RHO, epsilon=epsilon) > 0.3
    verdict = statdp(*_zcdp_samples(9 * ZCDP_RHO, seed=7), epsilon=epsilon, delta=ZCDP_DELTA)
    assert verdict.flagged, verdict


# ============================================================================== truncated SUM
UPPER = 100_000.0
SUM_SCHEMA = Schema.load({"tables": {"t": {
    "privacy_unit": {"column": "person_id", "max_rows": 2},
    "columns": {"income": {"type": "numeric", "lower": 0, "upper": UPPER, "bin_width": 10_000, "truncate": "svt"}}}}})
SUM_SQL = "SELECT SUM(income) AS s FROM t"


def _sum_data() -> list[tuple[object, ...]]:
    """D: 200 units of 2 rows, incomes ~ Exponential(1,000) (SVT at ε_sel = 0.1 on 400 rows picks θ
    over a wide range of its grid, so many θs and their scans are exercised)."""
    rng = np.random.default_rng(11)
    return [(unit, round(float(rng.exponential(1000.0)), 2)) for unit in range(200) for _ in range(2)]


def _sum_neighbours() -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
    """D; D′ = D + one unit with 2 rows at 10× the outer bound (clamped to U, then to θ: the largest
    move of the truncated sum, and a move of the SVT profile); D″ = D + one unit with 6 such rows
    (only 2 may count)."""
    base, columns = _sum_data(), "person_id INTEGER, income DOUBLE"
    return (_table(base, columns), _table(base + [(10_000, 10 * UPPER)] * 2, columns),
            _table(base + [(10_001, 10 * UPPER)] * 6, columns))


def _with_offset(released: np.ndarray) -> np.ndarray:
    """(SUM, θ) → (SUM, θ, (SUM − T_D(θ))/θ), T_D(θ) = Σ_D min(v, θ) the exact truncated sum of D.

    The third coordinate is a fixed function of the output, so events on it are events on the
    output (the test may use its knowledge of D to choose them, as a worst-case analyst would).
    It aligns the releases made at different θs: under D it is the noise/θ, under D′ the noise/θ
    plus 2 (two rows clamped at θ), whatever θ was released.
    """
    values = np.array([v for _, v in _sum_data()], dtype=np.float64)
    sums, theta = released[:, 0], released[:, 1]
    truth = np.array([np.minimum(values, t).sum() for t in theta])
    return np.column_stack([sums, theta, (sums - truth) / theta])


def test_truncated_sum_with_its_threshold_selection_is_epsilon_dp_on_worst_case_neighbours() -> None:
    """The whole truncated-SUM pipeline at total ε = 1: θ by SVT at ε_sel = 0.1 (released), then
    SUM clamped at θ and measured with the remaining 0.9 (sensitivity 2θ for units of 2 rows).
    The output is the pair (SUM, θ); events on SUM, on θ and on (SUM − T_D(θ))/θ. 1,000 releases on
    D and D′: no event exceeds e^ε, and some event shows a loss of at least ε/2 (the
    measurement's tails alone lose 0.9ε). D″ (6 rows beyond the bound) releases exactly what D′
    does, seed for seed."""
    d, d1, d3 = _sum_neighbours()
    runs, cost = 1000, {"epsilon": 1.0}
    first = _sample(d, SUM_SCHEMA, SUM_SQL, cost, ["s"], runs=runs, seed=21)
    second = _sample(d1, SUM_SCHEMA, SUM_SQL, cost, ["s"], runs=runs, seed=22)
    assert np.array_equal(_sample(d3, SUM_SCHEMA, SUM_SQL, cost, ["s"], runs=100, seed=22), second[:100])
    assert np.median(first[:, 1]) < UPPER / 10  # θ truncates: mostly far below the outer bound
    verdict = statdp(_with_offset(first), _with_offset(second), epsilon=1.0)
    assert not verdict.flagged, verdict
    assert verdict.loss >= 0.5, verdict


def test_truncated_sum_control_with_noise_for_three_epsilon_is_flagged() -> None:
    """The same pipeline released at total 3ε (θ selection and measurement both at 3× their share),
    tested against ε on the same neighbours: flagged."""
    d, d1, _ = _sum_neighbours()
    runs, cost = 1000, {"epsilon": 3.0}
    first = _sample(d, SUM_SCHEMA, SUM_SQL, cost, ["s"], runs=runs, seed=23)
    second = _sample(d1, SUM_SCHEMA, SUM_SQL, cost, ["s"], runs=runs, seed=24)
    verdict = statdp(_with_offset(first), _with_offset(second), epsilon=1.0)
    assert verdict.flagged, verdict


# ============================================================================== cell-bounded SUM
BANDS_SCHEMA = Schema.load({"tables": {"t": {"columns": {
    "x": {"type": "numeric", "lower": 0, "upper": 100, "bin_width": 10}}}}})
BANDS_SQL = "SELECT x, SUM(x) AS s FROM t GROUP BY x"


def _band_neighbours() -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
    """D (300 rows in [0, 100]); D′ = D + one row at 100 (the top band [90, 100], bound 100: the
    global bound); D″ = D + one row at 9.99 (the bottom band [0, 10), bound 10: ten times smaller)."""
    rng = np.random.default_rng(13)
    base = [(round(float(v), 2),) for v in rng.uniform(0, 100, 300)]
    return _table(base, "x DOUBLE"), _table(base + [(100.0,)], "x DOUBLE"), _table(base + [(9.99,)], "x DOUBLE")


def test_cell_bounded_sums_are_epsilon_dp_on_worst_case_neighbours_in_every_band() -> None:
    """SUM(x) GROUP BY x is measured with per-cell bounds (band j's sum moves by at most its top
    value): noise ∝ 10, 20, …, 100 per band at ε = 1. 1,500 releases on D, D′ (a row at the global
    bound) and D″ (a row at the top of the smallest band): no event exceeds e^ε against either
    neighbour, and each shows a loss of at least ε/2 — the small band's noise is as small as its
    bound allows, no smaller."""
    prepared = engine.prepare(BANDS_SQL, BANDS_SCHEMA, PrivacyCost(epsilon=1.0))
    assert [m.cell_bounds is not None for m in prepared.groups.measurements] == [True]
    d, top, bottom = _band_neighbours()
    runs, cost = 1500, {"epsilon": 1.0}
    first = _sample(d, BANDS_SCHEMA, BANDS_SQL, cost, ["s"], runs=runs, seed=31)
    for seed, neighbour in ((32, top), (33, bottom)):
        verdict = statdp(first, _sample(neighbour, BANDS_SCHEMA, BANDS_SQL, cost, ["s"], runs=runs, seed=seed),
                         epsilon=1.0)
        assert not verdict.flagged, verdict
        assert verdict.loss >= 0.5, verdict


def test_cell_bounded_sums_control_with_noise_for_three_epsilon_is_flagged() -> None:
    """The bands released at 3ε, tested against ε on the small band's neighbour: flagged."""
    d, _, bottom = _band_neighbours()
    runs, cost = 1200, {"epsilon": 3.0}
    first = _sample(d, BANDS_SCHEMA, BANDS_SQL, cost, ["s"], runs=runs, seed=34)
    verdict = statdp(first, _sample(bottom, BANDS_SCHEMA, BANDS_SQL, cost, ["s"], runs=runs, seed=35), epsilon=1.0)
    assert verdict.flagged, verdict
