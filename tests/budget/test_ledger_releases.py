"""Kept releases in the ledger (issue 19, item 2's storage; item 3's ``budget show`` listing).

Each release is a row of the MAC-chained history next to the charge that paid for it: stored
verbatim, one per charge, only for an existing charge of the same dataset, and failing closed like
a charge when edited, deleted, reordered, inserted or restructured. A version-2 ledger (no
``releases`` table) is read as it is and upgraded in place by the next write session.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _helpers import sql_tampering as _sql
from dpsql.budget.account import Account
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import BatchRecord, Binding, KeptRelease, Ledger, default_path
from dpsql.budget.ledger_format import COLUMNS, HISTORY, head_mac, row_mac  # the ledger's own signing, for forgeries
from dpsql.cli import main
from dpsql.errors import LedgerError, ProgrammingError
from dpsql.schema import Schema

SCHEMA = {"tables": {"people": {"columns": {"age": {"type": "integer", "lower": 0, "upper": 99}}}}}
BOUND = Binding.of(Schema.load(SCHEMA))
RECORD = BatchRecord.of("SELECT COUNT(*) FROM people", None, PrivacyCost(epsilon=0.5),
                        "matrix mechanism, discrete Laplace")
#: Payloads as dpsql.releases might write them; the second has odd spacing and non-ASCII text, kept verbatim.
PAYLOADS = ['{"summary": ["COUNT(*) by age (100 cells)"], "measurements": [1.5, -2.25]}',
            '{ "summary" : ["SUM(income) WHERE age ∈ [20, 40)"],\n  "note": "é\\u00e9" }']


def _charge(ledger: Ledger, dataset: str = "people", analyst: str | None = None) -> int:
    number = ledger.charge(dataset, PrivacyCost(epsilon=0.5), RECORD, analyst=analyst, binding=BOUND).last_charge
    assert number is not None
    return number


@pytest.fixture()
def ledger(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "people.duckdb.dpsql-ledger")
    ledger.set_total("people", PrivacyCost(epsilon=5.0), binding=BOUND)
    return ledger


@pytest.fixture()
def books(ledger: Ledger) -> Ledger:
    """#1 the owner's total; #2 a charge (ana), #3 its release; #4 a charge, #5 its release; #6 a charge."""
    for payload, analyst in zip(PAYLOADS, ("ana", None), strict=True):
        ledger.keep_release("people", _charge(ledger, analyst=analyst), payload)
    _charge(ledger)
    assert [r.id for r in ledger.releases("people")] == [3, 5]
    return ledger


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


# ------------------------------------------------------------------------------- keeping and reading
def test_a_release_is_kept_verbatim_next_to_its_charge_in_the_same_numbering(ledger: Ledger) -> None:
    first = ledger.charge("people", PrivacyCost(epsilon=0.5), RECORD, analyst="ana", binding=BOUND)
    assert first.last_charge == 2 and first.left == Fraction(9, 2)
    assert ledger.keep_release("people", 2, PAYLOADS[1]) == 3
    assert _charge(ledger) == 4  # actions, charges and releases share one numbering
    (kept,) = ledger.releases("people")
    assert kept == KeptRelease(id=3, time=kept.time, dataset="people", analyst="ana", charge=2, payload=PAYLOADS[1])
    assert kept.time.endswith("+00:00") and ledger.releases("firms") == []
    assert ledger.balance("people").last_charge is None  # only a charge's own balance names it


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200))
def test_any_text_comes_back_exactly_and_verifies(tmp_path_factory: pytest.TempPathFactory, payload: str) -> None:
    ledger = Ledger(tmp_path_factory.mktemp("books") / "ledger")
    ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND)
    number = ledger.keep_release("people", _charge(ledger), payload)
    assert [(r.id, r.payload) for r in ledger.releases("people")] == [(number, payload)]


def test_the_ledger_budget_remembers_its_charge_and_the_account_keeps_and_lists(ledger: Ledger) -> None:
    account = Account(ledger=ledger, dataset="people", binding=BOUND)
    budget = account.budget(RECORD)
    assert budget.charge_id is None
    budget.charge(PrivacyCost(epsilon=1.0))
    assert budget.charge_id == 2 and budget.remaining == 4.0
    assert account.keep_release(PAYLOADS[0], 2) == 3
    assert [(r.charge, r.payload, r.analyst) for r in account.releases()] == [(2, PAYLOADS[0], None)]
    assert ledger.balance("people").left == 4  # keeping a release costs nothing


