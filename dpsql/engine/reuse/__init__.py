"""Reuse and accuracy targets, both decided before any data is read: ``free`` splits a batch into
statements earlier releases answer well enough (``reuse``: GLS over kept measurements;
``release_store``: where they are kept) and statements to measure; ``accuracy_target`` finds the least
cost meeting a standard-error target from ``predicted`` errors. It imports ``plan``, ``measuring``,
``dpsql.engine.postprocess`` and ``dpsql.engine.vocabulary``; ``request``, ``run`` and ``explain``
import it.
"""
