"""The marginal cluster: ResidualPlanner and ResidualPlanner+ and the algebra they share.

ResidualPlanner: Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy
Marginals under Convex Loss Functions" (NeurIPS 2023). ResidualPlanner+ and the secure
discrete-Gaussian measurement: He, Xiao, Toksoz, Ding, Zhang and Kifer, "ResidualPlanner+: a
scalable matrix mechanism for marginals and beyond" (arXiv:2305.08175, 2023).

Modules (math layer: numpy and scipy only, never SQL or a database):
    basis     the marginal algebra in the residual eigenbasis: (AᵀA)⁺ of marginal strategies (OPT_M, linalg)
    lattice   the closure lattice of a batch of marginals, input checks, the tables over the closure
    symmetry  the equitable partition that shrinks ResidualPlanner's selection to one variable per class
    solver    the certified interior-point method for min Σ P/u subject to C u ≤ 1
    rational  exact rational noise parameters and exact ρ accounting
    base      the Selection and Measurements base classes of both planners
    planner   ResidualPlanner: select, measure, reconstruct, variances and covariances of marginals
    pieces    ResidualPlanner+'s per-attribute residual pieces
    plus      ResidualPlanner+: select, measure, reconstruct generalized marginals (range/prefix bases)
    queries   linear queries over one marginal: answers, exact variances, selection weights

Submodules are imported by name (``from dpsql.residual import planner``); this package imports none
of them, so dpsql.matrix.linalg and dpsql.planning.mechanism can use ``basis`` without loading the planners.
"""