# ------------------------------------------------------------------------------- nothing released without a charge
@pytest.mark.parametrize("charge, phrase", [
    (99, r"no charge #99 on dataset 'people' \(there is no charge #99\)"),
    (1, r"no charge #1 on dataset 'people' \(there is no charge #1\)"),  # #1 is the owner's action
    (3, r"no charge #3 on dataset 'people' \(there is no charge #3\)"),  # #3 is a release
    (8, r"no charge #8 on dataset 'people' \(charge #8 is on dataset 'firms'\)"),
    (-2, r"no charge #-2 on dataset 'people' \(there is no charge #-2\)"),
    (2**64, rf"no charge #{2**64} on dataset 'people' \(there is no charge #{2**64}\)"),
], ids=["missing", "an action", "a release", "another dataset", "negative", "beyond SQLite's integers"])
def test_a_release_without_a_charge_of_its_dataset_is_refused_and_nothing_is_written(books: Ledger, charge: int,
                                                                                     phrase: str) -> None:
    books.set_total("firms", PrivacyCost(epsilon=1.0), binding=BOUND)
    assert _charge(books, "firms") == 8
    before = _rows(books.path, "SELECT count, last FROM head")
    with pytest.raises(LedgerError, match=phrase + r", and nothing is released without a charge\. Nothing was kept"):
        books.keep_release("people", charge, "{}")
    assert _rows(books.path, "SELECT count, last FROM head") == before


def test_a_charge_pays_for_one_release_only(books: Ledger) -> None:
    assert books.keep_release("people", 6, PAYLOADS[0]) == 7
    before = _rows(books.path, "SELECT count, last FROM head")
    for charge, kept in ((2, 3), (4, 5), (6, 7)):
        with pytest.raises(LedgerError, match=rf"charge #{charge} on dataset 'people' already has its release "
                                              rf"\(#{kept}\).*one charge pays for one release\. Nothing was kept"):
            books.keep_release("people", charge, PAYLOADS[1])
    assert _rows(books.path, "SELECT count, last FROM head") == before
    assert [r.charge for r in books.releases("people")] == [2, 4, 6]


@pytest.mark.parametrize("payload, charge, phrase", [
    (b'{"summary": []}', 2, "payload must be a str of Unicode text .*got bytes"),
    ({"summary": []}, 2, "payload must be a str of Unicode text .*got dict"),
    ("\ud800", 2, "a str that is not Unicode"),
    ("{}", "2", "names its charge by id .*got '2'"),
    ("{}", True, "names its charge by id .*got True"),
])
def test_a_payload_that_is_not_text_or_a_charge_that_is_not_an_id_is_a_programming_error(
        books: Ledger, payload: object, charge: object, phrase: str) -> None:
    before = _rows(books.path, "SELECT count, last FROM head")
    with pytest.raises(ProgrammingError, match=phrase):
        books.keep_release("people", charge, payload)  # type: ignore[arg-type]
    assert _rows(books.path, "SELECT count, last FROM head") == before


# ------------------------------------------------------------------------------- failing closed
TAMPERING: dict[str, Callable[[Path], None]] = {
    "edited payload": _sql("UPDATE releases SET payload = replace(payload, '1.5', '2.5') WHERE id = 3"),
    "payload as a blob": _sql("UPDATE releases SET payload = CAST(payload AS BLOB) WHERE id = 3"),
    "moved to another charge": _sql("UPDATE releases SET charge = 6 WHERE id = 5"),
    "edited analyst": _sql("UPDATE releases SET analyst = '' WHERE id = 3"),
    "deleted release": _sql("DELETE FROM releases WHERE id = 3"),
    "deleted last release and rewound head": _sql(
        "UPDATE head SET count = 4, last = (SELECT mac FROM charges WHERE id = 4)", "DELETE FROM charges WHERE id = 6",
        "DELETE FROM releases WHERE id = 5"),
    "swapped releases": _sql("UPDATE releases SET id = -id", "UPDATE releases SET id = 5 WHERE id = -3",
                             "UPDATE releases SET id = 3 WHERE id = -5"),
    "swapped payloads": _sql("UPDATE releases SET payload = CASE id WHEN 3 THEN (SELECT payload FROM releases WHERE "
                             "id = 5) ELSE (SELECT payload FROM releases WHERE id = 3) END"),
    "inserted release": _sql("DROP INDEX releases_by_charge", "INSERT INTO releases SELECT 7, time, dataset, analyst, "
                             "6, payload, mac FROM releases WHERE id = 5"),
    "release made a charge": _sql("DELETE FROM releases WHERE id = 5", "INSERT INTO charges SELECT 5, time, "
                                  "dataset, analyst, batch_hash, sql_hash, mechanism, cost_family, cost, price, mac "
                                  "FROM charges WHERE id = 4"),
    "dropped table, declared version 2": _sql("DROP TABLE releases",
                                              "UPDATE ledger_meta SET value = '2' WHERE key = 'version'"),
}


