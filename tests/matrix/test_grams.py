"""matrix.grams.collected: a Gram's Kronecker terms that differ in one factor summed into one — the same
operator (to rounding), fewer terms — and accuracy's scores on it equal to scoring block by block."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql import strategies as strat
from dpsql.matrix.grams import collected
from dpsql.matrix.linalg import gram_terms, pinv_gram, trace_of_product
from dpsql.matrix.workloads import DisjointSum, Explicit, Kron, VStack, Weighted, Workload
from dpsql.planning import accuracy

SIZES = (5, 3, 4)


@st.composite
def stacks(draw: st.DrawFn) -> VStack:
    """A stack of Kronecker blocks over 5 × 3 × 4 cells whose factors come from a small pool (rows of ones,
    masks, memberships), so that blocks often agree on all factors but one; some weighted, some sums."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pool = [[np.ones((1, n)), (rng.random((1, n)) < 0.5).astype(float), np.eye(n)[rng.integers(0, n, 2)],
             rng.integers(0, 3, (2, n)).astype(float)] for n in SIZES]

    def block() -> Workload:
        factors = [Explicit(pool[axis][draw(st.integers(0, 3))]) for axis in range(len(SIZES))]
        kron = Kron(factors)
        return Weighted(draw(st.sampled_from([0.5, 2.0, -3.0])), kron) if draw(st.booleans()) else kron

    blocks: list[Workload] = [block() for _ in range(draw(st.integers(1, 30)))]
    if draw(st.booleans()):  # a WHERE with OR: disjoint Kronecker boxes, whose Gram has cross terms
        left = Kron([Explicit(np.array([[1.0, 1, 0, 0, 0]])), Explicit(np.ones((1, 3))), Explicit(np.ones((1, 4)))])
        right = Kron([Explicit(np.array([[0.0, 0, 0, 1, 1]])), Explicit(np.eye(3)[:1]), Explicit(np.ones((1, 4)))])
        blocks.append(DisjointSum([left, right]))
    return VStack(blocks)


@settings(max_examples=60, deadline=None)
@given(stacks())
def test_the_collected_gram_is_the_gram_in_fewer_terms(W: VStack) -> None:
    G = W.gram()
    short = collected(G)
    np.testing.assert_allclose(short.dense(), G.dense(), rtol=1e-12, atol=1e-12)
    assert len(gram_terms(short)) <= len(gram_terms(G))


@settings(max_examples=40, deadline=None)
@given(stacks(), st.sampled_from(["identity", "H2", "wavelet"]))
def test_expected_errors_on_the_collected_gram_equal_those_block_by_block(W: VStack, name: str) -> None:
    """v·trace(G M) read on the collected Gram equals v·Σ_b trace(G_b M), each block's Gram traced alone."""
    factors = {"identity": strat.identity, "H2": lambda n: strat.hierarchical(n, 2), "wavelet": strat.wavelet}[name]
    A = strat.kron([factors(n) for n in SIZES])
    M = pinv_gram(A)
    by_block = accuracy.unit_noise_variance(A, "laplace") * sum(trace_of_product(b.gram(), M) for b in W.blocks)
    assert np.isclose(accuracy.expected_error(W, A, noise="laplace"), by_block, rtol=1e-10, atol=0.0)


def test_ranges_over_one_column_of_a_group_collapse_into_one_term() -> None:
    """A thousand one-column counts of a two-column group (the other factor a row of ones) are one term."""
    rng = np.random.default_rng(5)
    masks = [np.zeros((1, 40)) for _ in range(1000)]
    for mask in masks:
        low, high = sorted(rng.integers(0, 40, 2))
        mask[0, low:high + 1] = 1.0
    W = VStack([Kron([Explicit(mask), Explicit(np.ones((1, 6)))]) for mask in masks])
    short = collected(W.gram())
    assert len(gram_terms(short)) == 1
    np.testing.assert_allclose(short.dense(), W.gram().dense(), rtol=1e-12)


def test_a_single_term_or_a_non_square_factor_is_left_as_it_is() -> None:
    G = Kron([Explicit(np.eye(3)), Explicit(np.ones((2, 2)))])
    assert collected(G) is G
    assert collected(Weighted(2.0, G)).dense().tolist() == Weighted(2.0, G).dense().tolist()


def test_factors_are_told_apart_by_their_entries_not_their_objects() -> None:
    """Blocks whose other factor is equal in entries but built apart (one with −0.0 for 0.0) are one term; a
    factor differing in one entry keeps its own. A second Gram over the same factor objects (their digests
    kept) collects the same way."""
    signed, unsigned = Explicit(np.array([[1.0, 1.0, -0.0, 1.0]])), Explicit(np.array([[1.0, 1.0, 0.0, 1.0]]))
    ones, ones_again = Explicit(np.ones((1, 4))), Explicit(np.ones((1, 4)))
    different = Explicit(np.array([[1.0, 2.0, 0.0, 1.0]]))
    W = VStack([Kron([Explicit(np.eye(3)[:1]), signed]), Kron([Explicit(np.eye(3)[1:2]), unsigned]),
                Kron([Explicit(np.eye(3)[2:]), different]), Kron([Explicit(np.ones((1, 3))), ones]),
                Kron([Explicit(np.eye(3)), ones_again])])
    for _ in range(2):
        short = collected(W.gram())
        assert len(gram_terms(short)) == 3  # signed with unsigned, ones with ones_again, different alone
        np.testing.assert_allclose(short.dense(), W.gram().dense(), rtol=1e-12)
