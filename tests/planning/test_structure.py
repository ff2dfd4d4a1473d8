"""dpsql.planning.structure: workloads' exact structure digests, the planning caches' keys."""

from __future__ import annotations

import numpy as np

from dpsql.matrix import workloads
from dpsql.planning import plan_cache, structure


def test_structure_digests_are_memoised_exactly_and_by_content() -> None:
    """A workload's digest is the same memoised or not, and the same for equal content built apart."""
    def build(weight: float) -> workloads.Workload:
        product = workloads.Kron([workloads.Explicit(np.arange(6.0).reshape(2, 3)), workloads.Prefix(4)])
        totals = workloads.Kron([workloads.Identity(3), workloads.Total(4)])
        return workloads.VStack([product, workloads.Weighted(weight, totals)])

    W = build(2.0)
    first = structure.structure_digest(W)
    assert structure.structure_digest(W) is first  # from the memo
    assert structure.structure_digest(build(2.0)) == first  # the same content built afresh
    assert structure.structure_digest(build(2.5)) != first
    key = plan_cache.decision_key(W, noise="laplace", options=[], extra={})
    assert plan_cache.decision_key(build(2.0), noise="laplace", options=[], extra={}) == key
