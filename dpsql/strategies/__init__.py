"""Measurement strategies: the queries A the matrix mechanism actually answers with noise.

Standard data-independent strategies over one ordered attribute (identity, hierarchical H_b,
Haar wavelet), the workload itself, Kronecker products of per-attribute strategies, and
workload-optimized ones: HDMM (``opt0``, ``opt_kron``) and Eigen-Design (``eigen_design``).
"""

from dpsql.strategies.basic import identity, kron, workload
from dpsql.strategies.eigen import eigen_design
from dpsql.strategies.hdmm import opt0, opt_kron
from dpsql.strategies.hierarchical import Hierarchical, hierarchical
from dpsql.strategies.wavelet import Wavelet, wavelet

__all__ = ["Hierarchical", "Wavelet", "eigen_design", "hierarchical", "identity", "kron", "opt0", "opt_kron",
           "wavelet", "workload"]
