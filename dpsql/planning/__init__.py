"""Choosing what to measure and at what noise: candidate strategies scored by exact expected
error, the budget split across measurements, statement weights, truncated sums, the matrix
mechanism itself (calibrate, measure, reconstruct, answer), and the caches of plans and
optimized strategies. No SQL and no database.
"""
