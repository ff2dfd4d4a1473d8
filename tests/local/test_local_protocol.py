"""The collection protocol: published strategy files, the exact client sampler, report counting, Arrow answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2

from dpsql import local
from dpsql.errors import DataError, InterfaceError, PrivacyParameterError
from dpsql.local import protocol
from dpsql.local.answers import counts_of, estimate, read_reports, reports_table, write_reports
from dpsql.local.quantize import TOTAL, exactly_ldp, exp_lower
from dpsql.matrix import workloads
from dpsql.noise import SeededRandomSource


@pytest.fixture(scope="module")
def published() -> protocol.StrategyFile:
    return protocol.publish(local.optimize(workloads.Prefix(6), epsilon=1.0, seed=0))


@pytest.mark.parametrize("strategy", [local.randomized_response(40, epsilon=0.01), local.hadamard(33, epsilon=5.0),
                                      local.hierarchical(50, epsilon=1.0)], ids=lambda s: s.name)
def test_published_weights_are_exactly_ldp_and_close_to_the_design(strategy: local.LocalStrategy) -> None:
    K = protocol.publish(strategy).weights
    assert np.all(K.sum(axis=0) == TOTAL) and exactly_ldp(K, strategy.epsilon)
    # the exact check, spelled out in integers: max_u K[o, u] · den ≤ num · min_u K[o, u] with num/den < e^ε
    bound = exp_lower(strategy.epsilon)
    assert bound < math.exp(strategy.epsilon)
    assert all(int(hi) * bound.denominator <= bound.numerator * int(lo) for lo, hi in zip(K.min(axis=1), K.max(axis=1)))
    np.testing.assert_allclose(K / TOTAL, strategy.Q, rtol=1e-8, atol=1e-12)


def test_save_load_round_trip_keeps_the_hash(tmp_path: Path, published: protocol.StrategyFile) -> None:
    path = tmp_path / "strategy.json"
    protocol.save(published, path)
    loaded = protocol.load(path)
    assert loaded.sha256 == published.sha256 and len(loaded.sha256) == 64
    np.testing.assert_array_equal(loaded.weights, published.weights)
    data = json.loads(path.read_text())
    assert data["format"] == "dpsql-local-strategy" and data["version"] == 1 and data["epsilon"] == 1.0


def test_an_altered_or_foreign_file_is_refused(tmp_path: Path, published: protocol.StrategyFile) -> None:
    data = json.loads(published.to_json())
    data["epsilon"] = 2.0  # a tampered ε no longer matches the hash
    (tmp_path / "tampered.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match="does not match its sha256"):
        protocol.load(tmp_path / "tampered.json")
    (tmp_path / "future.json").write_text(json.dumps({**data, "version": 99}))
    with pytest.raises(InterfaceError, match="version 99"):
        protocol.load(tmp_path / "future.json")
    (tmp_path / "other.json").write_text("{\"hello\": 1}")
    with pytest.raises(InterfaceError, match="not a dpsql local strategy file"):
        protocol.load(tmp_path / "other.json")


def test_weights_that_break_the_ratio_are_refused(published: protocol.StrategyFile) -> None:
    K = np.array(published.weights)
    K[0, 0], K[1, 0] = K[0, 0] + K[1, 0] - 1, 1  # one output becomes nearly impossible for cell 0
    with pytest.raises(PrivacyParameterError, match="not exactly 1-LDP"):
        protocol.StrategyFile(epsilon=1.0, name="broken", weights=K)


def test_client_sampler_follows_the_column_distribution(published: protocol.StrategyFile) -> None:
    # chi-square goodness of fit per cell at significance 1e-6 (a false alarm has chance < 6e-6 overall)
    draws = 60_000
    rng = SeededRandomSource(11)
    for cell in range(published.n):
        outputs = protocol.randomize_cells(published, np.full(draws, cell), rng=rng)
        expected = draws * (published.weights[:, cell] / TOTAL)
        statistic = float((((np.bincount(outputs, minlength=published.m) - expected) ** 2) / expected).sum())
        assert statistic < chi2.ppf(1 - 1e-6, published.m - 1)


def test_randomize_returns_a_report_and_refuses_bad_values(published: protocol.StrategyFile) -> None:
    report = protocol.randomize(published, 3, rng=SeededRandomSource(0))
    assert report.strategy == published.sha256 and 0 <= report.output < published.m
    assert 0 <= protocol.randomize(published, 3).output < published.m  # OS randomness by default
    for bad in (6, -1, 2.0, True, "3"):
        with pytest.raises(DataError, match=r"cell index, an integer in \[0, 6\)"):
            protocol.randomize(published, bad)  # type: ignore[arg-type]


def test_reports_from_another_strategy_are_refused(published: protocol.StrategyFile) -> None:
    other = protocol.publish(local.randomized_response(6, epsilon=1.0))
    mixed = [published.sha256] * 5 + [other.sha256]
    with pytest.raises(DataError, match="1 report\\(s\\) were made with another strategy"):
        protocol.report_counts(published, mixed, [0] * 6)
    with pytest.raises(DataError, match="outputs must be integers"):
        protocol.report_counts(published, [published.sha256], [published.m])


def test_estimate_returns_arrow_answers_with_variances(tmp_path: Path, published: protocol.StrategyFile) -> None:
    x = np.array([500, 0, 1200, 300, 0, 2000])
    cells = np.repeat(np.arange(6), x)
    table = reports_table(published, protocol.randomize_cells(published, cells, rng=SeededRandomSource(5)))
    write_reports(table, tmp_path / "reports.parquet")
    reports = read_reports(tmp_path / "reports.parquet")
    np.testing.assert_array_equal(counts_of(published, reports), np.bincount(reports.column("output").to_numpy(),
                                                                             minlength=published.m))
    answers = estimate(reports, strategy=published, workload=workloads.Prefix(6))
    assert answers.column_names == ["query", "value", "variance", "value_stddev"]
    values, stddev = answers.column("value").to_numpy(), answers.column("value_stddev").to_numpy()
    truth = np.cumsum(x)
    # within 6 estimated standard errors, and the last prefix (the total) is exact
    np.testing.assert_array_less(np.abs(values - truth), 6 * stddev + 1e-6)
    assert values[-1] == pytest.approx(x.sum(), abs=1e-6) and stddev[-1] == pytest.approx(0.0, abs=1e-3)
    metadata = json.loads(answers.schema.metadata[b"dpsql"])
    assert metadata["reports"] == x.sum() and metadata["strategy_sha256"] == published.sha256


def test_the_plug_in_variance_is_close_to_the_true_one(published: protocol.StrategyFile) -> None:
    # with many reports x̂ ≈ x, so the plug-in variance approaches Var at the true x
    x = np.array([4000, 100, 9000, 0, 2500, 6000])
    table = reports_table(published,
                          protocol.randomize_cells(published, np.repeat(np.arange(6), x), rng=SeededRandomSource(9)))
    reported = estimate(table, strategy=published, workload=workloads.Identity(6)).column("variance").to_numpy()
    np.testing.assert_allclose(reported, local.answer_variances(np.eye(6), published.strategy, x), rtol=0.1)


def test_the_client_refuses_an_epsilon_above_its_own_limit() -> None:
    """Issue 14 item 5: the server chooses ε; a client bounds it (default 5) whatever the file says."""
    truthful = protocol.publish(local.randomized_response(6, epsilon=30.0))  # reports all but reveal the cell
    for client in (lambda **kw: protocol.randomize(truthful, 3, **kw),
                   lambda **kw: protocol.randomize_cells(truthful, np.arange(6), **kw)):
        with pytest.raises(PrivacyParameterError,
                           match=r"ε = 30 per report .* above this client's limit max_epsilon = 5"):
            client(rng=SeededRandomSource(0))
        with pytest.raises(PrivacyParameterError, match="max_epsilon must be a finite number > 0"):
            client(rng=SeededRandomSource(0), max_epsilon=float("nan"))
    assert protocol.DEFAULT_MAX_EPSILON == 5.0
    assert protocol.randomize(truthful, 3, rng=SeededRandomSource(0), max_epsilon=30.0).output == 3  # the user's choice
    at_limit = protocol.publish(local.randomized_response(6, epsilon=5.0))
    assert 0 <= protocol.randomize(at_limit, 3, rng=SeededRandomSource(0)).output < 6
