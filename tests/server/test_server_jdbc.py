"""``dpsql serve`` against PostgreSQL's JDBC driver, the one BI tools (DBeaver, Metabase, Tableau) connect with.

The test writes a small Java program, compiles it with ``javac`` and runs it against a server
process started on a loopback port (stopped by its process id). The program connects with SCRAM,
sets the session's ε with ``Statement.execute``, runs a GROUP BY with ``Statement.executeQuery`` and a
``PreparedStatement`` with a ``?`` parameter (JDBC sends both through the extended protocol: Parse,
Bind, Describe, Execute, Sync; the parameter as ``$1``), and prints each result set's column names
and rows. A batch of several statements is one query string only in the driver's simple query mode
(``?preferQueryMode=simple`` in the URL); by default the driver splits a string at its semicolons
and sends each statement as its own query, so each is its own batch and charge. Skipped without
java, javac or the driver's jar (Debian: ``apt-get install openjdk-17-jdk-headless
libpostgresql-jdbc-java``; another jar: set ``POSTGRESQL_JDBC_JAR``), failed instead when
``DPSQL_REQUIRE_JDBC=1``.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _required import unavailable
from _server_process import PASSWORDS, Served, make_database, start, write_config

from dpsql.server.session import QueryError
from dpsql.server.wire import decode_parameter

JAR = Path(os.environ.get("POSTGRESQL_JDBC_JAR", "/usr/share/java/postgresql.jar"))

PROGRAM = """
import java.sql.*;
import java.util.*;

public class JdbcClient {
    public static void main(String[] args) {
        Properties properties = new Properties();
        properties.setProperty("user", args[1]);
        properties.setProperty("password", args[2]);
        properties.setProperty("sslmode", "disable");
        properties.setProperty("connectTimeout", "30");
        try (Connection connection = DriverManager.getConnection(args[0], properties)) {
            System.out.println("CONNECTED " + connection.getMetaData().getDatabaseProductVersion());
            try (Statement statement = connection.createStatement()) {
                statement.execute("SET dpsql.epsilon = 0.05");
                statement.execute("SET dpsql.reuse = off");
                if (args.length > 3) {  // one string of several statements; every result set in turn
                    boolean rows = statement.execute(args[3]);
                    for (int set = 0; rows || statement.getUpdateCount() != -1; set++) {
                        if (rows) {
                            print("BATCH" + set, statement.getResultSet());
                        }
                        rows = statement.getMoreResults();
                    }
                    return;
                }
                print("GROUPED", statement.executeQuery("SELECT age, COUNT(*) AS people FROM census GROUP BY age"));
            }
            try (PreparedStatement prepared = connection.prepareStatement(
                    "SELECT COUNT(*) AS n FROM census WHERE age >= ? AND sex = ?")) {
                for (int round = 0; round < 6; round++) {  // from the 5th on, a named server-side statement
                    prepared.setInt(1, 10 * (round + 2));
                    prepared.setString(2, round % 2 == 0 ? "F" : "M");
                    print("PREPARED" + round, prepared.executeQuery());
                }
            }
            try (PreparedStatement prepared = connection.prepareStatement(
                    "SELECT COUNT(*) AS n FROM census WHERE income >= ?")) {
                prepared.setBigDecimal(1, new java.math.BigDecimal("50000.00"));  // sent as a binary NUMERIC
                print("NUMERIC", prepared.executeQuery());
            }
        } catch (SQLException error) {
            System.out.println("ERROR " + error.getSQLState() + " " + error.getMessage());
            error.printStackTrace();
            System.exit(3);
        }
    }

    static void print(String label, ResultSet rows) throws SQLException {
        ResultSetMetaData columns = rows.getMetaData();
        List<String> names = new ArrayList<>();
        for (int i = 1; i <= columns.getColumnCount(); i++) {
            names.add(columns.getColumnName(i));
        }
        System.out.println(label + " COLUMNS " + String.join(",", names));
        List<String> types = new ArrayList<>();
        for (int i = 1; i <= names.size(); i++) {
            types.add(columns.getColumnTypeName(i));
        }
        System.out.println(label + " TYPES " + String.join(",", types));
        int count = 0;
        while (rows.next()) {
            List<String> values = new ArrayList<>();
            for (int i = 1; i <= names.size(); i++) {
                values.add(rows.getString(i));
            }
            System.out.println(label + " ROW " + String.join(",", values));
            count++;
        }
        System.out.println(label + " ROWS " + count);
    }
}
"""

REQUIRED = "DPSQL_REQUIRE_JDBC"  # CI sets it to 1 where it installed the driver: a missing piece then fails


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("serve-jdbc")
    make_database(folder)
    server = start(folder, write_config(folder))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled Java client's folder."""
    if shutil.which("java") is None or shutil.which("javac") is None or not JAR.is_file():
        unavailable(f"needs java, javac and PostgreSQL's JDBC driver at {JAR} (apt-get install openjdk-17-jdk-headless "
                    "libpostgresql-jdbc-java)", REQUIRED)
    folder = tmp_path_factory.mktemp("jdbc-client")
    (folder / "JdbcClient.java").write_text(PROGRAM)
    subprocess.run(["javac", "-cp", str(JAR), "-d", str(folder), str(folder / "JdbcClient.java")], check=True,
                   capture_output=True, timeout=300)
    return folder


def run_client(program: Path, served: Served, user: str, password: str, *batch: str,
               options: str = "") -> subprocess.CompletedProcess[str]:
    """Run the Java client; with ``batch``, it sends that one query string instead of its own statements."""
    url = f"jdbc:postgresql://127.0.0.1:{served.port}/people.duckdb{options}"
    return subprocess.run(["java", "-cp", f"{program}{os.pathsep}{JAR}", "JdbcClient", url, user, password, *batch],
                          capture_output=True, text=True, timeout=300)