def _every_operation_fails(ledger: Ledger, phrase: str) -> None:
    for operation in (lambda: ledger.balance("people"), lambda: ledger.history("people"),
                      lambda: ledger.actions("people"), lambda: ledger.releases("people"),
                      lambda: ledger.charge("people", PrivacyCost(epsilon=0.1), RECORD, binding=BOUND),
                      lambda: ledger.set_total("people", PrivacyCost(epsilon=20.0), binding=BOUND),
                      lambda: ledger.keep_release("people", 6, "{}"),
                      lambda: Account(ledger=ledger, dataset="people", binding=BOUND).budget(RECORD)):
        with pytest.raises(LedgerError, match=phrase):
            operation()


@pytest.mark.parametrize("tamper", TAMPERING, ids=list(TAMPERING))
def test_an_edited_deleted_reordered_or_inserted_release_fails_closed(books: Ledger, tamper: str) -> None:
    TAMPERING[tamper](books.path)
    _every_operation_fails(books, "its history does not verify against its key: .*Nothing was run or charged. "
                                  "Restore the file from a backup")


STRUCTURE: dict[str, Callable[[Path], None]] = {
    "dropped column": _sql("ALTER TABLE releases DROP COLUMN analyst"),
    "added column": _sql("ALTER TABLE releases ADD COLUMN note TEXT"),
    "dropped table": _sql("DROP TABLE releases"),
    "version 2 with a releases table": _sql("UPDATE ledger_meta SET value = '2' WHERE key = 'version'"),
    "renamed column": _sql("ALTER TABLE releases RENAME COLUMN charge TO paid_by"),
}


@pytest.mark.parametrize("damage", STRUCTURE, ids=list(STRUCTURE))
def test_a_releases_table_with_wrong_columns_fails_closed(books: Ledger, damage: str) -> None:
    STRUCTURE[damage](books.path)
    _every_operation_fails(books, r"is not an intact dpsql ledger \(table 'releases' has columns .*Restore the file")


def _resign(ledger: Ledger, *statements: str) -> None:
    """What only a key holder can do: change the file, then sign the whole history again."""

    key = bytes.fromhex(ledger.key_path.read_text().strip())
    with sqlite3.connect(ledger.path) as db:
        for statement in statements:
            db.execute(statement)
        rows = sorted((row[0], name, row) for name in HISTORY
                      for row in db.execute(f"SELECT {', '.join(COLUMNS[name])} FROM {name}"))
        last = ""
        for number, name, row in rows:
            last = row_mac(key, last, name, list(row[:-1]))
            db.execute(f"UPDATE {name} SET mac = ? WHERE id = ?", (last, number))
        db.execute("UPDATE head SET count = ?, last = ?, mac = ?", (len(rows), last, head_mac(key, len(rows), last)))


@pytest.mark.parametrize("forgery, phrase", [
    ("UPDATE releases SET charge = 99 WHERE id = 3", "release 3 names no earlier charge of its dataset"),
    ("UPDATE releases SET charge = 1 WHERE id = 3", "release 3 names no earlier charge of its dataset"),
    ("UPDATE releases SET charge = 6 WHERE id = 5", "release 5 names no earlier charge of its dataset"),
    ("UPDATE releases SET dataset = 'firms' WHERE id = 3", "release 3 names no earlier charge of its dataset"),
])
def test_a_signed_release_without_an_earlier_charge_of_its_dataset_fails_closed(books: Ledger, forgery: str,
                                                                                phrase: str) -> None:
    """The chain proves who wrote a row, not that it makes sense: the rule is checked on every open too."""
    _resign(books, forgery)
    _every_operation_fails(books, phrase)


def test_a_signed_second_release_for_one_charge_fails_closed(books: Ledger) -> None:
    _resign(books, "DROP INDEX releases_by_charge", "UPDATE releases SET charge = 2 WHERE id = 5")
    _every_operation_fails(books, r"charge 2 has more than one release")


# ------------------------------------------------------------------------------- version 2
def _as_version_2(ledger: Ledger) -> None:
    """The file a version-2 dpsql wrote: the same tables and history, without ``releases``."""
    assert _rows(ledger.path, "SELECT COUNT(*) FROM releases") == [(0,)]
    _sql("DROP TABLE releases", "UPDATE ledger_meta SET value = '2' WHERE key = 'version'")(ledger.path)


