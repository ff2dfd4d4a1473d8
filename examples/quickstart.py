"""Quickstart: answer every range query over a 1,024-bin histogram with the matrix mechanism.

Run: python examples/quickstart.py
"""

from __future__ import annotations

import numpy as np

from dpsql import strategies
from dpsql.matrix import workloads
from dpsql.planning import accuracy, mechanism

n = 1024
W = workloads.AllRange(n)  # 524,800 range queries, applied by cumulative sums, never materialised
x = np.random.default_rng(7).poisson(30, size=n)  # public example data: counts per bin

bound = accuracy.svd_bound(W)
print(f"{W.shape[0]:,} range queries over {n} cells; SVD lower bound on total error: {bound:.4g}")
choices = {
    "identity": strategies.identity(n),
    "hierarchical (b=2)": strategies.hierarchical(n, branching=2),
    "hierarchical (b=4)": strategies.hierarchical(n, branching=4),
    "Haar wavelet": strategies.wavelet(n),
}
errors = {name: accuracy.expected_error(W, A, noise="gaussian") for name, A in choices.items()}
for name, total in errors.items():
    print(f"  {name:<20} expected error / bound = {total / bound:6.3f}")

best = min(errors, key=errors.__getitem__)
release = mechanism.measure(choices[best], x, rho=0.1)  # 0.1-zCDP, exact discrete Gaussian noise
answers = mechanism.answer(W, release)
truth = W @ x
rows = [0, n - 1, W.shape[0] - 1]  # [0,0], [0, n-1] (the total) and [n-1, n-1]
for row in rows:
    print(f"  query {row:>6}: {answers.values[row]:10.1f} ± {answers.stddevs[row]:5.1f}   (true {truth[row]})")
rmse = np.sqrt(np.mean((answers.values - truth) ** 2))
print(f"{best}: empirical RMSE {rmse:.2f}, predicted {np.sqrt(np.mean(answers.variances)):.2f}")
