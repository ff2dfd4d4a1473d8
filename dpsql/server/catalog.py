"""Catalog questions answered from the declared schema (placeholder until the full module lands)."""

from __future__ import annotations

import pyarrow as pa

from dpsql.schema import Schema


def is_catalog_query(sql: str) -> bool:
    """Whether ``sql`` asks only about the server (placeholder: ``SELECT version()``)."""
    return sql.strip().lower().startswith("select version()")


class Catalog:
    """Answers catalog questions (placeholder)."""

    def __init__(self, schema: Schema, dataset: str) -> None:
        self.schema, self.dataset = schema, dataset

    def answer(self, sql: str, user: str = "") -> pa.Table:
        return pa.table({"version": ["PostgreSQL 15.0 (dpsql)"]})
