"""AVG is not clipped to the measure bounds (issue 14, item 7): the returned value is the noisy
ratio S/C that its delta-method standard error describes, so its z-scores are centred."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

RUNS = 40


@pytest.mark.slow
def test_avg_near_its_lower_bound_is_the_unclipped_ratio_with_centred_z_scores() -> None:
    """300 rows of 0 or 1 with bounds [0, 1000] at ε = 0.5: the AVG's standard error (about 19)
    dwarfs the true mean (about 0.5), so about half the noisy ratios are negative. They are
    returned as they are (a clipped answer would be 0 with a mean z-score far above 0), and the
    z-scores against the truth have mean within 4.5/√R of 0 and variance within 1.6·6·√(2/R) of 1."""
    rng = np.random.default_rng(7)
    con = duckdb.connect()
    con.register("source", pa.table({"x": rng.integers(0, 2, 300)}))
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    declared = Schema.load({"tables": {"t": {"columns": {"x": {"type": "integer", "lower": 0, "upper": 1000,
                                                               "resolution": 1}}}}})
    ((truth,),) = con.execute("SELECT AVG(x) FROM t").fetchall()
    prepared = engine.prepare("SELECT AVG(x) AS a FROM t", declared, PrivacyCost(epsilon=0.5))
    backend, values, z = DuckDBBackend(con), [], []
    for seed in range(RUNS):
        (result,) = engine.run(prepared, backend=backend, budget=Budget(epsilon=100.0), rng=SeededRandomSource(seed))
        row = result.to_pylist()[0]
        values.append(row["a"])
        z.append((row["a"] - truth) / row["a_stddev"])
    assert sum(v < 0 for v in values) >= RUNS // 4
    scores = np.array(z)
    assert abs(scores.mean()) < 4.5 / math.sqrt(RUNS)
    assert abs(scores.var(ddof=1) - 1) < 1.6 * 6 * math.sqrt(2 / RUNS)
