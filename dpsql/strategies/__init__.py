"""Measurement strategies: the queries A the matrix mechanism actually answers with noise.

Standard data-independent strategies over one ordered attribute (identity, hierarchical H_b,
Haar wavelet), the workload itself, and Kronecker products of per-attribute strategies.
"""

from dpsql.strategies.basic import identity, kron, workload
from dpsql.strategies.hierarchical import Hierarchical, hierarchical
from dpsql.strategies.wavelet import Wavelet, wavelet

__all__ = ["Hierarchical", "Wavelet", "hierarchical", "identity", "kron", "wavelet", "workload"]
