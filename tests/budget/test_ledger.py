"""The ledger file on its own: exact books, the owner's rules, analysts, and failing closed.

The races between processes and the crashes are in ``test_ledger_processes.py``; the ledger
behind ``dpsql.connect`` is in ``test_dbapi.py``.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.budget.account import Account, LedgerBudget
from dpsql.budget.accounting import Budget, PrivacyBudget, PrivacyCost
from dpsql.budget.ledger import BatchRecord, Binding, Ledger, default_path
from dpsql.errors import BudgetExhaustedError, BudgetNotSetError, LedgerError, OperationalError, PrivacyParameterError
from dpsql.schema import Schema

BATCH = BatchRecord.of("SELECT COUNT(*) FROM people", None, PrivacyCost(epsilon=0.1),
                       "matrix mechanism, discrete Laplace")
SCHEMA = {"tables": {"people": {"columns": {"age": {"type": "integer", "lower": 0, "upper": 99}}}}}
#: The owner's binding for these books: the schema alone (no database file).
BOUND = Binding.of(Schema.load(SCHEMA))


@pytest.fixture()
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "people.duckdb.dpsql-ledger")


def test_default_path_sits_next_to_the_database() -> None:
    assert default_path("data/people.duckdb") == Path("data/people.duckdb.dpsql-ledger")


def test_tenths_add_up_exactly(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=0.3), binding=BOUND)
    for _ in range(3):
        # 0.1 + 0.1 + 0.1 > 0.3 in binary floating point
        ledger.charge("people", PrivacyCost(epsilon=0.1), BATCH, binding=BOUND)
    balance = ledger.balance("people")
    assert balance.limits[0].spent == Fraction(3, 10) and balance.left == 0 and balance.charges == 3
    with pytest.raises(BudgetExhaustedError, match=r"ε=0 left of 0.3\. Nothing was run or charged"):
        ledger.charge("people", PrivacyCost(epsilon=1e-9), BATCH, binding=BOUND)
    assert len(ledger.history("people")) == 3


@settings(max_examples=30)  # each example writes a ledger file with fsync'd transactions
@given(st.lists(st.decimals(min_value="0.001", max_value="2", places=3), min_size=1, max_size=12),
       st.decimals(min_value="0.001", max_value="6", places=3))
def test_charges_fit_exactly_and_sum_exactly(tmp_path_factory: pytest.TempPathFactory, costs: list[Decimal],
                                             total: Decimal) -> None:
    ledger = Ledger(tmp_path_factory.mktemp("books") / "ledger")
    ledger.set_total("people", PrivacyCost(epsilon=float(total)), binding=BOUND)
    expected = Fraction(0)
    for cost in costs:
        if expected + Fraction(cost) <= Fraction(total):
            ledger.charge("people", PrivacyCost(epsilon=float(cost)), BATCH, binding=BOUND)
            expected += Fraction(cost)
        else:
            with pytest.raises(BudgetExhaustedError):
                ledger.charge("people", PrivacyCost(epsilon=float(cost)), BATCH, binding=BOUND)
    assert ledger.balance("people").limits[0].spent == expected == sum(c.price for c in ledger.history("people"))


def test_a_rho_budget_prices_pure_batches_at_epsilon_squared_over_two(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(rho=0.5), binding=BOUND)
    ledger.charge("people", PrivacyCost(epsilon=0.6), BATCH, binding=BOUND)
    ledger.charge("people", PrivacyCost(rho=0.32), BATCH, binding=BOUND)
    charges = ledger.history("people")
    assert [c.price for c in charges] == [Fraction(18, 100), Fraction(32, 100)]
    assert charges[0].cost == PrivacyCost(epsilon=0.6) and ledger.balance("people").left == 0


def test_a_rho_batch_on_an_epsilon_budget_is_refused_and_not_charged(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND)
    with pytest.raises(PrivacyParameterError, match="has no pure ε-DP cost"):
        ledger.charge("people", PrivacyCost(rho=0.1), BATCH, binding=BOUND)
    assert ledger.history("people") == []


def test_a_charge_records_time_hashes_mechanism_and_cost(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND)
    record = BatchRecord.of("SELECT COUNT(*) FROM people WHERE age > ?", [30], PrivacyCost(epsilon=0.5),
                            "ResidualPlanner")
    ledger.charge("people", PrivacyCost(epsilon=0.5), record, analyst="ana", binding=BOUND)
    (charge,) = ledger.history("people")
    assert (charge.sql_hash, charge.batch_hash, charge.mechanism) == (record.sql_hash, record.batch_hash,
                                                                      "ResidualPlanner")
    assert charge.analyst == "ana" and charge.cost == PrivacyCost(epsilon=0.5) and charge.time.endswith("+00:00")
    # the SQL text's hash is SHA-256 of its UTF-8 bytes; the batch's also covers parameters, cost and mechanism
    assert record.sql_hash == hashlib.sha256(b"SELECT COUNT(*) FROM people WHERE age > ?").hexdigest()
    other = BatchRecord.of("SELECT COUNT(*) FROM people WHERE age > ?", [40], PrivacyCost(epsilon=0.5),
                           "ResidualPlanner")
    assert other.sql_hash == record.sql_hash and other.batch_hash != record.batch_hash


def test_the_owner_may_raise_or_lower_a_total_but_not_below_what_is_spent(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND)
    ledger.charge("people", PrivacyCost(epsilon=0.75), BATCH, binding=BOUND)
    with pytest.raises(PrivacyParameterError, match=r"ε=0.75 is already spent"):
        ledger.set_total("people", PrivacyCost(epsilon=0.5), binding=BOUND)
    # down to exactly what is spent
    assert ledger.set_total("people", PrivacyCost(epsilon=0.75), binding=BOUND).left == 0
    assert ledger.set_total("people", PrivacyCost(epsilon=2.0), binding=BOUND).left == Fraction(5, 4)
    assert [(a.action, a.total) for a in ledger.actions("people")] == [
        ("set", PrivacyCost(epsilon=1.0)), ("change", PrivacyCost(epsilon=0.75)), ("change", PrivacyCost(epsilon=2.0))]


def test_the_unit_of_a_dataset_with_charges_cannot_change(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND)
    assert ledger.set_total("people", PrivacyCost(rho=1.0), binding=BOUND).family == "rho"  # no charges yet: allowed
    ledger.charge("people", PrivacyCost(rho=0.1), BATCH, binding=BOUND)
    with pytest.raises(PrivacyParameterError, match="cannot change to epsilon"):
        ledger.set_total("people", PrivacyCost(epsilon=5.0), binding=BOUND)


def test_datasets_in_one_ledger_have_separate_books(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND)
    ledger.set_total("firms", PrivacyCost(epsilon=1.0), binding=BOUND)
    ledger.charge("people", PrivacyCost(epsilon=1.0), BATCH, binding=BOUND)
    assert ledger.balance("firms").left == 1 and ledger.balance("people").left == 0
    with pytest.raises(BudgetNotSetError, match="no privacy budget is set for dataset 'nobody'"):
        ledger.charge("nobody", PrivacyCost(epsilon=0.1), BATCH, binding=BOUND)


def test_an_analyst_draws_from_their_own_total_and_from_the_dataset(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=2.0), binding=BOUND)
    with pytest.raises(PrivacyParameterError, match="give analyst 'ana' a total in epsilon"):
        ledger.set_total("people", PrivacyCost(rho=0.5), analyst="ana")
    ledger.set_total("people", PrivacyCost(epsilon=0.5), analyst="ana")
    ledger.charge("people", PrivacyCost(epsilon=0.5), BATCH, analyst="ana", binding=BOUND)
    with pytest.raises(BudgetExhaustedError, match=r"analyst 'ana' on dataset 'people' has ε=0 left of 0.5"):
        ledger.charge("people", PrivacyCost(epsilon=0.5), BATCH, analyst="ana", binding=BOUND)
    ledger.set_total("people", PrivacyCost(epsilon=2.0), analyst="bo")
    ledger.charge("people", PrivacyCost(epsilon=1.0), BATCH, analyst="bo", binding=BOUND)
    with pytest.raises(BudgetExhaustedError, match=r"dataset 'people' has ε=0.5 left of 2"):
        ledger.charge("people", PrivacyCost(epsilon=0.75), BATCH, analyst="bo", binding=BOUND)  # bo has 1 left
    assert ledger.balance("people").limits[0].spent == Fraction(3, 2)
    assert [c.analyst for c in ledger.history("people", "ana")] == ["ana"]


def test_with_analyst_totals_every_charge_names_an_analyst_with_one(ledger: Ledger) -> None:
    """An unnamed or unknown analyst would evade every cap: once the owner sets one, they are refused."""
    ledger.set_total("people", PrivacyCost(epsilon=2.0), binding=BOUND)
    ledger.charge("people", PrivacyCost(epsilon=0.25), BATCH, binding=BOUND)  # no analyst totals yet: the dataset's
    ledger.charge("people", PrivacyCost(epsilon=0.25), BATCH, analyst="zed", binding=BOUND)
    ledger.set_total("people", PrivacyCost(epsilon=0.5), analyst="ana")
    for analyst, who in ((None, "names no analyst"), ("zed", "analyst 'zed' has none")):
        with pytest.raises(BudgetNotSetError,
                           match=f"has per-analyst totals.*{who}.*dpsql budget set --db DATABASE --analyst"):
            ledger.charge("people", PrivacyCost(epsilon=0.1), BATCH, analyst=analyst, binding=BOUND)
        with pytest.raises(BudgetNotSetError, match=who):
            Account(ledger=ledger, dataset="people", analyst=analyst, binding=BOUND).budget()
    assert len(ledger.history("people")) == 2 and ledger.balance("people").left == Fraction(3, 2)  # reading still works
    ledger.charge("people", PrivacyCost(epsilon=0.5), BATCH, analyst="ana", binding=BOUND)


def test_an_analyst_total_needs_the_dataset_total_first(ledger: Ledger) -> None:
    with pytest.raises(BudgetNotSetError, match="set it before an analyst's"):
        ledger.set_total("people", PrivacyCost(epsilon=1.0), analyst="ana")
    assert not ledger.path.exists()  # the refused first action leaves no half-made file behind
    assert ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND).left == 1


def test_the_ledger_budget_checks_fresh_and_charges_durably(ledger: Ledger) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=1.0), binding=BOUND)
    account = Account(ledger=ledger, dataset="people", binding=BOUND)
    budget = account.budget(BATCH)
    other = account.budget(BATCH)  # a second connection, say in another process
    other.charge(PrivacyCost(epsilon=0.75))
    with pytest.raises(BudgetExhaustedError):
        budget.check(PrivacyCost(epsilon=0.5))  # check reads the ledger again: what `other` spent counts
    budget.charge(PrivacyCost(epsilon=0.25))
    assert budget.remaining == 0 and budget.total == PrivacyCost(epsilon=1.0) and budget.spent == 1
    assert Ledger(ledger.path).balance("people").left == 0  # on disk, for anyone who opens the file


def test_reading_never_creates_the_file(ledger: Ledger) -> None:
    for read in (lambda: ledger.balance("people"), lambda: ledger.history("people"),
                 lambda: ledger.charge("people", PrivacyCost(epsilon=0.1), BATCH, binding=BOUND)):
        with pytest.raises(BudgetNotSetError, match=r"no ledger file at .* dpsql budget set"):
            read()
    assert not ledger.path.exists()


# ------------------------------------------------------------------------------- failing closed
def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(path.stat().st_size))


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _zeroed_page(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[2 * 4096:2 * 4096 + 100] = bytes(100)  # the header of the third page (a table's b-tree)
    path.write_bytes(bytes(data))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _foreign(path: Path) -> None:
    path.unlink()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")


def _tampered_price(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE charges SET price = 'a lot'")


def _negative_total(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE actions SET total = '-5'")


def _other_version(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE ledger_meta SET value = '99' WHERE key = 'version'")


def _dropped_column(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE charges DROP COLUMN sql_hash")


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


DAMAGE: list[Callable[[Path], None]] = [_garbage, _truncated, _zeroed_page, _empty, _foreign, _tampered_price,
                                        _negative_total, _other_version, _dropped_column, _directory]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__[1:])
def test_a_damaged_ledger_fails_closed_for_every_operation(ledger: Ledger, damage: Callable[[Path], None]) -> None:
    ledger.set_total("people", PrivacyCost(epsilon=10.0), binding=BOUND)
    ledger.charge("people", PrivacyCost(epsilon=1.0), BATCH, binding=BOUND)
    damage(ledger.path)
    for operation in (lambda: ledger.balance("people"), lambda: ledger.history("people"),
                      lambda: ledger.charge("people", PrivacyCost(epsilon=0.1), BATCH, binding=BOUND),
                      lambda: ledger.set_total("people", PrivacyCost(epsilon=20.0), binding=BOUND),
                      lambda: Account(ledger=ledger, dataset="people", binding=BOUND).budget(BATCH)):
        with pytest.raises(LedgerError, match=r"Nothing was run or charged. Restore the file from a backup") as caught:
            operation()
        assert isinstance(caught.value, OperationalError)


def test_both_budgets_implement_the_protocol_and_the_ledger_one_mirrors_nothing(ledger: Ledger) -> None:
    """``PrivacyBudget`` is the one interface: the ledger's budget is not a ``Budget`` with copied fields, and
    ``durable`` tells the two apart (a chosen random source never draws on a ledger)."""
    ledger.set_total("people", PrivacyCost(rho=0.5), binding=BOUND)
    on_file = Account(ledger=ledger, dataset="people", binding=BOUND).budget(BATCH)
    in_memory = Budget(rho=0.5)
    assert not issubclass(LedgerBudget, Budget) and not isinstance(on_file, Budget)
    assert isinstance(on_file, PrivacyBudget) and isinstance(in_memory, PrivacyBudget)
    assert on_file.durable and not in_memory.durable
    for budget in (on_file, in_memory):
        budget.charge(PrivacyCost(epsilon=0.6))  # 0.18 in ρ
        assert (budget.total, budget.spent, budget.left) == (PrivacyCost(rho=0.5), 0.18, Fraction(8, 25))
        assert budget.remaining == 0.32 and budget.price(PrivacyCost(rho=0.1)) == Fraction(1, 10)
