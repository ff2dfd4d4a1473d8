"""Releases kept for reuse: the public part of every measurement (its strategy, noisy values and
noise variance, over cells defined by the schema), and answering later statements from them.

Math (numpy only, no SQL or database):
    ``recipes``  a strategy as JSON and back (Kronecker products, stacks, weights, dense or sparse factors);
    ``kept``     one kept measurement y = Ã x + z with its cells, and its JSON form;
    ``joint``    the common refinement of several measurements' cells and the lifting of each onto it;
    ``gls``      generalized least squares over every kept measurement of one data vector.

Privacy: everything here is post-processing of released noisy values and public plans, so
answering from kept measurements costs nothing (Dwork and Roth, "The Algorithmic Foundations of
Differential Privacy", 2014, Prop. 2.1; Bun and Steinke, "Concentrated Differential Privacy", 2016,
Lemma 1.8 for ρ-zCDP).
"""
