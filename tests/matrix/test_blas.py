"""dpsql.matrix.blas: one BLAS thread inside planning, the previous counts restored after."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dpsql import engine
from dpsql.budget.accounting import PrivacyCost
from dpsql.matrix import blas
from dpsql.planning import planner
from dpsql.schema import Schema

pytestmark = pytest.mark.skipif(not blas.threads(), reason="no OpenBLAS mapped in this process")


def test_one_thread_inside_and_the_counts_restored_after() -> None:
    before = blas.threads()
    with blas.single_threaded():
        assert blas.threads() == [1] * len(before)
        with blas.single_threaded():  # re-entrant: the inner block does not restore early
            pass
        assert blas.threads() == [1] * len(before)
        np.linalg.eigh(np.eye(64))  # BLAS still works
    assert blas.threads() == before


def test_counts_are_restored_when_the_block_raises() -> None:
    before = blas.threads()
    with pytest.raises(ZeroDivisionError), blas.single_threaded():
        1 / 0  # noqa: B018
    assert blas.threads() == before


def test_prepare_plans_with_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[int]] = []
    plan = planner.plan

    def recorded(*args: object, **kwargs: object) -> planner.Plan:
        seen.append(blas.threads())
        return plan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner, "plan", recorded)
    schema = Schema.load({"tables": {"t": {"columns": {"x": {"type": "integer", "lower": 0, "upper": 15}}}}})
    before = blas.threads()
    engine.prepare("SELECT COUNT(*) FROM t WHERE x < 4", schema, PrivacyCost(epsilon=1.0))
    assert seen and all(counts == [1] * len(before) for counts in seen)
    assert blas.threads() == before


def test_threads_of_other_blocks_are_counted_together() -> None:
    before = blas.threads()
    inside = threading.Event()
    leave = threading.Event()

    def hold() -> None:
        with blas.single_threaded():
            inside.set()
            leave.wait(5)

    worker = threading.Thread(target=hold)
    worker.start()
    inside.wait(5)
    with blas.single_threaded():
        pass
    assert blas.threads() == [1] * len(before)  # the other block is still inside
    leave.set()
    worker.join()
    assert blas.threads() == before