def result_set(output: str, label: str) -> tuple[list[str], list[str], list[list[str]]]:
    """The column names, their SQL types and the rows the program printed for ``label``."""
    lines = output.splitlines()

    def listed(kind: str) -> list[str]:
        return next(line for line in lines if line.startswith(f"{label} {kind} ")).split(" ", 2)[2].split(",")

    rows = [line.split(" ", 2)[2].split(",") for line in lines if line.startswith(f"{label} ROW ")]
    assert f"{label} ROWS {len(rows)}" in lines
    return listed("COLUMNS"), listed("TYPES"), rows


def test_jdbc_runs_a_statement_and_a_prepared_statement_and_gets_standard_errors(program: Path,
                                                                                  served: Served) -> None:
    before = served.spent("alice")
    result = run_client(program, served, "alice", PASSWORDS["alice"])
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{served.log.read_text()[-3000:]}"
    names, types, rows = result_set(result.stdout, "GROUPED")
    assert names == ["age", "age_upper", "people", "people_stddev"]  # a band's lower and (exclusive) upper end
    assert types[2:] == ["float8", "float8"]  # numbers a BI tool can chart
    assert [(int(row[0]), int(row[1])) for row in rows] == [(low, low + 10) for low in range(0, 100, 10)]
    assert all(float(row[3]) > 0 for row in rows)
    stddev = max(float(row[3]) for row in rows)
    assert abs(sum(float(row[2]) for row in rows) - 5000) < 6 * math.sqrt(len(rows)) * stddev  # 5,000 people
    for round_ in range(6):  # the same PreparedStatement with new parameters, unnamed then named on the server
        names, types, rows = result_set(result.stdout, f"PREPARED{round_}")
        assert names == ["n", "n_stddev"] and types == ["float8", "float8"]
        assert len(rows) == 1 and float(rows[0][1]) > 0
    names, _, rows = result_set(result.stdout, "NUMERIC")
    assert names == ["n", "n_stddev"] and len(rows) == 1
    # eight batches at the session's ε = 0.05, charged to the authenticated analyst
    assert served.spent("alice") == pytest.approx(before + 0.4)


def test_jdbc_with_a_wrong_password_is_refused_and_charges_nothing(program: Path, served: Served) -> None:
    before = served.spent("alice")
    result = run_client(program, served, "alice", "not-her-password")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "ERROR 28P01" in result.stdout and "password authentication failed" in result.stdout
    assert "CONNECTED" not in result.stdout
    assert served.spent("alice") == before


BATCH = "SELECT sex, COUNT(*) AS n FROM census GROUP BY sex; SELECT SUM(income) AS total FROM census WHERE age >= 30"


def test_jdbc_sends_a_batch_as_one_query_string_in_its_simple_query_mode(program: Path, served: Served) -> None:
    history = len(served.ledger().history("people.duckdb", "alice"))
    result = run_client(program, served, "alice", PASSWORDS["alice"], BATCH, options="?preferQueryMode=simple")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{served.log.read_text()[-3000:]}"
    names, _, rows = result_set(result.stdout, "BATCH0")
    assert names == ["sex", "n", "n_stddev"] and sorted(row[0] for row in rows) == ["F", "M"]
    names, _, rows = result_set(result.stdout, "BATCH1")
    assert names == ["total", "total_stddev"] and len(rows) == 1
    charges = served.ledger().history("people.duckdb", "alice")[history:]
    assert [float(charge.cost.value) for charge in charges] == [pytest.approx(0.05)]  # one batch, one charge


def test_jdbc_in_its_default_mode_sends_each_statement_of_a_string_on_its_own(program: Path, served: Served) -> None:
    """The driver splits the string at its semicolons into one extended-protocol query each: two charges."""
    history = len(served.ledger().history("people.duckdb", "alice"))
    result = run_client(program, served, "alice", PASSWORDS["alice"], BATCH)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{served.log.read_text()[-3000:]}"
    assert result_set(result.stdout, "BATCH1")[0] == ["total", "total_stddev"]
    charges = served.ledger().history("people.duckdb", "alice")[history:]
    assert [float(charge.cost.value) for charge in charges] == [pytest.approx(0.05)] * 2


@pytest.mark.parametrize(("fields", "digits", "expected"), [
    ((1, 1, 0, 0), (5,), 50000),  # 5 x 10,000^1
    ((3, 1, 0, 2), (5, 0, 5000), 50000.5),  # BigDecimal("50000.50"): dscale 2, a float
    ((2, 0, 0x4000, 1), (12, 5000), -12.5),
    ((1, -1, 0, 3), (10,), 0.001),  # 10 x 10,000^-1
    ((0, 0, 0, 0), (), 0),
])
def test_a_binary_numeric_parameter_is_decoded(fields: tuple[int, int, int, int], digits: tuple[int, ...],
                                               expected: float) -> None:
    """JDBC's setBigDecimal sends NUMERIC (OID 1700) in PostgreSQL's binary layout (numeric_send)."""
    value = struct.pack("!hhHH", *fields) + struct.pack(f"!{len(digits)}h", *digits)
    decoded = decode_parameter(value, 1, 1700)
    assert decoded == expected and type(decoded) is type(expected)


def test_a_numeric_parameter_that_is_nan_or_malformed_is_refused() -> None:
    with pytest.raises(QueryError, match="NaN or infinite"):
        decode_parameter(struct.pack("!hhHH", 0, 0, 0xC000, 0), 1, 1700)
    with pytest.raises(QueryError, match="malformed"):
        decode_parameter(struct.pack("!hhHH", 2, 0, 0, 0) + b"\x00", 1, 1700)
