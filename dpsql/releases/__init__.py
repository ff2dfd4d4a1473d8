"""Releases kept for reuse: the public part of every measurement (its strategy, noisy values and
noise variance, over cells defined by the schema), and answering later statements from them.

Math (numpy only, no SQL or database):
    ``recipes``  a strategy as JSON and back (Kronecker products, stacks, weights, dense or sparse factors);
    ``kept``     one kept measurement y = Ã x + z with its cells, and its JSON form;
    ``reduce``   what a measurement says about a group's cells (the meet of their cells, a Schur complement);
    ``gls``      generalized least squares over the reduced measurements of one data vector, on a group's cells;
    ``information``  what a release store keeps of them across batches and stages: reductions, layouts,
                 each pool's summed information and its factorisation, extended as releases arrive.

Privacy: everything here is post-processing of released noisy values and public plans, so
answering from kept measurements costs nothing (Dwork and Roth, "The Algorithmic Foundations of
Differential Privacy", 2014, Prop. 2.1; Bun and Steinke, "Concentrated Differential Privacy", 2016,
Lemma 1.8 for ρ-zCDP).
"""
