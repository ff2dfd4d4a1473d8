"""Privacy accounting: costs and their composition (ε-DP, ρ-zCDP), the in-memory budget, and the
durable, tamper-evident ledger with its records, file format, accounts and bindings.
"""
