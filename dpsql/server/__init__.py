"""``dpsql serve``: a private SQL endpoint speaking the PostgreSQL wire protocol.

The data, the schema and the ledger stay with the process the data owner runs; analysts
authenticate, send SQL from the clients they already have (psql, psycopg, pandas, JDBC/ODBC BI
tools) and receive noisy answers with their standard errors, each batch charged to the ledger
under the analyst's own cap before anything is released.
"""
