"""Linear queries over ResidualPlanner's marginals: answers and exact variances against dense
references built from the selection's own covariance."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.errors import ShapeError
from dpsql.residual import planner as residual
from dpsql.residual import queries as mq

SIZES = [3, 4, 2, 5]
MARGINALS = [(0, 1), (1, 3), (0, 2, 3), (2,)]


@pytest.fixture(scope="module")
def selection() -> residual.Selection:
    return residual.select(SIZES, MARGINALS, rho=0.25, weights=[1.0, 2.0, 0.5, 3.0])


def dense(queries: mq.MarginalQueries) -> np.ndarray:
    total = np.zeros((queries.rows, int(np.prod(queries.shape))))
    for term in queries.terms:
        out: np.ndarray = np.ones((1, 1))
        for factor in term:
            out = np.kron(out, factor)
        total += out
    return total


def lookup(selection: residual.Selection):  # type: ignore[no-untyped-def]
    return dict(zip(selection.closure, selection.sigma2.tolist())).__getitem__


def random_queries(rng: np.random.Generator, marginal: tuple[int, ...], terms: int) -> mq.MarginalQueries:
    rows = [int(rng.integers(1, 4)) for _ in marginal]
    return mq.MarginalQueries(marginal=marginal, terms=tuple(
        tuple(rng.integers(0, 2, (r, SIZES[i])).astype(float) for r, i in zip(rows, marginal)) for _ in range(terms)))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), which=st.sampled_from(MARGINALS), terms=st.integers(1, 3))
def test_answers_and_variances_match_dense_references(seed: int, which: tuple[int, ...], terms: int) -> None:
    sel = residual.select(SIZES, MARGINALS, rho=0.25, weights=[1.0, 2.0, 0.5, 3.0])
    rng = np.random.default_rng(seed)
    queries = random_queries(rng, which, terms)
    F = dense(queries)
    table = rng.normal(size=[SIZES[i] for i in which])
    np.testing.assert_allclose(mq.answer(queries, table), F @ table.reshape(-1), rtol=1e-12, atol=1e-12)
    covariance = sel.covariance(which, which)
    np.testing.assert_allclose(mq.variances(queries, lookup(sel)), np.diag(F @ covariance @ F.T),
                               rtol=1e-10, atol=1e-12)


def test_group_by_blocks_have_the_exact_selection_weight(selection: residual.Selection) -> None:
    """Rows of the identity (some cells left out, as an unreported outside cell): the block's total
    variance is w·cells(A)·V_A with w = Π rᵢ/nᵢ = selection_weight."""
    a = (0, 2, 3)
    picks = [np.eye(SIZES[i])[: SIZES[i] - (1 if i != 2 else 0)] for i in a]
    queries = mq.MarginalQueries(marginal=a, terms=(tuple(picks),))
    w = math.prod(p.shape[0] / p.shape[1] for p in picks)
    assert mq.selection_weight(queries) == pytest.approx(w)
    cells = math.prod(SIZES[i] for i in a)
    assert mq.variances(queries, lookup(selection)).sum() == pytest.approx(w * cells * selection.variance(a), rel=1e-12)


def test_the_total_has_no_factors(selection: residual.Selection) -> None:
    total = mq.MarginalQueries(marginal=(), terms=((),))
    assert mq.answer(total, np.array(17.0)).tolist() == [17.0]
    assert mq.variances(total, lookup(selection)).tolist() == pytest.approx([selection.variance(())])


def test_zero_blocks_and_shape_errors() -> None:
    zero = mq.MarginalQueries(marginal=(0,), terms=((np.zeros((1, 3)),),))
    assert mq.is_zero(zero) and not mq.is_zero(mq.MarginalQueries(marginal=(0,), terms=((np.eye(3),),)))
    with pytest.raises(ShapeError, match="at least one"):
        mq.MarginalQueries(marginal=(0,), terms=())
    with pytest.raises(ShapeError, match="one factor per attribute"):
        mq.MarginalQueries(marginal=(0, 1), terms=((np.eye(3),),))
    with pytest.raises(ShapeError, match="same shapes"):
        mq.MarginalQueries(marginal=(0,), terms=((np.eye(3),), (np.ones((1, 3)),)))
    with pytest.raises(ShapeError, match="must have shape"):
        mq.answer(mq.MarginalQueries(marginal=(0,), terms=((np.eye(3),),)), np.ones(4))

