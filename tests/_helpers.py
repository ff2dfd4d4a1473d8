"""Hypothesis helpers shared by the operator test modules."""

from __future__ import annotations

from hypothesis import strategies as st


def groupings(dims: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """Coarsenings of a domain's factorisation: (2,3,2) -> (2,3,2), (6,2), (2,6) or (12,)."""

    def merge(cuts: list[bool]) -> tuple[int, ...]:
        groups, current = [], dims[0]
        for d, cut in zip(dims[1:], cuts):
            if cut:
                groups.append(current)
                current = d
            else:
                current *= d
        return (*groups, current)

    return st.lists(st.booleans(), min_size=len(dims) - 1, max_size=len(dims) - 1).map(merge)
