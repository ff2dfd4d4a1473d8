"""Measurement strategies: the queries A the matrix mechanism actually answers with noise.

Standard data-independent strategies over one ordered attribute (identity, hierarchical H_b,
Haar wavelet), the workload itself, Kronecker products of per-attribute strategies, and
workload-optimized ones: HDMM — ``opt0`` (OPT₀, one attribute), ``opt_kron`` (OPT_⊗),
``opt_union`` (OPT₊) and ``opt_marginals`` (OPT_M) — and Eigen-Design (``eigen_design``).
ResidualPlanner and ResidualPlanner+ for marginal workloads are the package ``dpsql.residual``.
"""

from dpsql.strategies.basic import identity, kron, workload
from dpsql.strategies.eigen import eigen_design
from dpsql.strategies.hdmm import opt0, opt_kron, opt_union
from dpsql.strategies.hierarchical import Hierarchical, hierarchical
from dpsql.strategies.marginals import opt_marginals
from dpsql.strategies.wavelet import Wavelet, wavelet

__all__ = ["Hierarchical", "Wavelet", "eigen_design", "hierarchical", "identity", "kron", "opt0", "opt_kron",
           "opt_marginals", "opt_union", "wavelet", "workload"]
