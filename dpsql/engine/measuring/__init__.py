"""Measuring a planned data vector: its plan and budget share (``measurements``), its cells read
(``scan``), its noise drawn and its blocks answered (``measure``), and the covariances an order
statistic's interval needs (``order_statistics``). It imports only ``dpsql.engine.vocabulary`` of
the engine; ``plan`` fills in what it measures, and its reading and drawing run only after the charge.
"""
