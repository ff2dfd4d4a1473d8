"""A store's kept information (``dpsql.releases.information``): pools it returns are bit for bit the
pools built afresh (``dpsql.releases.gls.pool``), whatever releases came before; the same members
again cost no reduction and no factorisation; a release over new cells adds only its own reduction
to the kept sums and is factored once; planned (not kept) measurements extend the kept sums but are
never remembered.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.matrix.workloads import Explicit
from dpsql.releases import information
from dpsql.releases.gls import Pool, pool
from dpsql.releases.information import KeptInformation, Members
from dpsql.releases.kept import KeptMeasurement
from dpsql.releases.reduce import Meet, cell_map, meet, reduce, refinement

GROUP = (("a", np.array([0, 0, 1, 1, 2, 2], dtype=np.int64)),)
PLANNED = 2**62


def _member(rng: np.random.Generator, cells: np.ndarray, release: int, index: int = 0) -> KeptMeasurement:
    axes = (("a", cells),)
    n = int(cells.max()) + 1
    rows = n + int(rng.integers(0, 3))
    return KeptMeasurement(table="t", vector="count", axes=axes, strategy=Explicit(rng.normal(size=(rows, n))),
                           y=rng.normal(size=rows), noise_variance=float(rng.uniform(0.5, 2.0)), release=release,
                           index=index)


def _layout(classes: list[list[KeptMeasurement]]) -> tuple[tuple[tuple[str, np.ndarray], ...], np.ndarray, list[Meet]]:
    target = refinement(GROUP, [ms[0].axes for ms in classes], 10**6)
    lift = cell_map(target, GROUP)
    found = [meet(ms[0].axes, target) for ms in classes]
    for each in found:
        lift = np.where(each.of_group < 0, -1, lift)
    return target, lift, found


def _part(ms: list[KeptMeasurement], found: Meet) -> tuple[np.ndarray, np.ndarray]:
    return reduce(sum(m.information()[0] for m in ms), sum(m.information()[1] for m in ms), found)


def _fresh(classes: list[list[KeptMeasurement]]) -> Pool:
    _, lift, found = _layout(classes)
    made = pool([m for ms in classes for m in ms], [_part(ms, f) for ms, f in zip(classes, found)], lift)
    assert made is not None
    return made


class _Counted:
    """The kept information, counting the reductions it asks for and the factorisations it makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kept = KeptInformation()
        self.parts: list[int] = []
        self.factored = 0
        original = information.combined

        def combined(*args: object, **kwargs: object) -> tuple[Pool | None, object]:
            self.factored += 1
            return original(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(information, "combined", combined)

    def pool(self, classes: list[list[KeptMeasurement]]) -> Pool:
        target, lift, found = _layout(classes)
        names: list[Members] = [tuple(m.identity for m in ms) for ms in classes]

        def part(i: int) -> tuple[np.ndarray, np.ndarray]:
            self.parts.append(i)
            return self.kept.reduction(names[i], found[i].of_group.tobytes() + found[i].of_measured.tobytes(),
                                       lambda: _part(classes[i], found[i]),
                                       all(m.release != PLANNED for m in classes[i]))

        made = self.kept.pool(("t", "count", target[0][1].tobytes()), names,
                              [all(m.release != PLANNED for m in ms) for ms in classes],
                              [m for ms in classes for m in ms], lift, part)
        assert made is not None
        return made


def _same(kept: Pool, fresh: Pool) -> None:
    """Bit for bit the same pool (the same sums in the same order, the same factorisation)."""
    for name in ("lift", "basis", "whitened", "estimate"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(fresh, name))
    assert [m.identity for m in kept.members] == [m.identity for m in fresh.members]


@pytest.mark.parametrize("seed", range(6))
def test_kept_pools_are_the_fresh_pools_and_each_member_set_is_factored_once(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    counted = _Counted(monkeypatch)
    coarse = np.array([0, 0, 0, 0, 1, 1], dtype=np.int64)  # coarser than the group's cells: the target stays
    first, second = [_member(rng, GROUP[0][1], 1)], [_member(rng, coarse, 2)]
    _same(counted.pool([first]), _fresh([first]))
    assert (counted.factored, counted.parts) == (1, [0])
    _same(counted.pool([first]), _fresh([first]))  # the same members again: no work
    assert (counted.factored, counted.parts) == (1, [0])
    _same(counted.pool([first, second]), _fresh([first, second]))  # a release over new cells extends the sums
    assert (counted.factored, counted.parts) == (2, [0, 1])
    _same(counted.pool([first, second]), _fresh([first, second]))
    assert counted.factored == 2
    joined = [*first, _member(rng, GROUP[0][1], 3)]  # a member over the first class's cells: that class again
    _same(counted.pool([joined, second]), _fresh([joined, second]))
    assert counted.factored == 3 and counted.parts[2:] == [0, 1]
    planned = [_member(rng, np.array([0, 0, 1, 1, 1, 1], dtype=np.int64), PLANNED)]
    for _ in range(2):  # a planned measurement: summed onto the kept sums, factored, never remembered
        _same(counted.pool([joined, second, planned]), _fresh([joined, second, planned]))
    assert counted.factored == 5 and counted.parts[4:] == [2, 2]
    _same(counted.pool([joined, second]), _fresh([joined, second]))  # the kept pool is still there
    assert counted.factored == 5
    crossing = [_member(rng, np.array([0, 0, 0, 1, 1, 1], dtype=np.int64), 4)]  # refines the target: a new layout
    _same(counted.pool([joined, second, crossing]), _fresh([joined, second, crossing]))
    assert counted.factored == 6 and counted.parts[6:] == [0, 1, 2]


def test_a_full_cache_forgets_and_still_answers_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    counted = _Counted(monkeypatch)
    counted.kept.pool_bytes = counted.kept.reduction_bytes = 1  # nothing fits: every call starts again
    members = [_member(rng, GROUP[0][1], 1)]
    for _ in range(2):
        _same(counted.pool([members]), _fresh([members]))
    assert counted.factored == 2


def test_a_layout_is_computed_once_and_is_the_fresh_one() -> None:
    kept = KeptInformation()
    measured = [(("a", np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)),), GROUP]
    found = kept.layout(GROUP, measured, 10**6)
    assert kept.layout(GROUP, [tuple((k, c.copy()) for k, c in axes) for axes in measured], 10**6) is found
    target, lift, meets = _layout([[_member(np.random.default_rng(0), axes[0][1], 1)] for axes in measured])
    assert found.key == tuple((k, c.tobytes()) for k, c in target)
    np.testing.assert_array_equal(found.lift, lift)
    assert all(np.array_equal(a.of_group, b.of_group) and np.array_equal(a.of_measured, b.of_measured)
               for a, b in zip(found.meets, meets, strict=True))
