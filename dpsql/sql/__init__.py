"""SQL front end: parse a batch of aggregate statements (sqlglot) and compile it to workloads."""
