"""A stacked workload's partition form reads its blocks one at a time and stops at the first that
breaks the partition (issue 31): the answer is the one read from every block, the work is not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.matrix.partitions import partition_form
from dpsql.matrix.workloads import Explicit, Identity, Ranges, VStack, Weighted


def _brute_partition(dense: np.ndarray) -> bool:
    """Whether the rows' supports are pairwise equal or disjoint and each row weighs its cells equally."""
    supports = []
    for row in dense:
        read = row != 0
        if read.any() and len(set(row[read])) > 1:
            return False
        supports.append(read)
    for a in supports:
        for b in supports:
            if (a & b).any() and not np.array_equal(a, b):
                return False
    return True


class _ReadRanges(Ranges):
    """Ranges that record when a partition form reads their intervals (``lo``)."""

    def __init__(self, n: int, intervals: list[tuple[int, int]], reads: list[int]) -> None:
        super().__init__(n, intervals)
        self.reads = reads

    @property
    def lo(self) -> np.ndarray:
        self.reads.append(1)
        return super().lo


def test_a_stack_that_is_no_partition_stops_at_the_breaking_block() -> None:
    n, reads = 100, []
    later = [_ReadRanges(n, [(i, i + 1)], reads) for i in range(0, 98, 2)] * 4
    stack, partition = (VStack([Identity(n), Ranges(n, [(3, 40)]), *later]),
                        VStack([Identity(n), *(_ReadRanges(n, [(i, i)], reads) for i in range(3))]))
    reads.clear()  # building a stack reads each block's shape
    assert partition_form(stack) is None
    assert reads == []  # the overlapping range ends the search: none of the ~200 blocks after it is read
    assert partition_form(partition) is not None and reads  # a partition reads every block


@pytest.mark.parametrize("seed", range(40))
def test_stacked_forms_match_the_dense_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 12))
    blocks = []
    for _ in range(int(rng.integers(1, 5))):
        kind = rng.integers(3)
        if kind == 0:
            lo = int(rng.integers(n))
            block = Ranges(n, [(lo, int(rng.integers(lo, n)))])
        elif kind == 1:
            cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(0, 3)), replace=False))
            edges = [0, *cuts.tolist(), n]
            block = Ranges(n, [(a, b - 1) for a, b in itertools.pairwise(edges)])
        else:
            block = Explicit((rng.random((int(rng.integers(1, 3)), n)) < 0.3).astype(float))
        blocks.append(Weighted(float(rng.integers(1, 4)), block) if rng.random() < 0.3 else block)
    W = VStack(blocks)
    dense = W.dense()
    found = partition_form(W)
    assert (found is not None) == _brute_partition(dense)
    if found is not None:
        assert found.identity_error() == pytest.approx(float(np.sum(dense**2)), rel=1e-12)
        assert found.parts == len({tuple(row != 0) for row in dense if np.any(row)})


def test_an_explicit_factor_s_partition_is_read_once_and_kept_read_only() -> None:
    """partitions keeps an Explicit factor's form per object: a stack read again (a search's candidates share
    compiled blocks) gives the same form, and the kept arrays cannot be changed in place."""
    from dpsql.matrix import partitions
    from dpsql.matrix.workloads import Explicit, Kron, VStack

    rows = Explicit(np.array([[1.0, 1, 0, 0], [0, 0, 1, 1]]))
    W = VStack([Kron([rows, Explicit(np.ones((1, 3)))]), Kron([Explicit(np.array([[1.0, 1, 0, 0]])),
                                                                Explicit(np.ones((1, 3)))])])
    first, again = partitions.partition_form(W), partitions.partition_form(W)
    assert first is not None and again is not None
    assert first.identity_error() == again.identity_error() and first.parts_error() == again.parts_error()
    kept = partitions.partition_form(rows)
    assert kept is not None and kept is partitions.partition_form(rows)
    assert not kept.factors[0].weights.flags.writeable


def _arrays(W: VStack) -> list[np.ndarray] | None:
    """Every array of W's partition form and each cell's part, for exact comparison."""
    from dpsql.matrix import partitions

    found = partitions.partition_form(W)
    if found is None:
        return None
    owner, _ = partitions.part_of_cell(W)
    return [owner, *(a for f in found.factors for a in (f.weights, f.sizes, f.part, np.array([f.parts])))]


@pytest.mark.parametrize("seed", range(30))
def test_kept_product_forms_and_flat_blocks_match_the_forms_computed_afresh(seed: int) -> None:
    """Kron blocks' forms and stacks' flattened later blocks are kept per object: a stack read again
    (or another stack of the same blocks) gives bit for bit what reading them afresh gives."""
    from dpsql.matrix.workloads import Kron

    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(1, 5)) for _ in range(int(rng.integers(1, 4)))]

    def factor(n: int) -> Explicit:
        return Explicit(np.ones((1, n)) if rng.random() < 0.4 else
                        np.eye(n)[rng.permutation(n)][: int(rng.integers(1, n + 1))] * float(rng.integers(1, 3)))

    blocks = [Kron([factor(n) for n in sizes]) for _ in range(int(rng.integers(2, 5)))]
    stacks = [VStack([blocks[i] for i in rng.permutation(len(blocks))]) for _ in range(3)]
    kept = [_arrays(W) for W in stacks] + [_arrays(W) for W in stacks]
    copies = [Kron([Explicit(np.array(f.matrix)) for f in block.factors]) for block in blocks]  # not kept yet
    fresh = [_arrays(VStack([copies[blocks.index(b)] for b in W.blocks])) for W in stacks] * 2
    for a, b in zip(kept, fresh, strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_stacks_form_is_read_once_per_stack_and_kept_read_only() -> None:
    """The planning-size check and the planner both read a statement group's stack: its form (and each
    cell's part) is computed once per stack object, its arrays read-only, equal to a new stack's."""
    from dpsql.matrix import partitions

    blocks = [Ranges(6, [(0, 1), (2, 5)]), Explicit(np.array([[0.0, 0, 2, 2, 2, 2], [3, 3, 0, 0, 0, 0]]))]
    W = VStack(blocks)
    first = partitions.partition_form(W)
    assert first is not None and first is partitions.partition_form(W)
    assert not any(a.flags.writeable for f in first.factors for a in (f.weights, f.sizes, f.part))
    owner, parts = partitions.part_of_cell(W)
    assert partitions.part_of_cell(W)[0] is owner and not owner.flags.writeable
    fresh = VStack(list(blocks))
    again = partitions.partition_form(fresh)
    assert again is not None and again is not first
    assert all(np.array_equal(a, b) for f, g in zip(first.factors, again.factors, strict=True)
               for a, b in ((f.weights, g.weights), (f.sizes, g.sizes), (f.part, g.part)))
    assert np.array_equal(partitions.part_of_cell(fresh)[0], owner) and partitions.part_of_cell(fresh)[1] == parts