def _version(ledger: Ledger) -> tuple[str, bool]:
    tables = {row[0] for row in _rows(ledger.path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    return str(_rows(ledger.path, "SELECT value FROM ledger_meta WHERE key = 'version'")[0][0]), "releases" in tables


def test_a_version_2_file_is_read_as_it_is_with_no_releases(ledger: Ledger) -> None:
    _charge(ledger)
    _as_version_2(ledger)
    assert ledger.balance("people").left == Fraction(9, 2) and len(ledger.history("people")) == 1
    assert ledger.releases("people") == [] and len(ledger.actions("people")) == 1
    assert _version(ledger) == ("2", False)  # reading changes nothing


@pytest.mark.parametrize("write", ["charge", "set_total", "keep_release"])
def test_a_version_2_file_is_upgraded_in_place_by_a_write_and_keeps_its_history(ledger: Ledger, write: str) -> None:
    _charge(ledger)
    _as_version_2(ledger)
    head = _rows(ledger.path, "SELECT count, last, mac FROM head")
    if write == "charge":
        assert _charge(ledger) == 3
    elif write == "set_total":
        ledger.set_total("people", PrivacyCost(epsilon=6.0), binding=BOUND)
    else:
        assert ledger.keep_release("people", 2, PAYLOADS[0]) == 3
    assert _version(ledger) == ("3", True)
    assert _rows(ledger.path, "SELECT mac FROM charges WHERE id = 2")[0][0] == head[0][1]  # the old rows unchanged
    assert ledger.history("people")[0].id == 2 and ledger.actions("people")[0].id == 1
    assert ledger.keep_release("people", _charge(ledger), PAYLOADS[1]) > 3  # and it takes releases now
    assert ledger.releases("people")[-1].payload == PAYLOADS[1]
    _sql("UPDATE releases SET payload = payload || ' '")(ledger.path)  # ... chained like any other
    with pytest.raises(LedgerError, match="does not verify"):
        ledger.releases("people")


def test_a_refused_write_leaves_a_version_2_file_as_it_was(ledger: Ledger) -> None:
    _as_version_2(ledger)
    with pytest.raises(LedgerError, match="there is no charge #2"):
        ledger.keep_release("people", 2, "{}")
    assert _version(ledger) == ("2", False)


# ------------------------------------------------------------------------------- dpsql budget show
def test_budget_show_lists_the_kept_releases_and_what_they_answer(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    database = tmp_path / "people.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE people AS SELECT CAST(i AS INTEGER) AS age FROM range(10) AS r(i)")
    ledger = Ledger(default_path(database))
    bound = Binding.of(Schema.load(SCHEMA), database)
    ledger.set_total("people.duckdb", PrivacyCost(epsilon=5.0), binding=bound)
    assert main(["budget", "show", "--db", str(database)]) == 0
    assert capsys.readouterr().out.endswith("charges: 0\nkept releases: each analyst reuses only her own (dpsql "
                                            "budget set --share-releases to share them)\nStored releases: none\n")
    payloads = [json.dumps({"summary": ["COUNT(*) by age (100 cells)", "SUM(income)\nby age"], "noise": [2.0]}),
                "not JSON", '{"summary": "a str, not a list"}', '["no", "object"]', '{"summary": [1, 2]}', "{}"]
    for number, payload in enumerate(payloads):
        charged = ledger.charge("people.duckdb", PrivacyCost(epsilon=0.5), RECORD, binding=bound,
                                analyst="ana" if number == 0 else None)
        assert charged.last_charge is not None
        ledger.keep_release("people.duckdb", charged.last_charge, payload)
    assert main(["budget", "show", "--db", str(database)]) == 0
    out = capsys.readouterr().out
    listing = out[out.index("Stored releases:"):].splitlines()
    times = [release.time for release in ledger.releases("people.duckdb")]
    assert listing[:5] == ["Stored releases: 6", f"  release #3 (charge #2, {times[0]}, analyst ana)",
                           "      COUNT(*) by age (100 cells)", "      SUM(income)", "      by age"]
    for number, line in enumerate(listing[5:7]):  # then one release without an analyst ...
        assert line == [f"  release #5 (charge #4, {times[1]})", "      (no summary)"][number]
    assert listing.count("      (no summary)") == 5 and len(listing) == 5 + 2 * 5  # ... and never a crash
    assert out.index("charges: 6") < out.index("Stored releases")
