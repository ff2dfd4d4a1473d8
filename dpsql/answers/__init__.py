"""From released values to what the analyst reads: Arrow tables with standard errors, derived
outputs (ratios, arithmetic, HAVING) with exact or delta-method errors, and quantiles and
MIN/MAX with their intervals. Post-processing only: nothing here reads data or draws noise.
"""
