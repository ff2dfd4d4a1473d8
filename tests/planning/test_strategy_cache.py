"""The on-disk strategy cache: structure-preserving round trips, keys, damaged entries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpsql.matrix import workloads
from dpsql.planning import strategy_cache


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DPSQL_CACHE_DIR", str(tmp_path))
    return tmp_path


def _stack() -> workloads.Workload:
    rng = np.random.default_rng(2)
    return workloads.VStack([
        workloads.Weighted(3.0, workloads.Kron([workloads.Identity(300), workloads.Total(400)])),
        workloads.Kron([workloads.Total(300), workloads.Explicit(rng.integers(0, 5, (6, 400)).astype(float))]),
    ])


def test_a_stack_round_trips_with_its_structure() -> None:
    A = _stack()
    W = workloads.Kron([workloads.AllRange(300), workloads.Prefix(400)])
    built = strategy_cache.cached(W, noise="laplace", template="t", build=lambda: A)
    assert built is A
    read = strategy_cache.cached(W, noise="laplace", template="t", build=lambda: pytest.fail("rebuilt"))
    assert isinstance(read, workloads.VStack) and read.shape == A.shape
    first, _ = read.blocks
    assert isinstance(first, workloads.Weighted) and first.weight == 3.0
    assert [type(f) for f in workloads.kron_factors(first.base)] == [workloads.Identity, workloads.Total]
    x = np.random.default_rng(3).random(A.shape[1])
    np.testing.assert_array_equal(read @ x, A @ x)
    entry = next(strategy_cache.cache_dir().glob("*.npz"))
    assert entry.stat().st_size < 20_000  # no dense 120,000-cell factor was written


def test_keys_separate_noise_and_template_and_damaged_entries_are_rebuilt() -> None:
    W = workloads.AllRange(8)
    keys = {strategy_cache.gram_key(W, noise=n, template=t) for n in ("gaussian", "laplace") for t in ("a", "b")}
    assert len(keys) == 4
    strategy_cache.cached(W, noise="gaussian", template="a", build=lambda: workloads.Identity(8))
    entry = next(strategy_cache.cache_dir().glob("*.npz"))
    entry.write_bytes(b"not a strategy")
    rebuilt = strategy_cache.cached(W, noise="gaussian", template="a", build=lambda: workloads.Total(8))
    assert isinstance(rebuilt, workloads.Total)
    again = strategy_cache.cached(W, noise="gaussian", template="a", build=lambda: pytest.fail("rebuilt"))
    assert isinstance(again, workloads.Total) and again.shape == (1, 8)
