"""Planning a batch, no data read: ``prepare`` weighs the statements, plans every route (``routes``:
the statement groups of ``group_route``, with ``grouping``, ``vector_plans``, ``sum_answering``,
``weighing``, ``guard`` and ``thresholds``; ResidualPlanner in ``residual_route``) within the bounds of
``planning_size``, and chooses one. Each route plan also carries its ``answer`` (what it releases:
``metadata``), which reads data only when ``run`` calls it after the charge. It imports
``measuring`` and ``dpsql.engine.vocabulary`` of the engine, never ``reuse`` or the passes above it.
"""
