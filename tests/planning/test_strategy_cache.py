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
    keys = {strategy_cache.strategy_key(W, noise=n, template=t) for n in ("gaussian", "laplace") for t in ("a", "b")}
    assert len(keys) == 4
    strategy_cache.cached(W, noise="gaussian", template="a", build=lambda: workloads.Identity(8))
    entry = next(strategy_cache.cache_dir().glob("*.npz"))
    entry.write_bytes(b"not a strategy")
    rebuilt = strategy_cache.cached(W, noise="gaussian", template="a", build=lambda: workloads.Total(8))
    assert isinstance(rebuilt, workloads.Total)
    again = strategy_cache.cached(W, noise="gaussian", template="a", build=lambda: pytest.fail("rebuilt"))
    assert isinstance(again, workloads.Total) and again.shape == (1, 8)


def _group(weight: float, entry: float = 1.0, order: int = 0) -> workloads.Workload:
    """A statement group's workload as the planner sees it: weighted Kronecker blocks, built afresh."""
    counts = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, entry, 1.0]])
    blocks = [workloads.Kron([workloads.Explicit(counts), workloads.Total(3)]),
              workloads.Weighted(weight, workloads.Kron([workloads.Identity(4), workloads.Prefix(3)]))]
    return workloads.VStack(blocks[::-1] if order else blocks)


def test_strategy_keys_are_equal_for_equal_workloads_and_differ_otherwise() -> None:
    """The key is a function of the workload's exact structure: the same for one built apart with equal
    content, different when an entry, a weight or the blocks' order differ (a different workload may
    have a different optimized strategy), and never formed from a Gram (FORMAT_VERSION 5)."""
    key = strategy_cache.strategy_key(_group(2.0), noise="laplace", template="HDMM-Kron")
    assert strategy_cache.strategy_key(_group(2.0), noise="laplace", template="HDMM-Kron") == key
    others = {strategy_cache.strategy_key(W, noise="laplace", template="HDMM-Kron")
              for W in (_group(2.5), _group(2.0, entry=2.0), _group(2.0, order=1))}
    assert key not in others and len(others) == 3


def test_strategy_keys_never_form_a_gram(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: workloads.Workload) -> workloads.Workload:
        raise AssertionError("a Gram was formed")

    for kind in (workloads.Kron, workloads.VStack, workloads.Weighted, workloads.Explicit):
        monkeypatch.setattr(kind, "gram", refused)
    strategy_cache.strategy_key(_group(3.0), noise="gaussian", template="HDMM-marginals")
