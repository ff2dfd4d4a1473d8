"""``dpsql serve``: run the PostgreSQL-protocol server (the data owner), and make password verifiers.

The server needs the optional extra ``dpsql[serve]`` (the pygwire protocol codec); everything else
in dpsql works without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import logging
import sys
from pathlib import Path

from dpsql.cli import budget as budget_cli
from dpsql.errors import ProgrammingError


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``dpsql serve``."""
    serve = commands.add_parser("serve", help="serve the dataset to authenticated analysts over the PostgreSQL "
                                "wire protocol (psql, psycopg, pandas, JDBC/ODBC BI tools)")
    serve.add_argument("--db", help=budget_cli.DB_HELP)
    serve.add_argument("--tables", type=budget_cli.table_map, help=budget_cli.TABLES_HELP)
    serve.add_argument("--schema", type=Path, help="the public schema (TOML)")
    serve.add_argument("--config", type=Path, help="the server's configuration: address, TLS, analysts (TOML)")
    serve.add_argument("--host", help="listen on this address (default: the configuration's, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen on this port (0: any free port; default: the "
                       "configuration's, else 5433)")
    serve.add_argument("--ledger", type=Path, help="the ledger file (default: next to the database)")
    serve.add_argument("--dataset", help="the dataset's name in the ledger (default: the database file's name)")
    serve.add_argument("--hash-password", action="store_true",
                       help="read a password (from the terminal, or one line of standard input) and print its "
                       "SCRAM-SHA-256 verifier for an analyst's password = ... in the configuration; serve nothing")
    serve.set_defaults(handler=_serve)


def _serve(arguments: argparse.Namespace) -> int:
    from dpsql.server.scram import Verifier

    if arguments.hash_password:
        password = (getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n"))
        if not password:
            raise ProgrammingError("an empty password: type one (or pipe one line to standard input).")
        print(Verifier.of_password(password).text())
        return 0
    missing = [f"--{name}" for name in ("db", "schema", "config") if getattr(arguments, name) is None]
    if missing:
        raise ProgrammingError(f"dpsql serve needs {', '.join(missing)}: the database, its public schema and the "
                               "server's configuration (see docs/serve.md, 'Serving analysts').")
    try:
        from dpsql.server.server import DpsqlServer, serve_forever
    except ModuleNotFoundError as err:
        raise ProgrammingError(f"dpsql serve needs the optional extra: pip install 'dpsql[serve]' ({err}).") from None
    from dpsql.schema import Schema
    from dpsql.server.config import ServeConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("sqlglot").setLevel(logging.WARNING)  # its INFO notes on catalog rewrites are not the owner's
    config = ServeConfig.load(arguments.config)
    overrides = {key: value for key, value in (("host", arguments.host), ("port", arguments.port)) if value is not None}
    config = dataclasses.replace(config, **overrides)
    server = DpsqlServer(config, database=arguments.db, schema=Schema.load(arguments.schema), ledger=arguments.ledger,
                         dataset=arguments.dataset, tables=arguments.tables)
    serve_forever(server, announce=lambda line: print(line, flush=True))
    return 0
