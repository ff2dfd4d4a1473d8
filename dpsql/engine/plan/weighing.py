"""Each statement's weight in the batch objective, and the per-row bounds that relate a block's
measurement to answering it alone (``dpsql.planning.weights`` has the math)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpsql.engine.measuring.order_statistics import alone_sensitivity
from dpsql.errors import ProgrammingError
from dpsql.noise import Noise
from dpsql.planning import weights as weighting
from dpsql.schema import Column, measure_quantum, square_bound, square_quantum
from dpsql.sql.compile import Block, CompiledGroup, CompiledStatement
from dpsql.sql.vectors import DataVector


def statement_weights_of(weights: Sequence[float] | None, statements: int) -> tuple[float, ...]:
    """The statements' weights: one positive finite number per statement (default all 1).

    Raises ProgrammingError naming the problem (nothing is run or charged).
    """
    if weights is None:
        return (1.0,) * statements
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ProgrammingError("weights= must be a list of positive numbers, one per statement in statement order; "
                               f"got {type(weights).__name__}. Nothing was run or charged.")
    if len(weights) != statements:
        raise ProgrammingError(f"weights= has {len(weights)} number(s) but the batch has {statements} statement(s); "
                               "give one positive weight per statement, in statement order. "
                               "Nothing was run or charged.")
    result = []
    for index, value in enumerate(weights):
        number = float(value) if isinstance(value, (int, float, Fraction)) and not isinstance(value, bool) else math.nan
        if not math.isfinite(number) or number <= 0:
            raise ProgrammingError(f"weights[{index}] = {value!r} (statement {index + 1}) "
                                   "is not a positive finite number; each statement's weight must be > 0 "
                                   "(1 is the default). Nothing was run or charged.")
        result.append(number)
    return tuple(result)


@dataclass(frozen=True, slots=True, kw_only=True)
class Weighing:
    """Each statement's weight w_s, and how it becomes the block weights c_b (``dpsql.planning.weights``)."""

    weights: tuple[float, ...]
    noise: Noise

    def blocks(self, group: CompiledGroup, statements: Sequence[CompiledStatement], members: Sequence[int],
               columns: Mapping[str, Column]) -> list[float]:
        """c_b of each block of ``group``, whose ``statements`` are the batch's ``members``."""
        found = [1.0] * len(group.blocks)
        for member, statement in zip(members, statements):
            positions = [p for output in statement.aggregates for p in output.blocks]
            answers = sum(group.blocks[p].workload.shape[0] for p in positions)
            for p in positions:
                found[p] = weighting.block_weight(self.weights[member], answers, len(positions), self.noise,
                                                  bound_ratio(group.blocks[p], columns)
                                                  / alone_sensitivity(group.blocks[p], self.noise))
        return found


def value_scale(column: Column, squared: bool = False) -> tuple[float, int]:
    """(quantum, B) of a sum column: sums count in quanta, one row moving a cell by at most B
    (``squared``: of its sum of squares, B = ⌈max(lo², hi²)/quantum⌉)."""
    if squared:
        quantum = square_quantum(column)
        return quantum, max(1, math.ceil(square_bound(column) / quantum))
    quantum = measure_quantum(column)
    low, high = column.bounds
    return quantum, max(1, math.ceil(max(abs(low), abs(high)) / quantum))


def row_bound(vector: DataVector, columns: Mapping[str, Column]) -> float:
    """β: the most one row moves one answer of this vector, in data units (B·quantum for sums)."""
    if not vector.is_sum:
        return 1.0
    quantum, steps = value_scale(columns[vector.summed], vector.squared)
    return quantum * steps


def bound_ratio(block: Block, columns: Mapping[str, Column]) -> float:
    """ρ_b: the per-row bound the measurement uses for this block (its data vector's β times the
    block's scale) over the bound of answering it alone (β of what the block answers)."""
    return block.scale * row_bound(block.data, columns) / row_bound(block.kind, columns)
