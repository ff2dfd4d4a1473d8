"""Matrices over a declared domain, never dense where structure is known: implicit workloads and
strategies (Kronecker products, stacks, marginals, prefixes), their products and pseudo-inverses,
partitions of cells in closed form, and BLAS threading. Numpy and scipy only.
"""
